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
   nothing is synced.  A batch nobody waits on (no callback: a consumer's
   deletes, say) is written but not synced: the next batch somebody waits on
   syncs it too, and so does an idle writer once ``lazy_sync_ns`` has passed
   since it was written.  A ``kill -9`` keeps it (the page cache has it); only a
   power loss in that window can lose it, and nothing that was confirmed;
4. account the records in the ledger, call ``before_durable`` (a test hook, kept
   for tests; replication follows the data directory's `StoreStream` instead, into
   which each run is recorded as it is written), then ``on_batch_durable`` once
   with the batch's callbacks;
5. reclaim segments that hold nothing needed, compact when worthwhile, keep a
   spare file ready for the next rollover.

A write or sync that fails with an ``OSError`` (EIO, ENOSPC) does not stop the
writer.  The batch goes back, whole and in order, to the front of what is
pending; every waiter that can hear of a failure (a callback with a ``fail``
method) is told at once, and so is every such waiter that syncs while the
failure lasts; plain callbacks keep waiting.  The writer then retries, with a
growing pause (up to a second), rewriting the batch at the very positions it was
given (``pwrite`` at fixed offsets into a preallocated segment: a partial write
is simply written again, the journal keeps no hole), and syncing again, so pages
a failed ``fdatasync`` may have dropped are dirtied anew.  Appends go on being
accepted meanwhile (what the appender believes is in the journal stays exactly
what ends up there); nothing is confirmed until a retry succeeds.  Any other
exception is fatal: waiters are failed, appends raise from then on.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from time import monotonic_ns, perf_counter_ns

from .compact import BackgroundCompaction, Compactor
from .errors import JournalError
from .ledger import ADD_TX_RUN, DELETE_RUN, Ledger
from .records import MARK
from .segment import FilePool, Layout, SegmentFile

__all__ = ["Pending", "Writer"]

log = logging.getLogger("petrel.storage.journal")

_datasync = os.fdatasync  # module level so tests can slow it down (or make it fail)
_RETRY_FIRST_NS = 50_000_000
_RETRY_MAX_NS = 1_000_000_000
#: The longest a batch nobody waits on stays written but not synced.
LAZY_SYNC_NS = 20_000_000

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


