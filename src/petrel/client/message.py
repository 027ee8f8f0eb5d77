"""Messages as the client sees them: what an application sends and what a consumer receives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from petrel.codec.core import Browsed, Deliver

if TYPE_CHECKING:
    from petrel.client.consumer import Acknowledger

__all__ = ["Message", "DUPLICATE_ID", "parse_destination"]

#: The duplicate-detection property (Artemis spelling); the broker drops a repeat of an id.
DUPLICATE_ID = "_AMQ_DUPL_ID"

QUEUE_PREFIX = "queue://"
TOPIC_PREFIX = "topic://"


def parse_destination(destination: str) -> tuple[str, int]:
    """``queue://X`` -> (X, ANYCAST), ``topic://X`` -> (X, MULTICAST), ``X`` -> (X, the address decides)."""
    if destination.startswith(QUEUE_PREFIX):
        return destination[len(QUEUE_PREFIX) :], 0
    if destination.startswith(TOPIC_PREFIX):
        return destination[len(TOPIC_PREFIX) :], 1
    return destination, -1


class Message:
    """A message: a body (bytes), properties (scalar values) and delivery settings.

    ``durable`` messages survive a broker restart once the send is confirmed (the default,
    as in JMS). ``expiration`` and ``scheduled`` are epoch milliseconds (0 = none);
    ``ttl`` / ``delay`` (ms from now) are shortcuts for them. ``duplicate_id`` sets the
    ``_AMQ_DUPL_ID`` property the broker's duplicate detection is keyed on.

    Received messages also carry ``message_id``, ``address``, ``delivery_count`` (0 the
    first time) and can be settled with :meth:`ack` / :meth:`nack`.
    """

    __slots__ = (
        "body",
        "properties",
        "durable",
        "priority",
        "expiration",
        "timestamp",
        "scheduled",
        "message_id",
        "address",
        "delivery_count",
        "seq",
        "_owner",
        "_epoch",
        "_size",
    )

    def __init__(
        self,
        body: bytes | bytearray | str = b"",
        properties: dict[str, Any] | None = None,
        *,
        durable: bool = True,
        priority: int = 4,
        expiration: int = 0,
        timestamp: int = 0,
        scheduled: int = 0,
        duplicate_id: str | None = None,
        ttl: int | None = None,
        delay: int | None = None,
    ) -> None:
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, bytes):
            body = bytes(body)
        self.body = body
        self.properties = dict(properties) if properties else {}
        self.durable = durable
        if not 0 <= priority <= 9:
            raise ValueError(f"priority must be 0..9, not {priority}")
        self.priority = priority
        self.expiration = expiration
        self.timestamp = timestamp
        self.scheduled = scheduled
        if ttl is not None or delay is not None:
            from petrel.core.message import now_ms

            now = now_ms()
            if ttl is not None:
                self.expiration = now + ttl
            if delay is not None:
                self.scheduled = now + delay
        if duplicate_id is not None:
            self.properties[DUPLICATE_ID] = duplicate_id
        self.message_id = 0
        self.address = ""
        self.delivery_count = 0
        self.seq = 0
        self._owner: Acknowledger | None = None
        self._epoch = 0
        self._size = len(body)

    @classmethod
    def _delivered(cls, e: Deliver, body: bytes, owner: Acknowledger, epoch: int) -> Message:
        m = cls.__new__(cls)
        m.body = body
        m.properties = e.properties
        m.durable = e.durable
        m.priority = e.priority
        m.expiration = e.expiration
        m.timestamp = e.timestamp
        m.scheduled = 0
        m.message_id = e.message_id
        m.address = e.address
        m.delivery_count = e.delivery_count
        m.seq = e.seq
        m._owner = owner
        m._epoch = epoch
        m._size = e.size
        return m

    @classmethod
    def _browsed(cls, b: Browsed) -> Message:
        m = cls.__new__(cls)
        m.body = b.body
        m.properties = b.properties
        m.durable = b.durable
        m.priority = b.priority
        m.expiration = b.expiration
        m.timestamp = b.timestamp
        m.scheduled = b.scheduled
        m.message_id = b.message_id
        m.address = b.address
        m.delivery_count = b.delivery_count
        m.seq = b.seq
        m._owner = None
        m._epoch = 0
        m._size = len(b.body)
        return m

    # -- conveniences ---------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return self.body.decode()

    @property
    def duplicate_id(self) -> str | None:
        value = self.properties.get(DUPLICATE_ID)
        return None if value is None else str(value)

    @duplicate_id.setter
    def duplicate_id(self, value: str | None) -> None:
        if value is None:
            self.properties.pop(DUPLICATE_ID, None)
        else:
            self.properties[DUPLICATE_ID] = value

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 0

    # -- settling (received messages) -------------------------------------------------------------

    def ack(self, *, cumulative: bool = False) -> None:
        """Acknowledge this message (with ``cumulative``, also every earlier one of its consumer).

        Acks are batched and sent without waiting; in a transacted session they settle at
        commit. Acking a message whose connection is lost (a failover is done or under way)
        does nothing: the broker redelivers it (at least once).
        """
        if self._owner is None:
            raise ValueError("only a received message can be acknowledged")
        self._owner._ack(self, cumulative)

    def nack(self) -> None:
        """Give the message back: the broker redelivers it (or dead-letters it). Like `ack`,
        nothing is sent once the message's connection is lost."""
        if self._owner is None:
            raise ValueError("only a received message can be given back")
        self._owner._nack(self)

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 40 else self.body[:40] + b"..."
        extra = f" id={self.message_id} dc={self.delivery_count}" if self.message_id else ""
        return f"<Message{extra} {body!r} props={self.properties}>"
