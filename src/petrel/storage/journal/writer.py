"""The writer thread: group commit, rollover, reclaim, compaction.

Appends (one thread, the event loop) encode records, give them a position and
put them in :class:`Pending`.  The single writer thread loops:

1. wait until something is pending; with ``buffer_timeout_ns`` also until that
   long has passed since the previous flush (a rate limit, like Artemis's
   TimedBuffer);
2. swap the pending buffers out under the lock (appends fill fresh ones, so all
   that arrives while a sync is in flight makes the next batch);
3. ``os.pwrite`` each contiguous run, ``os.fdatasync`` each touched segment (a
   segment is synced before the next one is written, so an older segment is
   always durable before a newer one holds anything); with ``datasync=False``
   nothing is synced;
4. account the records in the ledger, call ``before_durable`` (the replication
   hook), then ``on_batch_durable`` once with the batch's callbacks;
5. reclaim segments that hold nothing needed, compact when worthwhile, keep a
   spare file ready for the next rollover.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from time import monotonic_ns, perf_counter_ns

from .compact import Compactor
from .ledger import Ledger
from .segment import FilePool, Layout, SegmentFile

__all__ = ["Pending", "Writer"]

log = logging.getLogger("petrel.storage.journal")

_datasync = os.fdatasync  # module level so tests can slow it down

Callback = Callable[[], None]
BatchHook = Callable[[list[tuple[int, int, bytes]]], None]
BatchStats = Callable[[int, int, float], None]  # records, bytes, seconds spent syncing


class Pending:
    """What appends have handed over and the writer has not taken yet.

    ``chunks`` are ``[segment, offset, bytearray]`` runs of contiguous bytes;
    ``items`` are ``(type, id, tx_id, segment, size)`` for the ledger.
    """

    __slots__ = ("lock", "cond", "chunks", "items", "callbacks", "requests", "waiting", "stopping")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.chunks: list[list] = []
        self.items: list[tuple[int, int, int, int, int]] = []
        self.callbacks: list[Callback] = []
        self.requests: list[Callback] = []
        self.waiting = False  # the writer sleeps until notified
        self.stopping = False

    def busy(self) -> bool:
        return bool(self.chunks or self.callbacks or self.requests)


class Writer:
    def __init__(self, layout: Layout, pool: FilePool, ledger: Ledger, pending: Pending, *,
                 file_size: int, datasync: bool, buffer_timeout_ns: int, min_files: int,
                 pool_files: int, compact_min_files: int, compact_percentage: int) -> None:
        self.layout = layout
        self.pool = pool
        self.ledger = ledger
        self.pending = pending
        self.file_size = file_size
        self.datasync = datasync
        self.buffer_timeout_ns = buffer_timeout_ns
        self.min_files = min_files
        self.pool_files = pool_files
        self.compact_min_files = compact_min_files
        self.compact_percentage = compact_percentage
        self.file: SegmentFile | None = None
        self.meta_lock = threading.Lock()  # guards the segment table for introspection
        self.before_durable: BatchHook | None = None
        self.on_batch_durable: Callable[[list[Callback]], None] | None = None
        self.on_batch_stats: BatchStats | None = None
        self.checkpoint: Callable[[str], None] = lambda step: None  # compaction test seam
        self.failure: BaseException | None = None
        self.skip_damaged = False  # load skipped damage: compaction may rewrite damaged segments
        self.thread: threading.Thread | None = None
        self._last_flush = 0
        self._compact_tried_at = 0
        # stats
        self.batches = 0
        self.records = 0
        self.syncs = 0
        self.bytes = 0
        self.last_sync_ns = 0
        self.max_batch = 0
        self.reclaimed = 0
        self.compactions = 0

    # files ----------------------------------------------------------------------------

    def open_current(self, segment_id: int, exists: bool) -> None:
        """Open the segment appends resume in (load, before the thread starts)."""
        if exists:
            self.file = SegmentFile.open(segment_id, self.layout.data_path(segment_id), self.file_size)
        else:
            self.file = self._open_segment(segment_id)

    def _open_segment(self, segment_id: int) -> SegmentFile:
        f = self.pool.activate(segment_id)
        with self.meta_lock:
            self.ledger.add_segment(segment_id)
        self.ledger.dirty = True  # the previous segment may now be reclaimable
        return f

    def release(self, path: Path) -> None:
        """A data file is no longer needed: keep it in the pool, or delete it."""
        free = len(self.pool.free)
        keep = (self.pool_files < 0 or free < max(1, self.pool_files)
                or len(self.ledger.segments) + free < self.min_files)
        if keep and path.stat().st_size != self.file_size:
            keep = False
        self.pool.release(path, keep)

    def prepare_files(self) -> None:
        """Keep one spare file ready, and ``min_files`` files in all."""
        while not self.pool.free or len(self.ledger.segments) + len(self.pool.free) < self.min_files:
            self.pool.create()

    # the thread -----------------------------------------------------------------------

    def start(self, on_batch_durable: Callable[[list[Callback]], None]) -> None:
        self.on_batch_durable = on_batch_durable
        self.thread = threading.Thread(target=self._run, name="petrel-journal-writer", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        p = self.pending
        with p.cond:
            p.stopping = True
            p.cond.notify()
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        elif self.failure is None:
            self.flush_now()
        self.close()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def flush_now(self) -> None:
        """Write everything pending in the calling thread (no writer thread running)."""
        p = self.pending
        with p.lock:
            chunks, items, callbacks, requests = p.chunks, p.items, p.callbacks, p.requests
            p.chunks, p.items, p.callbacks, p.requests = [], [], [], []
        if chunks or callbacks:
            self._write_batch(chunks, items, callbacks)
        for request in requests:
            request()

    def _run(self) -> None:
        p = self.pending
        try:
            self.prepare_files()
            while True:
                with p.cond:
                    while not (p.chunks or p.callbacks or p.requests or p.stopping):
                        p.waiting = True
                        p.cond.wait()
                    p.waiting = False
                    if self.buffer_timeout_ns and not p.stopping:
                        deadline = self._last_flush + self.buffer_timeout_ns
                        now = monotonic_ns()
                        while now < deadline and not p.stopping:
                            p.cond.wait((deadline - now) / 1e9)
                            now = monotonic_ns()
                    chunks, items, callbacks, requests = p.chunks, p.items, p.callbacks, p.requests
                    p.chunks, p.items, p.callbacks, p.requests = [], [], [], []
                    stopping = p.stopping
                if chunks or callbacks:
                    self._write_batch(chunks, items, callbacks)
                for request in requests:
                    request()
                self._housekeeping()
                if stopping:
                    with p.lock:
                        if not p.busy():
                            break
        except BaseException as e:  # the journal cannot go on: appends fail from now on
            self.failure = e
            log.error("journal writer failed: %s", e, exc_info=True, extra={"event": "journal.failed"})
        finally:
            self.close()

    def _write_batch(self, chunks: list[list], items: list, callbacks: list[Callback]) -> None:
        self._last_flush = monotonic_ns()
        f = self.file
        segments = self.ledger.segments
        written = 0
        unsynced = False
        sync = self.datasync
        for seg, off, data in chunks:
            if f is None or f.id != seg:
                if f is not None:
                    if unsynced and sync:  # older segment durable before the newer one is written
                        _datasync(f.fd)
                        self.syncs += 1
                    f.close()
                f = self.file = self._open_segment(seg)
            f.write(data, off)
            unsynced = True
            written += len(data)
            state = segments[seg]
            end = off + len(data)
            if end > state.used:
                state.used = end
        if unsynced and sync:
            t0 = perf_counter_ns()
            _datasync(f.fd)
            self.last_sync_ns = perf_counter_ns() - t0
            self.syncs += 1
        apply = self.ledger.apply
        for item in items:
            apply(*item)
        self.batches += 1
        self.records += len(items)
        self.bytes += written
        if len(items) > self.max_batch:
            self.max_batch = len(items)
        hook = self.before_durable
        if hook is not None and chunks:
            hook([(seg, off, bytes(data)) for seg, off, data in chunks])
        stats = self.on_batch_stats
        if stats is not None:  # before the callbacks: whoever they wake sees this batch counted
            try:
                stats(len(items), written, self.last_sync_ns / 1e9 if unsynced and sync else 0.0)
            except Exception:
                log.exception("on_batch_stats failed")
        if callbacks:
            notify = self.on_batch_durable
            if notify is None:
                for callback in callbacks:
                    callback()
            else:
                try:
                    notify(callbacks)
                except Exception:
                    log.exception("on_batch_durable failed")

    # housekeeping ---------------------------------------------------------------------

    def _housekeeping(self) -> None:
        if self.ledger.dirty and self.file is not None:
            self._reclaim()
        self.maybe_compact()
        self.prepare_files()

    def _reclaim(self) -> None:
        for seg in self.ledger.reclaimable(self.file.id):
            with self.meta_lock:
                self.ledger.remove_segment(seg)
            self.release(self.layout.data_path(seg))
            self.reclaimed += 1
            log.debug("reclaimed journal segment %d", seg)

    def maybe_compact(self, force: bool = False) -> int:
        """Compact when the thresholds say so (or when forced); segments replaced."""
        if self.file is None:
            return 0
        current = self.file.id
        if not force:
            ledger = self.ledger
            if self.compact_percentage <= 0 or len(ledger.segments) <= self.compact_min_files:
                return 0
            if current <= self._compact_tried_at:
                return 0  # already tried while this segment was current
            used = ledger.used_bytes()
            if used <= 0 or ledger.live_bytes * 100 >= used * self.compact_percentage:
                return 0
        self._compact_tried_at = current
        compactor = Compactor(self.layout, self.pool, self.ledger, self.file_size, self.datasync,
                              self.release, self.checkpoint, self.skip_damaged)
        with self.meta_lock:
            replaced = compactor.run(current)
        if replaced:
            self.compactions += 1
            self.ledger.dirty = True
        return replaced
