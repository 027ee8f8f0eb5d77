"""Sequence ranges and named cursors of queues, for replayable readers such as the Spark
source: the asyncio requests (a mixin of `AsyncConnection`) and their synchronous twins (a
mixin of `Connection`).

Every message of a queue has a sequence number, per broker node and queue, that only grows
and survives restarts. A reader asks for the tail (`queue_seqs`), reads ranges below it
without consuming anything (`browse_range`: the same range reads the same each time unless
something was acknowledged or expired), and records how far it has read with a named cursor
(`ack_upto`). While a queue has cursors, the broker keeps every message at or above the
lowest of them (restarts, paging and compaction included) and removes what all of them have
passed. Sequence numbers of different nodes are unrelated: every answer names its node
(`node_id`); key offsets by ``"<node_id>/<queue>"``. A record's identity is (node, queue, seq):
its ``message_id`` is the broker's journal ID, which a paged message changes once when it is
read back into memory (``delivery_count`` is informational too); everything else a range
returns stays the same from one read to the next.

    async with await petrel.client.connect(url) as conn:
        seqs = await conn.queue_seqs("orders")
        page = await conn.browse_range("orders", seqs.earliest_seq, seqs.tail_seq, max=500)
        for record in page.messages:
            ...
        await conn.ack_upto("orders", "spark", page.next_seq - 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from petrel.client.message import parse_destination
from petrel.codec.core.cursors import (
    BodyRead,
    BrowseRange,
    CursorAck,
    CursorCreate,
    CursorDelete,
    CursorQuery,
    QueueSeqs,
    RangeMessage,
    RangeResult,
)

if TYPE_CHECKING:
    from petrel.client.connection import AsyncConnection
    from petrel.client.sync import Connection

__all__ = ["QueueSequence", "RangeRecord", "SeqRange", "Cursor", "CursorRequests", "SyncCursorRequests"]


@dataclass(frozen=True, slots=True)
class QueueSequence:
    """Where a queue's sequence numbers stand on one node: ``earliest_seq`` is the lowest it
    still holds (= ``tail_seq`` when empty), ``tail_seq`` the next one it will assign."""

    node_id: str
    queue: str
    earliest_seq: int
    tail_seq: int


@dataclass(frozen=True, slots=True)
class RangeRecord:
    """One message of a browsed range (not consumed)."""

    seq: int
    message_id: int
    dup_id: str | None  # the _AMQ_DUPL_ID property, if it has one
    address: str
    durable: bool
    priority: int
    expiration: int
    timestamp: int  # epoch ms
    scheduled: int
    delivery_count: int
    properties: dict[str, Any]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class SeqRange:
    """The answer to `browse_range`: ``messages`` in sequence order; every number of
    ``[from_seq, next_seq)`` not among them is absent (acknowledged, expired or deleted), and
    the next read starts at ``next_seq``."""

    node_id: str
    queue: str
    from_seq: int
    messages: list[RangeRecord]
    next_seq: int
    earliest_seq: int
    tail_seq: int

    @property
    def gaps(self) -> list[int]:
        """The absent sequence numbers of ``[from_seq, next_seq)``."""
        held = {m.seq for m in self.messages}
        return [s for s in range(self.from_seq, self.next_seq) if s not in held]


@dataclass(frozen=True, slots=True)
class Cursor:
    """A named cursor of a queue on one node: every number below ``acked`` is acknowledged
    (``acked`` = the last acknowledged sequence number + 1)."""

    node_id: str
    queue: str
    name: str
    acked: int


def _cursor(value: dict) -> Cursor:
    return Cursor(value["node_id"], value["queue"], value["name"], value["acked"])


class CursorRequests:
    """asyncio requests; each raises `NotFound` for an unknown queue (or cursor) and
    `RequestFailed` for a bad range or position."""

    async def queue_seqs(self: AsyncConnection, queue: str) -> QueueSequence:
        name = parse_destination(queue)[0]
        v = await self._request(lambda corr: QueueSeqs(corr, name), retry=True)
        return QueueSequence(v["node_id"], v["queue"], v["earliest_seq"], v["tail_seq"])

    async def tail_seq(self: AsyncConnection, queue: str) -> int:
        return (await self.queue_seqs(queue)).tail_seq

    async def earliest_seq(self: AsyncConnection, queue: str) -> int:
        return (await self.queue_seqs(queue)).earliest_seq

    async def browse_range(self: AsyncConnection, queue: str, from_seq: int, to_seq: int,
                           max: int = 1000) -> SeqRange:
        """The messages held with from_seq <= seq < to_seq (at most ``max``; fewer when their
        bodies would not fit one answer: continue from ``next_seq``)."""
        name = parse_destination(queue)[0]
        r: RangeResult = await self._request(lambda corr: BrowseRange(corr, name, from_seq, to_seq, max), retry=True)
        records = [await self._range_record(name, m) for m in r.messages]
        return SeqRange(r.node_id, r.queue, from_seq, records, r.next_seq, r.earliest_seq, r.tail_seq)

    async def _range_record(self: AsyncConnection, queue: str, m: RangeMessage) -> RangeRecord:
        body = m.body
        if len(body) < m.size:  # cut to fit the answer: the rest piece by piece
            parts = [body]
            got = len(body)
            while got < m.size:
                more = await self._request(
                    lambda corr, got=got: BodyRead(corr, queue, m.seq, got, m.size - got), retry=True)
                if not more:
                    break  # acknowledged meanwhile
                parts.append(more)
                got += len(more)
            body = b"".join(parts)
        return RangeRecord(m.seq, m.message_id, m.dup_id, m.address, m.durable, m.priority, m.expiration,
                           m.timestamp, m.scheduled, m.delivery_count, dict(m.properties), body)

    async def ack_upto(self: AsyncConnection, queue: str, cursor: str, seq: int, *, create: bool = True) -> Cursor:
        """Cursor ``cursor`` has read everything up to and including ``seq``; only forward (a
        lower ``seq`` changes nothing). Created there when missing (unless ``create`` is
        False). Returns the cursor once its position is durable."""
        name = parse_destination(queue)[0]
        return _cursor(await self._request(lambda corr: CursorAck(corr, name, cursor, seq, create), retry=True))

    async def create_cursor(self: AsyncConnection, queue: str, cursor: str, acked: int | None = None, *,
                            exists_ok: bool = True) -> Cursor:
        """A cursor at ``acked`` (default: the earliest message the queue holds)."""
        name = parse_destination(queue)[0]
        at = -1 if acked is None else acked
        return _cursor(await self._request(lambda corr: CursorCreate(corr, name, cursor, at, exists_ok),
                                           retry=exists_ok))

    async def cursor(self: AsyncConnection, queue: str, cursor: str) -> Cursor:
        name = parse_destination(queue)[0]
        v = await self._request(lambda corr: CursorQuery(corr, name, cursor), retry=True)
        return Cursor(v["node_id"], v["queue"], **v["cursors"][0])

    async def cursors(self: AsyncConnection, queue: str) -> list[Cursor]:
        name = parse_destination(queue)[0]
        v = await self._request(lambda corr: CursorQuery(corr, name, None), retry=True)
        return [Cursor(v["node_id"], v["queue"], **c) for c in v["cursors"]]

    async def delete_cursor(self: AsyncConnection, queue: str, cursor: str) -> None:
        """Forget the cursor; what it alone held is released."""
        name = parse_destination(queue)[0]
        await self._request(lambda corr: CursorDelete(corr, name, cursor))


class SyncCursorRequests:
    """The same requests on the synchronous `Connection`."""

    def queue_seqs(self: Connection, queue: str) -> QueueSequence:
        return self._run(self._async.queue_seqs(queue))

    def tail_seq(self: Connection, queue: str) -> int:
        return self._run(self._async.tail_seq(queue))

    def earliest_seq(self: Connection, queue: str) -> int:
        return self._run(self._async.earliest_seq(queue))

    def browse_range(self: Connection, queue: str, from_seq: int, to_seq: int, max: int = 1000) -> SeqRange:
        return self._run(self._async.browse_range(queue, from_seq, to_seq, max))

    def ack_upto(self: Connection, queue: str, cursor: str, seq: int, *, create: bool = True) -> Cursor:
        return self._run(self._async.ack_upto(queue, cursor, seq, create=create))

    def create_cursor(self: Connection, queue: str, cursor: str, acked: int | None = None, *,
                      exists_ok: bool = True) -> Cursor:
        return self._run(self._async.create_cursor(queue, cursor, acked, exists_ok=exists_ok))

    def cursor(self: Connection, queue: str, cursor: str) -> Cursor:
        return self._run(self._async.cursor(queue, cursor))

    def cursors(self: Connection, queue: str) -> list[Cursor]:
        return self._run(self._async.cursors(queue))

    def delete_cursor(self: Connection, queue: str, cursor: str) -> None:
        self._run(self._async.delete_cursor(queue, cursor))
