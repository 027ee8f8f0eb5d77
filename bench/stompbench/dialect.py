"""How each broker wants its STOMP spoken: the few headers that differ between them."""

from __future__ import annotations

from dataclasses import dataclass

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Dialect:
    """Per-broker STOMP details the load generator needs.

    ``ack`` is ``"auto"`` or ``"client"``; with ``"client"`` (cumulative in STOMP
    1.2) the consumer acknowledges the newest message every ``ack_every``
    deliveries, which must stay below the prefetch window.

    ``tls_ca``: a PEM CA file; when set the clients speak TLS and verify the broker's
    certificate (and host name) against it.
    """

    connect_headers: Headers = (("host", "localhost"),)
    subscribe_headers: Headers = ()
    ack: str = "auto"
    ack_every: int = 250
    persistent_headers: Headers = (("persistent", "true"),)
    queue_prefix: str = "/queue/"
    topic_prefix: str = "/topic/"
    tls_ca: str = ""

    def destination(self, logical: str) -> str:
        """``queue:NAME`` or ``topic:NAME`` in this broker's STOMP naming."""
        kind, _, name = logical.partition(":")
        if kind == "queue":
            return self.queue_prefix + name
        if kind == "topic":
            return self.topic_prefix + name
        raise ValueError(f"destination must be queue:NAME or topic:NAME, not {logical!r}")


PREFETCH = 1000

ACTIVEMQ = Dialect(
    subscribe_headers=(("activemq.prefetchSize", str(PREFETCH)),),
)

RABBITMQ = Dialect(
    # RabbitMQ maps the STOMP host header onto a virtual host.
    connect_headers=(("host", "/"), ("login", "guest"), ("passcode", "guest")),
    # prefetch-count only bounds unacknowledged deliveries, so it needs client acks;
    # with ack:auto RabbitMQ would push without any window.
    subscribe_headers=(("prefetch-count", str(PREFETCH)),),
    ack="client",
)

PETREL = Dialect(
    subscribe_headers=(
        ("activemq.prefetchSize", str(PREFETCH)),
        ("consumer-window-size", str(PREFETCH * 1024 * 2)),
    ),
)

PETREL_SECURE = Dialect(
    connect_headers=(("host", "localhost"), ("login", "bench"), ("passcode", "bench-password")),
    subscribe_headers=PETREL.subscribe_headers,
)

SINK = Dialect()
