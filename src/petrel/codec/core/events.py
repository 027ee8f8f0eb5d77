"""CORE events: one immutable class per frame type.

Events are frozen ``msgspec.Struct`` classes (the msgspec twin of a frozen
dataclass: slots, immutability, equality) encoded ``array_like``, so a frame's
payload is the msgpack array of its fields in declaration order. Each class
names its frame type in ``TYPE``; :data:`EVENT_TYPES` maps types to classes and
:func:`register` lets later subsystems (cluster links, replication) add frame
types in their reserved ranges.

Field conventions: ``corr`` is a correlation id a RESULT (or BROWSE_RESULT)
answers; ``session`` and ``consumer`` are ids chosen by the client;
``routing_type`` is -1 (the address decides), 0 ANYCAST or 1 MULTICAST; times
are epoch milliseconds (0 = none). Message ``properties`` hold scalars only:
None, bool, int, float, str or bytes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from .frames import RANGES, FrameRange, FrameType

__all__ = [
    "Event",
    "EVENT_TYPES",
    "register",
    "Connect",
    "Connected",
    "Ping",
    "Pong",
    "Disconnect",
    "Error",
    "Member",
    "Topology",
    "Result",
    "CreateAddress",
    "DeleteAddress",
    "CreateQueue",
    "DeleteQueue",
    "Query",
    "Browse",
    "Browsed",
    "BrowseResult",
    "CreateSession",
    "CloseSession",
    "Send",
    "SendChunk",
    "SendConfirm",
    "SendFailed",
    "CreateConsumer",
    "CloseConsumer",
    "Credit",
    "Deliver",
    "DeliverChunk",
    "Ack",
    "Nack",
    "Commit",
    "Rollback",
    "CLIENT_EVENTS",
    "SERVER_EVENTS",
]


class Event(msgspec.Struct, frozen=True, array_like=True):
    """Base of every CORE event."""

    TYPE: ClassVar[int] = 0


# -- connection control --------------------------------------------------------------------


class Connect(Event, frozen=True, array_like=True):
    """Client -> server, first frame: versions and capabilities offered, credentials.

    ``ttl`` is how long (ms) the server should wait without hearing from the
    client before dropping it; -1 never. ``connection_id`` names the logical
    connection across reconnects.
    """

    TYPE: ClassVar[int] = FrameType.CONNECT
    versions: list[int]
    capabilities: list[str] = []
    user: str | None = None
    password: str | None = None
    client_id: str | None = None
    ttl: int = 60000
    connection_id: str = ""
    client: str = ""


class Connected(Event, frozen=True, array_like=True):
    """Server -> client: the chosen version and capabilities, who the server is.

    ``ttl`` is how long (ms) the server waits for the client; the client pings
    well within it. ``large_message_size`` is the body size above which bodies
    travel in chunks.
    """

    TYPE: ClassVar[int] = FrameType.CONNECTED
    version: int
    capabilities: list[str] = []
    server: str = ""
    node_id: str = ""
    connection_id: str = ""
    ttl: int = 60000
    max_frame_size: int = 0
    large_message_size: int = 0


class Ping(Event, frozen=True, array_like=True, gc=False):
    TYPE: ClassVar[int] = FrameType.PING
    nonce: int = 0


class Pong(Event, frozen=True, array_like=True, gc=False):
    TYPE: ClassVar[int] = FrameType.PONG
    nonce: int = 0


class Disconnect(Event, frozen=True, array_like=True):
    """Either side closes the connection; from a server, ``redirect`` names where to go
    instead (a ``host:port`` connector or a URL)."""

    TYPE: ClassVar[int] = FrameType.DISCONNECT
    code: int = 0
    reason: str = ""
    redirect: str | None = None


class Error(Event, frozen=True, array_like=True):
    """A fatal error; the sender closes the connection after it."""

    TYPE: ClassVar[int] = FrameType.ERROR
    code: int
    message: str


class Member(msgspec.Struct, frozen=True, array_like=True):
    """One node of the topology: its id, live connector and backup connector."""

    node_id: str
    live: str | None = None
    backup: str | None = None
    leaving: bool = False


class Topology(Event, frozen=True, array_like=True):
    """Server -> client: the nodes a client may fail over to. ``event_id`` grows with each
    change so stale updates can be ignored; ``complete`` says ``members`` is the whole set."""

    TYPE: ClassVar[int] = FrameType.TOPOLOGY
    event_id: int
    members: list[Member] = []
    complete: bool = True


# -- requests ---------------------------------------------------------------------------------


class Result(Event, frozen=True, array_like=True):
    """Server -> client: the outcome of request ``corr`` (code 0 = OK) and its value."""

    TYPE: ClassVar[int] = FrameType.RESULT
    corr: int
    code: int = 0
    message: str = ""
    value: Any = None


class CreateAddress(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.CREATE_ADDRESS
    corr: int
    name: str
    routing_types: list[int] = []


class DeleteAddress(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.DELETE_ADDRESS
    corr: int
    name: str


class CreateQueue(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.CREATE_QUEUE
    corr: int
    name: str
    address: str
    routing_type: int = 0
    durable: bool = True
    filter: str | None = None
    temporary: bool = False
    exists_ok: bool = False
    #: exclusive, last_value_key, non_destructive, ring_size, group_rebalance, group_buckets
    attributes: dict[str, Any] = {}


class DeleteQueue(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.DELETE_QUEUE
    corr: int
    name: str


class Query(Event, frozen=True, array_like=True):
    """Ask about a ``"queue"`` or an ``"address"``; the RESULT value is a map, or None if absent."""

    TYPE: ClassVar[int] = FrameType.QUERY
    corr: int
    kind: str
    name: str


class Browse(Event, frozen=True, array_like=True):
    """Read waiting messages of a queue without consuming them, in dispatch order."""

    TYPE: ClassVar[int] = FrameType.BROWSE
    corr: int
    queue: str
    filter: str | None = None
    offset: int = 0
    limit: int = 100


class Browsed(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One browsed message."""

    seq: int
    message_id: int
    address: str
    durable: bool
    priority: int
    expiration: int
    timestamp: int
    scheduled: int
    delivery_count: int
    properties: dict[str, Any]
    body: bytes


