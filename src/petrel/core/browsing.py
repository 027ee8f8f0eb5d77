"""Browsing a queue without consuming it, paged messages included, in bounded memory.

A `QueueBrowse` shows first the references the queue holds in memory when it opens (waiting
or scheduled, in dispatch order: `Queue.iter_refs`), then, while the queue pages, the paged
messages read from its page files a chunk at a time (`PAGE_READ` bytes), in the order they
were paged (sequence order), up to the queue's tail at the browse's opening. Memory stays
bounded: a paging queue holds little in memory (that is why it pages), and of the page files
the browse holds one chunk, never the backlog.

Messages a selector does not match, and expired ones, are skipped. Nothing is consumed or
locked: a message consumed meanwhile may still be shown. When consumers drain the queue during
the browse, depaging moves records behind the browse's place in the page files into memory:
the browse then takes those from memory (the ones above the last sequence number it showed)
and goes on from the queue's page cursor. Records still on their way to the page files when
the browse reaches them end it.

Pure and synchronous, reading through the `Store` (as depaging does).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from petrel.core.cursors import PAGE_READ, HeldMessage
from petrel.core.queue import DONE
from petrel.core.selector import compile_selector

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import Queue

__all__ = ["QueueBrowse"]


class QueueBrowse:
    """One browse of `queue` (raises `SelectorError` for a bad `filter`)."""

    __slots__ = ("office", "queue", "selector", "refs", "index", "tail", "position", "last_seq", "ready",
                 "finished", "stalled", "shown")

    def __init__(self, office: PostOffice, queue: Queue, filter: str | None = None) -> None:
        self.office = office
        self.queue = queue
        self.selector = compile_selector(filter) if filter else None
        self.refs = list(queue.iter_refs())  # the snapshot of what is in memory (references only)
        self.index = 0
        self.tail = queue.next_seq  # paged records from here on were paged after the browse opened
        self.last_seq = max((r.seq for r in self.refs), default=-1)
        paging = queue.paging and queue.page_cursor is not None and office.store.supports_paging
        self.position = queue.page_cursor if paging else None  # where the next page read starts
        self.ready: deque[HeldMessage] = deque()  # read from the page files, not yet shown
        self.finished = False
        self.stalled = False  # the last `next` waited for records on their way to the page files
        self.shown = 0  # messages handed out so far

    def _wanted(self, message, now: int) -> bool:
        return not message.expired(now) and (self.selector is None or self.selector.matches(message))

    def next(self, limit: int) -> list[HeldMessage]:
        """Up to `limit` more messages; fewer (or none) only at the end (`finished`), or while
        records it needs are still on their way to the page files (`stalled`: ask again shortly)."""
        out: list[HeldMessage] = []
        self.stalled = False
        now = self.office.now()
        refs = self.refs
        while len(out) < limit and self.index < len(refs):
            ref = refs[self.index]
            refs[self.index] = None  # (let what has been shown go)
            self.index += 1
            if ref.state != DONE and self._wanted(ref.message, now):  # (not acknowledged meanwhile)
                out.append(HeldMessage(ref.seq, ref.message, ref.delivery_count))
        if self.index >= len(refs) and refs:
            self.refs = []
            self.index = 0
        while len(out) < limit:
            if not self.ready:
                more = self._read()
                if more is None:
                    self.stalled = True
                    break
                if not more:
                    self.finished = True
                    break
            held = self.ready.popleft()
            if self._wanted(held.message, now):
                out.append(held)
        self.shown += len(out)
        return out

    def _read(self) -> bool | None:
        """Read the page files into `ready` up to the next chunk that has something; False at the
        end, None while what is still to read is on its way to the page files."""
        queue, store = self.queue, self.office.store
        while not self.ready:
            if self.position is None or queue.deleted:
                return False
            if not queue.paging or queue.page_cursor is None:
                self._caught_up()  # the whole backlog has been read back into memory
                self.position = None
                break
            if self.position < queue.page_cursor:
                self._caught_up()
                self.position = queue.page_cursor
                continue
            batch = store.read_pages(queue.id, self.position, PAGE_READ)
            if not batch:
                if self.last_seq < self.tail - 1 and store.pages_in_flight(queue.id):
                    return None
                self.position = None
                break
            self.position = batch[-1].position
            tail = self.tail
            for item in batch:
                if item.seq >= tail:
                    self.position = None
                    break
                if item.seq > self.last_seq:
                    self.last_seq = item.seq
                    self.ready.append(HeldMessage(item.seq, item.message, 0, True))
        return bool(self.ready)

    def _caught_up(self) -> None:
        """Depaging went past the browse: what it read back (above the last sequence number
        shown, below the tail) is in memory now, in sequence order."""
        lo, hi = self.last_seq, self.tail
        moved = sorted((r for r in self.queue.iter_refs() if lo < r.seq < hi), key=lambda r: r.seq)
        for ref in moved:
            self.ready.append(HeldMessage(ref.seq, ref.message, ref.delivery_count))
        if moved:
            self.last_seq = moved[-1].seq
