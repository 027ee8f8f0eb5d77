"""Sequence ranges and named cursors of a queue: what a replayable reader (the Spark source)
stands on.

Every reference in a queue has a per-queue sequence number (`MessageReference.seq`) that only
grows and survives restarts (`core/recovery.py`). On it:

- `tail_seq`: the next sequence number the queue will assign. Every number below it was
  assigned once (a restart skips the rest of its reservation: numbers that never held a
  message, reported as absent like any other).
- `earliest_seq`: the lowest number the queue still holds (waiting, scheduled, out with a
  consumer but not acknowledged, or paged out); the tail when the queue is empty.
- `browse_range(queue, lo, hi, max)`: the messages held with ``lo <= seq < hi`` in sequence
  order, without consuming them, and `next_seq`: every number of ``[lo, next_seq)`` that is not
  returned is absent (acknowledged, expired, deleted, never used). Paged messages are read
  from the page files. Browsing the same range again gives the same answer unless something
  was acknowledged or expired meanwhile.
- Named cursors (`SeqCursor`): a position ``acked`` per (queue, name), every number below it
  acknowledged by that reader; `ack_upto(queue, name, seq)` moves it to ``seq + 1``, only
  forward (a lower one is a no-op). Cursors are journalled (`Store.put_seq_cursor`).

Retention: while a queue has cursors, what all of them have acknowledged is removed from the
queue (and from the journal and page files) when the lowest one moves; everything at or
above the lowest cursor stays held as any message does, across restarts, paging and
compaction. Ordinary consumers of the queue work as before: what they take is gone, a gap for
the cursors. Deleting a cursor releases its hold.

A mixin of `PostOffice`; pure and synchronous.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from petrel.core.message import Message
from petrel.core.queue import AVAILABLE, DELIVERING, DONE, SCHEDULED, MessageReference, Queue

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice

log = logging.getLogger("petrel.core.cursors")

__all__ = ["CursorExists", "CursorInvalid", "CursorNotFound", "HeldMessage", "RangeBrowse", "SeqCursor", "SeqCursors"]

PAGE_READ = 256 * 1024  # bytes read from the page files at a time


class CursorNotFound(LookupError):
    """An unknown queue, or an unknown cursor where none is to be created."""


class CursorInvalid(ValueError):
    """A range or position that makes no sense (negative, reversed, past the tail)."""


class CursorExists(CursorInvalid):
    """A cursor to create exists already."""


@dataclass(slots=True)
class SeqCursor:
    queue_id: int
    name: str
    acked: int  # every sequence number below it is acknowledged by this cursor
    record_id: int = 0  # its journal record

    def info(self) -> dict:
        return {"name": self.name, "acked": self.acked}


@dataclass(slots=True, frozen=True)
class HeldMessage:
    seq: int
    message: Message
    delivery_count: int = 0
    paged: bool = False


@dataclass(slots=True)
class RangeBrowse:
    messages: list[HeldMessage]
    next_seq: int  # continue from here; the numbers of [from, next_seq) not in `messages` are absent
    earliest_seq: int
    tail_seq: int


def _seq(held: HeldMessage) -> int:
    return held.seq


def held_in_memory(queue: Queue) -> dict[int, MessageReference]:
    """Every reference the queue holds in memory (waiting, scheduled or out with a consumer and
    not yet acknowledged), by sequence number: a scan of the whole queue."""
    held: dict[int, MessageReference] = {}
    for ref in queue.iter_refs():
        held[ref.seq] = ref
    for consumer in queue.consumers:
        for ref in consumer.delivering.values():
            if ref.state == DELIVERING and ref.queue is queue:
                held[ref.seq] = ref
    return held


class SeqIndex:
    """A queue's references in memory by sequence number, made by one scan when ranges are first
    read, then kept by the queue (`Queue._admit` adds each reference it takes in). A reference
    that is done stays until trimmed: consumption goes mostly in sequence order, so the done
    ones gather at the front, where they are dropped as the index is read and every 1024 adds."""

    __slots__ = ("queue", "seqs", "refs", "start", "adds", "mark_seqs", "mark_positions", "first_paged")

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.refs = held_in_memory(queue)
        self.seqs = sorted(self.refs)
        self.start = 0  # seqs[:start] are gone
        self.adds = 0
        # where reads of the page files went: the records from mark_positions[i] on have sequence
        # numbers above mark_seqs[i] (page records follow sequence order), so a range read
        # starts near its first number, not at the queue's page cursor
        self.mark_seqs: list[int] = []
        self.mark_positions: list = []
        self.first_paged: tuple | None = None  # (page cursor, the first paged seq after it or None, page end)

    def mark(self, seq: int, position) -> None:
        i = bisect.bisect_left(self.mark_seqs, seq)
        if i < len(self.mark_seqs) and self.mark_seqs[i] == seq:
            return
        self.mark_seqs.insert(i, seq)
        self.mark_positions.insert(i, position)
        if len(self.mark_seqs) > 4096:  # forget those behind the page cursor (released)
            cursor = self.queue.page_cursor
            keep = [j for j, p in enumerate(self.mark_positions) if cursor is None or p >= cursor]
            self.mark_seqs = [self.mark_seqs[j] for j in keep][-2048:]
            self.mark_positions = [self.mark_positions[j] for j in keep][-2048:]

    def page_start(self, lo: int, cursor):
        """Where to read the page files from for sequence numbers from `lo` on."""
        i = bisect.bisect_left(self.mark_seqs, lo) - 1
        if i >= 0 and self.mark_positions[i] >= cursor:
            return self.mark_positions[i]
        return cursor

    @classmethod
    def of(cls, queue: Queue) -> SeqIndex:
        index = queue.seq_index
        if index is None:
            index = queue.seq_index = cls(queue)
        return index

    def add(self, ref: MessageReference) -> None:
        seq = ref.seq
        if self.refs.setdefault(seq, ref) is not ref:
            self.refs[seq] = ref
            return
        seqs = self.seqs
        if len(seqs) == self.start or seq > seqs[-1]:
            seqs.append(seq)
        else:
            bisect.insort(seqs, seq, lo=self.start)
        self.adds += 1
        if self.adds >= 1024:
            self.adds = 0
            self.trim()

    def trim(self) -> None:
        seqs, refs, start = self.seqs, self.refs, self.start
        while start < len(seqs) and refs[seqs[start]].state == DONE:
            del refs[seqs[start]]
            start += 1
        self.start = start
        queue = self.queue
        if len(seqs) - start > 2 * max(queue.message_count - queue.page_backlog, 0) + 4096:
            # done references in the middle (selectors, priorities, consumers acking out of order)
            live = [s for s in seqs[start:] if refs[s].state != DONE]
            self.refs = {s: refs[s] for s in live}
            self.seqs, self.start = live, 0
        elif start > 4096 and start * 2 > len(seqs):
            self.seqs, self.start = seqs[start:], 0

    def between(self, lo: int, hi: int) -> Iterator[MessageReference]:
        """The references held with lo <= seq < hi, in sequence order, as they are read (a
        reader that wants the first few of a long range pays for those only)."""
        self.trim()
        seqs, refs = self.seqs, self.refs
        i = bisect.bisect_left(seqs, lo, self.start)
        j = bisect.bisect_left(seqs, hi, i)
        for s in itertools.islice(seqs, i, j):
            r = refs[s]
            if r.state != DONE:
                yield r

    def first(self, now: int) -> int | None:
        """The lowest sequence number held (and not expired)."""
        self.trim()
        refs = self.refs
        for s in itertools.islice(self.seqs, self.start, None):
            ref = refs[s]
            if ref.state != DONE and not ref.message.expired(now):
                return s
        return None


class SeqCursors:
    """A mixin of `PostOffice`: the state is one table on the office, made on first use."""

    def _cursor_table(self: PostOffice) -> dict[int, dict[str, SeqCursor]]:
        table = self.__dict__.get("_seq_cursors")
        if table is None:
            table = self._seq_cursors = {}
        return table

    def _range_queue(self: PostOffice, name: str) -> Queue:
        queue = self.queues.get(name.rpartition("::")[2])
        if queue is None or queue.deleted:
            raise CursorNotFound(f"queue {name!r} does not exist")
        return queue

    # -- sequence numbers -----------------------------------------------------------------

    def tail_seq(self: PostOffice, name: str) -> int:
        return self._range_queue(name).next_seq

    def earliest_seq(self: PostOffice, name: str) -> int:
        return self._earliest(self._range_queue(name))

    def _earliest(self: PostOffice, queue: Queue) -> int:
        now = self.now()
        index = queue.seq_index  # a queue never read by range is scanned (no index made for a look)
        if index is not None:
            earliest = index.first(now)
        else:
            earliest = min((s for s, r in held_in_memory(queue).items() if not r.message.expired(now)), default=None)
        if earliest is None:
            earliest = queue.next_seq
        if not queue.paging or queue.page_cursor is None:
            return earliest
        # the first paged record, read once per position of the page cursor (and, while there is
        # none, again when more is paged)
        known = index.first_paged if index is not None else None
        end = self.store.page_end(queue.id)
        if known is None or known[0] != queue.page_cursor or (known[1] is None and known[2] != end):
            first = self._paged(queue, 0, 1 << 62, 1, chunk=1)
            known = (queue.page_cursor, first[0].seq if first else None, end)
            if index is not None:
                index.first_paged = known
        return earliest if known[1] is None else min(known[1], earliest)

    def _paged(self: PostOffice, queue: Queue, lo: int, hi: int, limit: int, *, chunk: int = PAGE_READ
               ) -> list[HeldMessage]:
        """Up to `limit` paged messages of the queue with lo <= seq < hi (read from the page files
        after the queue's page cursor; paged records follow sequence order)."""
        if not queue.paging or queue.page_cursor is None or not self.store.supports_paging or limit <= 0:
            return []
        now = self.now()
        out: list[HeldMessage] = []
        index = queue.seq_index
        position = queue.page_cursor if index is None else index.page_start(lo, queue.page_cursor)
        while True:
            batch = self.store.read_pages(queue.id, position, chunk)
            if not batch:
                return out
            last = batch[-1]
            if index is not None:
                index.mark(last.seq, last.position)
            for item in batch:
                if item.seq >= hi:
                    return out
                if item.seq >= lo and not item.message.expired(now):
                    out.append(HeldMessage(item.seq, item.message, 0, True))
                    if len(out) >= limit:
                        return out
            position = last.position

    # -- browsing --------------------------------------------------------------------------

    def browse_range(self: PostOffice, name: str, from_seq: int, to_seq: int, max_messages: int = 1000,
                     *, max_bytes: int = -1) -> RangeBrowse:
        """The held messages with from_seq <= seq < to_seq, in sequence order, at most
        `max_messages` of them and about `max_bytes` of body (at least one); see the module."""
        queue = self._range_queue(name)
        if from_seq < 0 or to_seq < 0:
            raise CursorInvalid(f"sequence numbers are never negative (from {from_seq}, to {to_seq})")
        if from_seq > to_seq:
            raise CursorInvalid(f"from {from_seq} is after to {to_seq}")
        if max_messages <= 0:
            raise CursorInvalid(f"max must be positive, not {max_messages}")
        now = self.now()
        tail = queue.next_seq
        found = []  # the first max_messages + 1 held in memory: enough to cut the page and know what follows
        for r in SeqIndex.of(queue).between(from_seq, to_seq):
            if not r.message.expired(now):
                found.append(HeldMessage(r.seq, r.message, r.delivery_count))
                if len(found) > max_messages:
                    break
        found += self._paged(queue, from_seq, to_seq, max_messages + 1)
        found.sort(key=_seq)
        out = found[:max_messages]
        if max_bytes >= 0:
            budget = max_bytes
            for i, h in enumerate(out):
                budget -= h.message.body_size + 256
                if budget < 0 and i > 0:
                    out = out[:i]
                    break
        next_seq = found[len(out)].seq if len(found) > len(out) else max(to_seq, from_seq)
        return RangeBrowse(out, next_seq, self._earliest(queue), tail)

    # -- cursors ---------------------------------------------------------------------------

    def has_seq_cursors(self: PostOffice, queue: Queue) -> bool:
        """The queue is read by cursors: its messages are not redistributed to other nodes."""
        return bool(self._cursor_table().get(queue.id))

    def seq_cursors(self: PostOffice, name: str) -> list[SeqCursor]:
        queue = self._range_queue(name)
        return sorted(self._cursor_table().get(queue.id, {}).values(), key=lambda c: c.name)

    def seq_cursor(self: PostOffice, name: str, cursor: str) -> SeqCursor:
        queue = self._range_queue(name)
        found = self._cursor_table().get(queue.id, {}).get(cursor)
        if found is None:
            raise CursorNotFound(f"queue {queue.name!r} has no cursor {cursor!r}")
        return found

    def create_seq_cursor(self: PostOffice, name: str, cursor: str, acked: int | None = None, *,
                          exists_ok: bool = True) -> SeqCursor:
        """A cursor at `acked` (default: the earliest message held, so it holds everything the
        queue has now); an existing one is returned as it is when `exists_ok`."""
        queue = self._range_queue(name)
        if not cursor:
            raise CursorInvalid("a cursor needs a name")
        cursors = self._cursor_table().setdefault(queue.id, {})
        existing = cursors.get(cursor)
        if existing is not None:
            if not exists_ok:
                raise CursorExists(f"queue {queue.name!r} already has a cursor {cursor!r}")
            return existing
        if acked is None:
            acked = self._earliest(queue)
        if acked < 0 or acked > queue.next_seq:
            raise CursorInvalid(f"a cursor of queue {queue.name!r} starts between 0 and the tail "
                                f"{queue.next_seq}, not at {acked}")
        return self._move(queue, SeqCursor(queue.id, cursor, acked), acked, new=True)

    def ack_upto(self: PostOffice, name: str, cursor: str, seq: int, *, create: bool = True) -> SeqCursor:
        """Cursor `cursor` has read everything up to and including `seq`: it moves to seq + 1
        (created there when missing and `create`); a lower position changes nothing."""
        queue = self._range_queue(name)
        if seq < 0:
            raise CursorInvalid(f"cannot acknowledge up to a negative sequence number ({seq})")
        if seq >= queue.next_seq:
            raise CursorInvalid(f"queue {queue.name!r} has assigned sequence numbers below {queue.next_seq} "
                                f"only: cannot acknowledge up to {seq}")
        if not cursor:
            raise CursorInvalid("a cursor needs a name")
        existing = self._cursor_table().get(queue.id, {}).get(cursor)
        if existing is None:
            if not create:
                raise CursorNotFound(f"queue {queue.name!r} has no cursor {cursor!r}")
            return self._move(queue, SeqCursor(queue.id, cursor, seq + 1), seq + 1, new=True)
        if seq + 1 <= existing.acked:
            return existing  # idempotent: already there or past it
        return self._move(queue, existing, seq + 1)

    def delete_seq_cursor(self: PostOffice, name: str, cursor: str) -> None:
        """Forget the cursor: what it alone held is released to the remaining cursors (if any;
        without one the queue keeps its messages, like any queue)."""
        queue = self._range_queue(name)
        found = self.seq_cursor(name, cursor)
        cursors = self._cursor_table()[queue.id]
        del cursors[cursor]
        tx_id = self.store.begin() if queue.durable else 0
        if found.record_id:
            self.store.delete_seq_cursor(tx_id, found.record_id)
        released = self._release_below(queue, min(c.acked for c in cursors.values()), tx_id) if cursors else None
        self._settle(queue, tx_id, released)
        if not cursors and not queue.consumers and self.remote_by_address:
            self.queue_idle(queue)  # may be redistributed again

    def forget_seq_cursors(self: PostOffice, queue: Queue) -> None:
        """The queue is deleted: so are its cursors."""
        for cursor in self._cursor_table().pop(queue.id, {}).values():
            if cursor.record_id:
                self.store.delete_seq_cursor(0, cursor.record_id)
        queue.seq_index = None

    def _settle(self: PostOffice, queue: Queue, tx_id: int, released) -> None:
        if tx_id:
            self.commit_store(tx_id)
        if released is not None:
            self.store.release_pages(queue.id, released)
        if queue.paging:
            self.depage(queue)

    def _move(self: PostOffice, queue: Queue, cursor: SeqCursor, acked: int, *, new: bool = False) -> SeqCursor:
        """Journal the cursor at `acked` and drop what every cursor of the queue has passed, in one
        store transaction."""
        cursors = self._cursor_table().setdefault(queue.id, {})
        tx_id = self.store.begin() if queue.durable else 0
        cursor.acked = acked
        if queue.durable:
            cursor.record_id = self.store.put_seq_cursor(tx_id, cursor.record_id, queue.id, cursor.name, acked)
        if new:
            cursors[cursor.name] = cursor
        below = min(c.acked for c in cursors.values())
        self._settle(queue, tx_id, self._release_below(queue, below, tx_id))
        return cursor

    def _release_below(self: PostOffice, queue: Queue, below: int, tx_id: int):
        """Remove what the queue holds below `below` (under `tx_id`); the page position to release
        page files before once committed, or None."""
        released = None
        if queue.paging and queue.page_cursor is not None and self.store.supports_paging:
            position, dropped = queue.page_cursor, 0
            done = False
            while not done:
                batch = self.store.read_pages(queue.id, position, PAGE_READ)
                if not batch:
                    break
                for item in batch:
                    if item.seq >= below:
                        done = True
                        break
                    position = item.position
                    dropped += 1
            if dropped:
                queue.page_cursor = position
                queue.page_cursor_record = self.store.update_page_cursor(
                    tx_id, queue.page_cursor_record, queue.id, position)
                queue.page_backlog = max(queue.page_backlog - dropped, 0)
                queue.messages_acked += dropped
                released = position
        # No depaging meanwhile (it commits a transaction of its own moving the page cursor this
        # one may just have moved): the caller depages once this one is committed.
        paging, queue.paging = queue.paging, False
        try:
            for ref in list(SeqIndex.of(queue).between(0, below)):  # (taking them changes the index)
                if ref.state == DELIVERING:
                    queue.acknowledge(ref, tx_id)
                elif ref.state in (AVAILABLE, SCHEDULED):
                    queue.take(ref)
                    queue.messages_acked += 1
                    self.reference_done(ref, tx_id)
        finally:
            queue.paging = paging
        return released

    # -- recovery ----------------------------------------------------------------------------

    def recover_seq_cursors(self: PostOffice, records: list[tuple[int, int, str, int]]) -> None:
        """The journalled cursors, after the queues and their messages are back."""
        table = self._cursor_table()
        for record_id, queue_id, name, acked in records:
            queue = self.queues_by_id.get(queue_id)
            if queue is None:  # its queue was deleted
                self.store.delete_seq_cursor(0, record_id)
                continue
            cursors = table.setdefault(queue_id, {})
            known = cursors.get(name)
            if known is not None:  # a crash between writing a new position and deleting the old
                stale = known if known.acked <= acked else None
                if stale is None:
                    self.store.delete_seq_cursor(0, record_id)
                    continue
                self.store.delete_seq_cursor(0, stale.record_id)
            cursors[name] = SeqCursor(queue_id, name, acked, record_id)
        for queue_id, cursors in table.items():
            queue = self.queues_by_id.get(queue_id)
            if queue is None or not cursors:
                continue
            tx_id = self.store.begin()
            self._settle(queue, tx_id, self._release_below(queue, min(c.acked for c in cursors.values()), tx_id))
