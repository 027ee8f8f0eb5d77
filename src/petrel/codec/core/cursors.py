"""CORE frames of sequence ranges and named cursors (types 0x18-0x1F, the end of the request
range), registered with the codec on import.

Each request carries a correlation id. A bad request (unknown queue or cursor, a reversed or
negative range) is answered by a RESULT with its error code and a message; otherwise:

- QUEUE_SEQS -> RESULT ``{"node_id", "queue", "earliest_seq", "tail_seq"}``
- BROWSE_RANGE -> RANGE_RESULT: the messages held with ``from_seq <= seq < to_seq`` in sequence
  order (at most ``max``), and ``next_seq``: the numbers of ``[from_seq, next_seq)`` not among
  them are absent (acknowledged, expired, deleted). A body longer than fits in a frame comes
  cut (``len(body) < size``); BODY_READ reads the rest.
- CURSOR_ACK, CURSOR_CREATE -> RESULT ``{"node_id", "queue", "name", "acked"}``
- CURSOR_QUERY -> RESULT ``{"node_id", "queue", "cursors": [{"name", "acked"}, ...]}`` (one
  entry when a name is given; NOT_FOUND when it does not exist)
- CURSOR_DELETE -> RESULT None
- BODY_READ -> RESULT ``bytes`` (b"" past the end)

Sequence numbers are per node and queue: answers name the node (``node_id``). A message's
``message_id`` is its journal ID, new for a paged message once it is read back into memory;
(node, queue, seq) is the identity that stays.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from .events import Event, register

__all__ = [
    "QueueSeqs",
    "BrowseRange",
    "RangeMessage",
    "RangeResult",
    "CursorAck",
    "CursorCreate",
    "CursorQuery",
    "CursorDelete",
    "BodyRead",
]


class QueueSeqs(Event, frozen=True, array_like=True):
    """The earliest sequence number a queue holds and its tail (the next one it assigns)."""

    TYPE: ClassVar[int] = 0x18
    corr: int
    queue: str


class BrowseRange(Event, frozen=True, array_like=True):
    """Read the messages held with from_seq <= seq < to_seq without consuming them."""

    TYPE: ClassVar[int] = 0x19
    corr: int
    queue: str
    from_seq: int
    to_seq: int
    max: int = 1000


class RangeMessage(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One message of a range; ``size`` is its whole body's length (``body`` may be cut)."""

    seq: int
    message_id: int
    dup_id: str | None
    address: str
    durable: bool
    priority: int
    expiration: int
    timestamp: int
    scheduled: int
    delivery_count: int
    properties: dict[str, Any]
    body: bytes
    size: int


class RangeResult(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = 0x1A
    corr: int
    node_id: str
    queue: str
    messages: list[RangeMessage] = []
    next_seq: int = 0
    earliest_seq: int = 0
    tail_seq: int = 0


class CursorAck(Event, frozen=True, array_like=True):
    """Cursor ``name`` of the queue has read up to and including ``seq`` (its ``acked`` becomes
    seq + 1; only forward). ``create``: make the cursor there when it does not exist."""

    TYPE: ClassVar[int] = 0x1B
    corr: int
    queue: str
    name: str
    seq: int
    create: bool = True


class CursorCreate(Event, frozen=True, array_like=True):
    """A cursor at ``acked`` (-1: the earliest message held); ``exists_ok`` returns an existing one."""

    TYPE: ClassVar[int] = 0x1C
    corr: int
    queue: str
    name: str
    acked: int = -1
    exists_ok: bool = True


class CursorQuery(Event, frozen=True, array_like=True):
    """The cursors of a queue, or the one named."""

    TYPE: ClassVar[int] = 0x1D
    corr: int
    queue: str
    name: str | None = None


class CursorDelete(Event, frozen=True, array_like=True):
    TYPE: ClassVar[int] = 0x1E
    corr: int
    queue: str
    name: str


class BodyRead(Event, frozen=True, array_like=True):
    """``length`` bytes of the body of the message held at ``seq``, from ``offset``."""

    TYPE: ClassVar[int] = 0x1F
    corr: int
    queue: str
    seq: int
    offset: int
    length: int


register(RangeResult, client=False, server=True)
for _cls in (QueueSeqs, BrowseRange, CursorAck, CursorCreate, CursorQuery, CursorDelete, BodyRead):
    register(_cls, client=True, server=False)
del _cls