class _Failure:
    """A waiter's ``fail`` bound to the error, run where its callbacks run."""

    __slots__ = ("fail", "error")

    def __init__(self, fail: Callable[[BaseException], None], error: BaseException) -> None:
        self.fail = fail
        self.error = error

    def __call__(self) -> None:
        self.fail(self.error)


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
        self.failure: BaseException | None = None  # why writes fail now (None: they succeed)
        self.dead = False  # the failure is fatal: the thread has stopped
        self.durable: tuple[int, int] = (0, 0)  # (segment, offset): all before it is written and synced
        self.lazy_sync_ns = LAZY_SYNC_NS
        self._written: tuple[int, int] = (0, 0)  # (segment, offset): all before it is written
        self._unsynced_since = 0  # monotonic ns the oldest written, unsynced batch was written; 0: none
        self._lazy_chunks: list[list] = []  # those batches' runs: written again if a sync fails
        self._retry_ns = 0  # pause before the next retry of a failed batch
        self._tidy_failed = False
        self._tidy_next = 0
        self.skip_damaged = False  # load skipped damage: compaction may rewrite damaged segments
        self.thread: threading.Thread | None = None
        self.compaction: BackgroundCompaction | None = None  # running beside this thread
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
            self.file = SegmentFile.open(segment_id, self.layout.data_path(segment_id), self.file_size,
                                         self.layout.stream)
        else:
            self.file = self._open_segment(segment_id)

    def resume_at(self, segment_id: int, offset: int) -> None:
        """Everything before (segment_id, offset) is on disk (load)."""
        self.durable = self._written = (segment_id, offset)

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

    def stop(self, final: Callable[[], None] | None = None) -> None:
        """Write everything pending, stop the thread, close; ``final`` may append last records
        (the journal's closing MARK), written and synced after everything else."""
        p = self.pending
        with p.cond:
            p.stopping = True
            p.cond.notify()
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        elif not self.dead:
            self.flush_now()
        if self.compaction is not None:  # the writer died: nobody will swap it in
            self.compaction.join(cancel=True)
        if final is not None and self.failure is None:
            final()
            with p.lock:
                chunks, p.chunks, p.items = p.chunks, [], []
            try:
                self._write(chunks, lazy=False)
            except OSError as e:
                log.warning("journal %s: the closing mark was not written: %s", self.layout.directory, e)
        self.close()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def flush_now(self, *, lazy: bool = False) -> None:
        """Write and sync everything pending in the calling thread (no writer thread running);
        ``lazy``: write it as a batch nobody waits on (tests)."""
        p = self.pending
        with p.lock:
            chunks, items, callbacks, requests = p.chunks, p.items, p.callbacks, p.requests
            p.chunks, p.items, p.callbacks, p.requests = [], [], [], []
        if chunks or callbacks or self._unsynced_since:
            if not self._write_batch(chunks, items, callbacks, lazy=lazy and not callbacks):
                raise JournalError(f"cannot write journal {self.layout.directory}: {self.failure}")
        for request in requests:
            request()

    def _run(self) -> None:
        p = self.pending
        try:
            self._tidy(self.prepare_files)
            while True:
                with p.cond:
                    while not (p.chunks or p.callbacks or p.requests or p.stopping):
                        p.waiting = True
                        if self._unsynced_since:  # a lazy batch: synced once idle long enough
                            left = self._unsynced_since + self.lazy_sync_ns - monotonic_ns()
                            if left <= 0 or not p.cond.wait(left / 1e9):
                                break
                        else:
                            p.cond.wait()
                    p.waiting = False
                    if self.failure is not None and not p.stopping:  # a failed batch waits to be retried
                        deadline = monotonic_ns() + self._retry_ns
                        now = monotonic_ns()
                        while now < deadline and not p.stopping:
                            p.cond.wait((deadline - now) / 1e9)
                            now = monotonic_ns()
                    elif self.buffer_timeout_ns and not p.stopping:
                        deadline = self._last_flush + self.buffer_timeout_ns
                        now = monotonic_ns()
                        while now < deadline and not p.stopping:
                            p.cond.wait((deadline - now) / 1e9)
                            now = monotonic_ns()
                    chunks, items, callbacks, requests = p.chunks, p.items, p.callbacks, p.requests
                    p.chunks, p.items, p.callbacks, p.requests = [], [], [], []
                    stopping = p.stopping
                if chunks or callbacks:
                    lazy = not (callbacks or stopping or self._lazy_due())
                    if not self._write_batch(chunks, items, callbacks, lazy=lazy) and stopping:
                        self._give_up()
                        break
                elif self._unsynced_since and (stopping or self._lazy_due()):
                    self._sync_lazy()
                for request in requests:
                    request()
                self._tidy(self._housekeeping)
                if stopping:
                    if self.compaction is not None:  # let it finish: its swap comes as a request
                        self.compaction.join()
                        continue
                    with p.lock:
                        if not p.busy() and not self._unsynced_since:
                            break
        except BaseException as e:  # the journal cannot go on: appends fail from now on
            self.failure = e
            self.dead = True
            log.error("journal writer of %s failed: %s", self.layout.directory, e, exc_info=True,
                      extra={"event": "journal.failed"})
            self._give_up()
        finally:
            self.close()

    def _tidy(self, step: Callable[[], None]) -> None:
        """Housekeeping that may meet a full disk: logged once, tried again a second later (not
        after every batch: preallocating a spare file would fill what space is left each time)."""
        if self._tidy_failed and monotonic_ns() < self._tidy_next:
            return
        try:
            step()
        except OSError as e:
            if not self._tidy_failed:
                log.warning("journal %s: housekeeping failed, will retry: %s", self.layout.directory, e,
                            extra={"event": "journal.housekeeping_failed"})
            self._tidy_failed = True
            self._tidy_next = monotonic_ns() + _RETRY_MAX_NS
        else:
            self._tidy_failed = False

    def _give_up(self) -> None:
        """Stopping (or dead) with a batch that cannot be written: fail every waiter."""
        p = self.pending
        with p.lock:
            callbacks, p.callbacks = p.callbacks, []
            lost = sum(len(c[2]) for c in p.chunks)
            p.chunks, p.items = [], []
        if lost:
            log.error("journal %s: %d bytes never written (%s); none of them was confirmed",
                      self.layout.directory, lost, self.failure, extra={"event": "journal.unwritten"})
        self.fail_waiters(callbacks, self.failure or OSError("journal stopped"))

    def fail_waiters(self, callbacks: list[Callback], error: BaseException) -> list[Callback]:
        """Tell the waiters that can hear of a failure (a ``fail`` method) about ``error``,
        through ``on_batch_durable``; returns the others."""
        failing, others = [], []
        for cb in callbacks:
            fail = getattr(cb, "fail", None)
            if fail is None:
                others.append(cb)
            else:
                failing.append(_Failure(fail, error))
        if failing:
            notify = self.on_batch_durable
            try:
                if notify is None:
                    for cb in failing:
                        cb()
                else:
                    notify(failing)
            except Exception:
                log.exception("failing journal waiters failed")
        return others

    def _lazy_due(self) -> bool:
        """A written batch nobody waited on has waited long enough for its sync."""
        since = self._unsynced_since
        return bool(since) and monotonic_ns() - since >= self.lazy_sync_ns

    def _sync_lazy(self) -> None:
        """Sync the written batches nobody waited on (the writer is idle, or stops)."""
        try:
            self._write([], lazy=False)
        except OSError as e:
            self._write_failed([], [], [], e)
            return
        self._synced()

    def _synced(self) -> None:
        """Everything written is synced now."""
        self.durable = self._written
        self._unsynced_since = 0
        self._lazy_chunks = []

    def _write_failed(self, chunks: list[list], items: list, callbacks: list[Callback], error: OSError) -> None:
        """Put the batch back in front of what is pending (after the written batches nobody waited
        on and whose sync this was: a failed sync may have dropped their pages too); fail the
        waiters that can hear it.  The ledger has those batches' items already."""
        error = error.with_traceback(None)  # its frames may hold views of the chunks
        chunks = self._lazy_chunks + chunks
        self._lazy_chunks = []
        self._unsynced_since = 0
        chunks = [[seg, off, bytearray(data)] for seg, off, data in chunks]  # appends may extend them
        p = self.pending
        with p.lock:
            p.chunks[:0] = chunks
            p.items[:0] = items
            waiting = callbacks + p.callbacks
            p.callbacks = []
        if self.failure is None:
            log.error("journal %s cannot write: %s; nothing is confirmed until a retry succeeds",
                      self.layout.directory, error, extra={"event": "journal.write_failed"})
            self._retry_ns = _RETRY_FIRST_NS
        else:
            self._retry_ns = min(self._retry_ns * 2, _RETRY_MAX_NS)
        self.failure = error  # before the waiters hear of it: they may look
        keep = self.fail_waiters(waiting, error)
        with p.lock:
            p.callbacks[:0] = keep

    def _segment(self, seg: int) -> SegmentFile:
        """The file of segment ``seg``: reopened when it exists (a retried batch), else activated."""
        if seg in self.ledger.segments:
            return SegmentFile.open(seg, self.layout.data_path(seg), self.file_size, self.layout.stream)
        return self._open_segment(seg)

    def _write_batch(self, chunks: list[list], items: list, callbacks: list[Callback], *, lazy: bool) -> bool:
        """Write, sync, account and confirm one batch; False when the writing failed.  A ``lazy``
        batch (nobody waits on it) is written but not synced."""
        self._last_flush = now = monotonic_ns()
        lazy = lazy and self.datasync
        try:
            written, synced = self._write(chunks, lazy=lazy)
        except OSError as e:
            self._write_failed(chunks, items, callbacks, e)
            return False
        if lazy:
            if chunks:
                self._lazy_chunks += chunks
                if not self._unsynced_since:
                    self._unsynced_since = now
        else:
            self._synced()
        if self.failure is not None:
            log.warning("journal %s writes again (%s is over)", self.layout.directory, self.failure,
                        extra={"event": "journal.write_resumed"})
            self.failure = None
        apply = self.ledger.apply
        records = len(items)
        for item in items:
            code = item[0]
            if code == MARK:
                records -= 1  # MARKs are the journal's own bookkeeping
            elif code == ADD_TX_RUN or code == DELETE_RUN:
                records += len(item[1]) - 1
            apply(*item)
        self.batches += 1
        self.records += records
        self.bytes += written
        if records > self.max_batch:
            self.max_batch = records
        hook = self.before_durable
        if hook is not None and chunks:
            try:
                hook([(seg, off, bytes(data)) for seg, off, data in chunks])
            except BaseException as e:  # fatal (see before_durable): this batch is never confirmed
                self.fail_waiters(callbacks, e)
                raise
        stats = self.on_batch_stats
        if stats is not None:  # before the callbacks: whoever they wake sees this batch counted
            try:
                stats(len(items), written, self.last_sync_ns / 1e9 if synced else 0.0)
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
        return True

    def _write(self, chunks: list[list], *, lazy: bool) -> tuple[int, bool]:
        """pwrite the chunks and fdatasync them, with what earlier lazy batches left unsynced,
        unless ``lazy``; (bytes written, whether a sync ended it)."""
        f = self.file
        segments = self.ledger.segments
        written = 0
        unsynced = bool(self._unsynced_since)  # in the current file
        sync = self.datasync
        stream = self.layout.stream
        for seg, off, data in chunks:
            if f is None or f.id != seg:
                if f is not None and unsynced and sync:  # older segment durable before the newer one is written
                    _datasync(f.fd)
                    self.syncs += 1
                    unsynced = False
                opened = self._segment(seg)  # the old file stays current until this one is open
                if f is not None:
                    f.close()
                f = self.file = opened
            stream.pwrite(f.fd, f.path, data, off)  # one op per run, the batch's own bytearray
            unsynced = True
            written += len(data)
            state = segments[seg]
            end = off + len(data)
            if end > state.used:
                state.used = end
        if chunks:
            seg, off, data = chunks[-1]
            self._written = (seg, off + len(data))
        synced = unsynced and sync and not lazy
        if synced:
            t0 = perf_counter_ns()
            _datasync(f.fd)
            self.last_sync_ns = perf_counter_ns() - t0
            self.syncs += 1
        return written, synced

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

    def maybe_compact(self, force: bool = False) -> BackgroundCompaction | None:
        """Start a compaction beside this thread when the thresholds say so (or when
        forced); the one started or already running, None when there is nothing to do."""
        if self.file is None:
            return None
        if self.compaction is not None:
            return self.compaction
        current = self.file.id
        if not force:
            ledger = self.ledger
            if self.compact_percentage <= 0 or len(ledger.segments) <= self.compact_min_files:
                return None
            if current <= self._compact_tried_at:
                return None  # already tried while this segment was current
            used = ledger.used_bytes()
            if used <= 0 or ledger.live_bytes * 100 >= used * self.compact_percentage:
                return None
        self._compact_tried_at = current
        compactor = self._compactor()
        segments = compactor.candidates(current)
        if not segments:
            return None
        task = BackgroundCompaction(compactor, segments, self._post, self._compacted, self.meta_lock)
        self.compaction = task
        task.start()
        return task

    def compact_now(self) -> int:
        """Compact in the calling thread (no writer thread running); segments replaced."""
        if self.file is None:
            return 0
        with self.meta_lock:
            replaced = self._compactor().run(self.file.id)
        self._compacted(replaced)
        return replaced

    def _compactor(self) -> Compactor:
        return Compactor(self.layout, self.ledger, self.file_size, self.datasync, self.release,
                         self.checkpoint, self.skip_damaged)

    def _compacted(self, replaced: int) -> None:
        self.compaction = None
        if replaced:
            self.compactions += 1
            self.ledger.dirty = True

    def _post(self, request: Callback) -> None:
        """Run ``request`` in this thread between batches."""
        p = self.pending
        with p.lock:
            p.requests.append(request)
            p.cond.notify()