class BrowseResult(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.BROWSE_RESULT
    corr: int
    messages: list[Browsed] = []
    more: bool = False


# -- sessions -------------------------------------------------------------------------------


class CreateSession(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.CREATE_SESSION
    corr: int
    session: int
    transacted: bool = False


class CloseSession(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.CLOSE_SESSION
    corr: int
    session: int


class Send(Event, frozen=True, array_like=True, gc=False):
    """Client -> server: one message. With ``more`` the body continues in SEND_CHUNK frames
    (a large message); the message counts as sent when its last chunk arrives."""

    TYPE: ClassVar[int] = FrameType.SEND
    session: int
    address: str
    routing_type: int
    durable: bool
    priority: int
    expiration: int
    timestamp: int
    scheduled: int
    properties: dict[str, Any]
    body: bytes
    more: bool = False


class SendChunk(Event, frozen=True, array_like=True, gc=False):
    TYPE: ClassVar[int] = FrameType.SEND_CHUNK
    session: int
    body: bytes
    more: bool = False


class SendConfirm(Event, frozen=True, array_like=True, gc=False):
    """Server -> client: the first ``count`` messages sent on the session are handled
    (durable ones are on disk). Cumulative: counts only grow."""

    TYPE: ClassVar[int] = FrameType.SEND_CONFIRM
    session: int
    count: int


class SendFailed(Event, frozen=True, array_like=True):
    """Server -> client: message number ``number`` (1-based) of the session was refused.
    It is still covered by the next SEND_CONFIRM."""

    TYPE: ClassVar[int] = FrameType.SEND_FAILED
    session: int
    number: int
    code: int
    message: str


class CreateConsumer(Event, frozen=True, array_like=True):
    """Consume from ``queue`` if given (it must exist), else from ``address``: ANYCAST
    consumes its queue, MULTICAST subscribes (durably when ``subscription`` is set).
    ``window`` is the consumer window in bytes (-1 unlimited, 0 one message at a time);
    ``auto_ack`` settles each message as it is sent (at most once)."""

    TYPE: ClassVar[int] = FrameType.CREATE_CONSUMER
    corr: int
    session: int
    consumer: int
    address: str = ""
    routing_type: int = -1
    queue: str = ""
    filter: str | None = None
    subscription: str | None = None
    window: int = 1024 * 1024
    auto_ack: bool = False


class CloseConsumer(Event, frozen=True, array_like=True):
    """Stop a consumer. ``returned`` lists deliveries the client never handed to its
    application (prefetched): they go back first, without counting a delivery; whatever
    else the consumer holds unacknowledged is redelivered as usual."""

    TYPE: ClassVar[int] = FrameType.CLOSE_CONSUMER
    corr: int
    session: int
    consumer: int
    returned: list[int] = []


class Credit(Event, frozen=True, array_like=True, gc=False):
    """Client -> server: ``credit`` more bytes may be delivered to the consumer."""

    TYPE: ClassVar[int] = FrameType.CREDIT
    session: int
    consumer: int
    credit: int


class Deliver(Event, frozen=True, array_like=True, gc=False):
    """Server -> client: a message for a consumer. ``seq`` identifies the delivery for
    ACK/NACK; ``size`` is the whole body's size (chunks follow in DELIVER_CHUNK when
    ``more``)."""

    TYPE: ClassVar[int] = FrameType.DELIVER
    session: int
    consumer: int
    seq: int
    delivery_count: int
    message_id: int
    address: str
    durable: bool
    priority: int
    expiration: int
    timestamp: int
    properties: dict[str, Any]
    body: bytes
    size: int
    more: bool = False


class DeliverChunk(Event, frozen=True, array_like=True, gc=False):
    TYPE: ClassVar[int] = FrameType.DELIVER_CHUNK
    session: int
    consumer: int
    body: bytes
    more: bool = False


class Ack(Event, frozen=True, array_like=True, gc=False):
    """Settle deliveries: the listed ``seqs``, or with ``cumulative`` everything the consumer
    holds up to and including ``seqs[-1]``. A non-zero ``corr`` asks for a RESULT once the
    acknowledgement is durable."""

    TYPE: ClassVar[int] = FrameType.ACK
    session: int
    consumer: int
    seqs: list[int]
    cumulative: bool = False
    corr: int = 0


class Nack(Event, frozen=True, array_like=True, gc=False):
    """Give deliveries back for redelivery, in the order listed (each goes back to the head
    of its queue). Their delivery count goes up, unless ``undelivered`` says the client
    never handed them to its application (prefetched messages it drops)."""

    TYPE: ClassVar[int] = FrameType.NACK
    session: int
    consumer: int
    seqs: list[int]
    corr: int = 0
    undelivered: bool = False


class Commit(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.COMMIT
    corr: int
    session: int


class Rollback(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = FrameType.ROLLBACK
    corr: int
    session: int


#: Frame type -> event class.
EVENT_TYPES: dict[int, type[Event]] = {}

#: Frame types each side may send once connected.
CLIENT_EVENTS: set[int] = set()
SERVER_EVENTS: set[int] = set()


def register(cls: type[Event], *, client: bool, server: bool) -> type[Event]:
    """Add a frame type (for cluster, replication or extension frames of later subsystems).

    ``client``/``server`` say which side may send it once connected.
    """
    code = int(cls.TYPE)
    if not any(lo <= code <= hi for lo, hi in RANGES.values()):
        raise ValueError(f"frame type {code:#x} is outside every range")
    existing = EVENT_TYPES.get(code)
    if existing is not None and existing is not cls:
        raise ValueError(f"frame type {code:#x} is already {existing.__name__}")
    EVENT_TYPES[code] = cls
    if client:
        CLIENT_EVENTS.add(code)
    if server:
        SERVER_EVENTS.add(code)
    return cls


def range_of(code: int) -> FrameRange | None:
    for name, (lo, hi) in RANGES.items():
        if lo <= code <= hi:
            return name
    return None


for _cls in (Ping, Pong, Disconnect, Error):
    register(_cls, client=True, server=True)
for _cls in (Connected, Topology, Result, BrowseResult, SendConfirm, SendFailed, Deliver, DeliverChunk):
    register(_cls, client=False, server=True)
for _cls in (
    Connect, CreateAddress, DeleteAddress, CreateQueue, DeleteQueue, Query, Browse,
    CreateSession, CloseSession, Send, SendChunk, CreateConsumer, CloseConsumer, Credit,
    Ack, Nack, Commit, Rollback,
):
    register(_cls, client=True, server=False)
del _cls
