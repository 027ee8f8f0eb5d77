"""The cluster's own names, which clients may not write: ``$.petrel.*`` and ``_PETREL_*``.

The cluster keeps messages in transit in internal queues (``$.petrel.sf.<cluster>.<node>``,
the store-and-forward queues) and steers them with message properties named ``_PETREL_*``
(`petrel.core.remote`: the binding keys a copy is routed to on the next hop, the send it
belongs to). A client that sent to those addresses, consumed or deleted those queues, or set
those properties could route messages to any node's queues, forge duplicates or swallow
messages in transit. Only the cluster's own subject (`petrel.security.subject.INTERNAL`) may;
the cluster's bridges, replication and scale-down use their own frames, so in practice no
client connection ever does.

The adapters call `internal_write_problem` (a send) and `internal_name_problem` (creating,
deleting or consuming a queue or address), and refuse with the text they return. A client's
``_PETREL_*`` properties are dropped from its send (`drop_reserved`) rather than refused: a
message that crossed a bridge carries one (its send's identity) to its consumers, and an
application that sends a received message on, headers and all, must not be refused for it.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from petrel.core.redistribution import INTERNAL_PREFIX

__all__ = ["INTERNAL_PREFIX", "RESERVED_PROPERTY_PREFIX", "drop_reserved", "internal_name_problem",
           "internal_write_problem"]

#: Message properties the cluster sets (petrel.core.remote: ROUTE_TO, SYNC_FIRST, INSTANCE...).
RESERVED_PROPERTY_PREFIX = "_PETREL_"


def _internal(adapter: object) -> bool:
    """Whether the adapter's client logged in as the cluster itself, security enabled or not."""
    access = getattr(adapter, "access", None)  # the connection's petrel.server.access.Access
    subject = getattr(access, "subject", None)
    return subject is not None and subject.internal


def internal_name_problem(adapter: object, *names: str | None) -> str | None:
    """Why the adapter's client may not create, delete or consume `names`; None when it may."""
    for name in names:
        if name and name.startswith(INTERNAL_PREFIX) and not _internal(adapter):
            return (f"{name!r} is internal to the cluster (names starting with {INTERNAL_PREFIX!r} are the "
                    "broker's own): clients may not send to, create, delete or consume it")
    return None


def internal_write_problem(adapter: object, address: str) -> str | None:
    """Why the adapter's client may not send to `address`; None when it may."""
    if address.startswith(INTERNAL_PREFIX):
        return internal_name_problem(adapter, address)
    return None


def drop_reserved(adapter: object, properties: MutableMapping[str, object] | None) -> None:
    """Remove the cluster's ``_PETREL_*`` properties from a client's send (the cluster's own
    subject keeps them)."""
    if properties and any(key.startswith(RESERVED_PROPERTY_PREFIX) for key in properties) \
            and not _internal(adapter):
        for key in [k for k in properties if k.startswith(RESERVED_PROPERTY_PREFIX)]:
            del properties[key]
