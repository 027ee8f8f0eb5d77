"""FileJournal: the append API over segment files, one writer thread.

Appends are called from one thread (the event loop) and never block on I/O:
they encode the record, give it its place (segment, offset), hand it to the
writer and return.  ``done`` callbacks come back through ``on_batch_durable``
once their batch is durable.  No asyncio here: the server adapts callbacks to
futures.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from petrel.storage.stream import StoreStream

from .compact import clean_strays, roll_forward
from .errors import JournalError
from .ledger import ADD_TX_RUN, DELETE_RUN, Ledger
from .records import ADD, ADD_TX, COMMIT, DELETE, DELETE_TX, MARK, PREPARE, ROLLBACK, UPDATE, UPDATE_TX
from .records import (
    HEADER_SIZE,
    encode_data,
    encode_delete_run,
    encode_tx_counts,
    encode_tx_data,
    encode_tx_end,
    encode_tx_run,
    record_size,
)
from .recovery import LoadedJournal, recover
from .segment import FilePool, Layout, SegmentInfo, make_dirs
from .writer import BatchHook, BatchStats, Callback, Pending, Writer

__all__ = ["FileJournal"]

log = logging.getLogger("petrel.storage.journal")

_ADD_SIZE = record_size(ADD, 0)
_MARK_SIZE = record_size(MARK, 0)
_DELETE_SIZE = record_size(DELETE, 0)
_TX_SIZE = record_size(ADD_TX, 0)


class _OpenTx:
    """The appender's view of a transaction not yet committed or rolled back."""

    __slots__ = ("counts", "total", "added", "ops")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}  # segment -> records of this tx there
        self.total = 0
        self.added: set[int] = set()
        self.ops: list[tuple[bool, int]] = []  # (added?, id) in order, applied at commit


class FileJournal:
    """An append-only journal of records in preallocated segment files."""

    def __init__(self, directory: str | Path, *, prefix: str = "petrel-data", extension: str = "pj",
                 file_size: int = 10 * 1024 * 1024, min_files: int = 2, pool_files: int = 10,
                 datasync: bool = True, buffer_timeout_ns: int = 0,
                 compact_min_files: int = 10, compact_percentage: int = 30,
                 stream: StoreStream | None = None, keep_prepared: bool = False) -> None:
        """``stream``: where every change to the files is recorded (the data directory's,
        shared with the other stores in it); by default one of the journal's own.
        ``keep_prepared``: a transaction found prepared at load stays open (in
        `LoadedJournal.prepared`), to be committed or rolled back later, instead of rolled back."""
        if file_size < HEADER_SIZE + 2 * _TX_SIZE:
            raise ValueError(f"file_size {file_size} is too small")
        self.layout = Layout(directory, prefix, extension, stream)
        self.keep_prepared = keep_prepared
        self.file_size = file_size
        self.datasync = datasync
        self._pending = Pending()
        self._ledger = Ledger()
        self._pool = FilePool(self.layout, file_size, datasync)
        self._writer = Writer(self.layout, self._pool, self._ledger, self._pending,
                              file_size=file_size, datasync=datasync,
                              buffer_timeout_ns=buffer_timeout_ns, min_files=min_files,
                              pool_files=pool_files, compact_min_files=compact_min_files,
                              compact_percentage=compact_percentage)
        # appender state (the appending thread only)
        self._seg = 0
        self._off = 0
        self._next_seg = 1
        self._known: set[int] = set()
        self._txs: dict[int, _OpenTx] = {}
        self._marked = (0, 0)  # the durable position the last MARK recorded
        self._state = "new"  # new -> loaded -> started -> stopped

    # replication hook -----------------------------------------------------------------

    @property
    def stream(self) -> StoreStream:
        """Where every change to this journal's files is recorded (see storage/stream.py)."""
        return self.layout.stream

    @property
    def before_durable(self) -> BatchHook | None:
        """A test hook (replication follows :attr:`stream` instead).

        If set, the writer thread calls it with each batch as
        ``[(segment_id, offset, bytes), ...]`` after the local write and sync and
        before firing the batch's callbacks. If it raises, the journal fails:
        nothing more is confirmed.
        """
        return self._writer.before_durable

    @before_durable.setter
    def before_durable(self, hook: BatchHook | None) -> None:
        self._writer.before_durable = hook

    @property
    def on_batch_stats(self) -> BatchStats | None:
        """Figures hook: called in the writer thread after each batch as
        ``(records, bytes, sync_seconds)`` (``sync_seconds`` is 0.0 when nothing was synced).
        It must be quick and thread-safe (metrics use it); an exception is logged, not raised.
        """
        return self._writer.on_batch_stats

    @on_batch_stats.setter
    def on_batch_stats(self, hook: BatchStats | None) -> None:
        self._writer.on_batch_stats = hook

    @property
    def position(self) -> tuple[int, int]:
        """(segment id, offset) where the next record will be written."""
        return self._seg, self._off

    @property
    def durable_position(self) -> tuple[int, int]:
        """(segment id, offset) up to which everything appended is written and synced:
        when it equals :attr:`position`, nothing appended waits for the disk."""
        return self._writer.durable

    @property
    def failure(self) -> BaseException | None:
        """Why writes fail now (the writer retries), or None."""
        return self._writer.failure

    # lifecycle ------------------------------------------------------------------------

    def load(self, *, skip_damaged: bool = False) -> LoadedJournal:
        """Recover the directory (created if missing) and return its live records."""
        if self._state != "new":
            raise JournalError("load() can be called once")
        layout = self.layout
        make_dirs(layout.directory, self.datasync)
        self._pool.adopt(layout.free_files())
        if roll_forward(layout, self._writer.release, self.datasync):
            log.info("finished an interrupted compaction in %s", layout.directory)
        clean_strays(layout)
        found = recover(layout, self._ledger, skip_damaged=skip_damaged, sync=self.datasync,
                        keep_prepared=self.keep_prepared)
        self._writer.skip_damaged = skip_damaged
        loaded = found.loaded
        if found.resume_segment:
            seg, off, exists = found.resume_segment, found.resume_offset, found.resume_exists
        else:
            seg, off, exists = found.max_segment + 1, HEADER_SIZE, False
        self._writer.open_current(seg, exists)
        self._seg, self._off, self._next_seg = seg, off, max(seg, found.max_segment) + 1
        self._writer.resume_at(seg, off)
        self._marked = (seg, off)
        if found.mark_resume:  # the evidence kept damage rests on (recovery.py): written below
            self._mark((seg, off))
        self._known = set(loaded.records)
        self._state = "loaded"
        for tx_id, _prepared in found.open_txs:  # keep them dead
            self.rollback(tx_id)
        for prepared in loaded.prepared:  # open again, as they were: their COMMIT counts their records
            tx = self._txs[prepared.tx_id] = _OpenTx()
            tx.counts = dict(prepared.found)
            tx.total = sum(prepared.found.values())
            for code, rid, _user_type, _body in prepared.records:
                if code == ADD_TX:
                    tx.added.add(rid)
                    tx.ops.append((True, rid))
                elif code == DELETE_TX:
                    tx.ops.append((False, rid))
        self._writer.flush_now()
        return loaded

    def start(self, on_batch_durable: Callable[[list[Callback]], None]) -> None:
        """Start the writer thread; it calls ``on_batch_durable(callbacks)`` once per batch."""
        if self._state != "loaded":
            raise JournalError(f"cannot start a journal that is {self._state}")
        self._state = "started"
        self._writer.start(on_batch_durable)

    def stop(self) -> None:
        """Write and sync everything pending, fire its callbacks, stop the thread, close files."""
        if self._state in ("new", "stopped"):
            self._state = "stopped"
            return
        final = self._final_mark if self._state == "started" and self.datasync else None
        self._state = "stopped"
        self._writer.stop(final)

    def _final_mark(self) -> None:
        """A clean stop vouches for everything it synced: one last MARK (recovery.py)."""
        durable = self._writer.durable
        if durable > self._marked and durable[0] == self._seg:
            self._mark(durable)

    # appends --------------------------------------------------------------------------

    def _place(self, size: int) -> tuple[int, int]:
        """Position for a record of ``size`` bytes, rolling over when it does not fit.

        The first record placed after the writer reports a sync in this segment is preceded
        by a MARK of the synced offset (see records.py and recovery.py)."""
        durable = self._writer.durable
        if durable > self._marked and durable[0] == self._seg and self.datasync:
            self._mark(durable)
        off = self._off
        if off + size > self.file_size:
            if size > self.file_size - HEADER_SIZE:
                raise JournalError(f"record of {size} bytes does not fit in a {self.file_size}-byte segment")
            self._seg = self._next_seg
            self._next_seg += 1
            off = HEADER_SIZE
        self._off = off + size
        return self._seg, off

    def _mark(self, durable: tuple[int, int]) -> None:
        self._marked = durable
        seg, off = self._seg, self._off
        if off + _MARK_SIZE > self.file_size:
            return  # no room: the next segment starts without one
        self._off = off + _MARK_SIZE
        self._push(seg, off, encode_data(MARK, seg, 0, durable[1], b""), (MARK, 0, 0, seg, _MARK_SIZE), None)

    def _check(self) -> None:
        if self._state not in ("loaded", "started"):
            raise JournalError(f"journal is {self._state}")
        if self._writer.dead:
            failure = self._writer.failure
            raise JournalError(f"journal writer failed: {failure}") from failure

    def _push(self, seg: int, off: int, data: bytes, item: tuple, done: Callback | None) -> None:
        p = self._pending
        with p.lock:
            chunks = p.chunks
            if chunks:
                last = chunks[-1]
                if last[0] == seg and last[1] + len(last[2]) == off:
                    last[2] += data
                else:
                    chunks.append([seg, off, bytearray(data)])
            else:
                chunks.append([seg, off, bytearray(data)])
            p.items.append(item)
            if done is not None:
                p.callbacks.append(done)
            if p.waiting:
                p.cond.notify()

    def add(self, id: int, user_type: int, body: bytes, done: Callback | None = None) -> None:
        if self._state != "started" or self._writer.dead:
            self._check()
        if id in self._known:
            raise JournalError(f"record {id} already exists")
        size = _ADD_SIZE + len(body)
        seg, off = self._place(size)
        data = encode_data(ADD, seg, user_type, id, body)
        self._known.add(id)
        self._push(seg, off, data, (ADD, id, 0, seg, size), done)

    def update(self, id: int, user_type: int, body: bytes, done: Callback | None = None) -> None:
        if self._state != "started" or self._writer.dead:
            self._check()
        size = _ADD_SIZE + len(body)
        seg, off = self._place(size)
        data = encode_data(UPDATE, seg, user_type, id, body)
        self._push(seg, off, data, (UPDATE, id, 0, seg, size), done)

    def delete(self, id: int, done: Callback | None = None) -> None:
        if self._state != "started" or self._writer.dead:
            self._check()
        if id not in self._known:
            raise JournalError(f"cannot delete unknown record {id}")
        seg, off = self._place(_DELETE_SIZE)
        data = encode_data(DELETE, seg, 0, id, b"")
        self._known.discard(id)
        self._push(seg, off, data, (DELETE, id, 0, seg, _DELETE_SIZE), done)

    def delete_many(self, ids: list[int]) -> None:
        """`delete` of each id of ``ids``, in order: the same DELETE records, placed and encoded
        in runs (as many as the segment holds) and handed to the writer once per run."""
        if self._state != "started" or self._writer.dead:
            self._check()
        known = self._known
        for id in ids:
            if id not in known:
                raise JournalError(f"cannot delete unknown record {id}")
        known.difference_update(ids)
        start, n = 0, len(ids)
        while start < n:
            # as many as fit where the segment's room ends (one MARK may come first), at least one
            room = (self.file_size - self._off - _MARK_SIZE) // _DELETE_SIZE
            end = min(n, start + max(room, 1))
            run = ids[start:end] if start or end < n else ids
            size = _DELETE_SIZE * len(run)
            seg, off = self._place(size)
            data = bytearray()
            encode_delete_run(seg, run, data)
            self._push_run(seg, off, data, (DELETE_RUN, run, 0, seg, size))
            start = end

    def _tx_record(self, rtype: int, tx_id: int, id: int, user_type: int, body: bytes) -> _OpenTx:
        if self._state != "started" or self._writer.dead:
            self._check()
        tx = self._txs.get(tx_id)
        if tx is None:
            tx = _OpenTx()
        size = _TX_SIZE + len(body)
        seg, off = self._place(size)
        data = encode_tx_data(rtype, seg, user_type, tx_id, id, body)
        self._txs[tx_id] = tx
        tx.counts[seg] = tx.counts.get(seg, 0) + 1
        tx.total += 1
        self._push(seg, off, data, (rtype, id, tx_id, seg, size), None)
        return tx

    def add_tx(self, tx_id: int, id: int, user_type: int, body: bytes) -> None:
        if id in self._known:
            raise JournalError(f"record {id} already exists")
        tx = self._tx_record(ADD_TX, tx_id, id, user_type, body)
        tx.added.add(id)
        tx.ops.append((True, id))

    def add_tx_many(self, tx_id: int, user_type: int, records: list[tuple[int, bytes]]) -> None:
        """`add_tx` of each (id, body) of ``records``, in order: placed and encoded in runs (as
        many as the segment holds) and handed to the writer once per run, not once per record."""
        if self._state != "started" or self._writer.dead:
            self._check()
        known = self._known
        for id, _ in records:
            if id in known:
                raise JournalError(f"record {id} already exists")
        tx = self._txs.get(tx_id)
        if tx is None:
            tx = self._txs[tx_id] = _OpenTx()
        added, ops = tx.added, tx.ops
        start, n = 0, len(records)
        while start < n:
            # the records that fit where the segment's room ends (one MARK may come first), at
            # least one (which may start the next segment, as `_place` decides)
            room = self.file_size - self._off - _MARK_SIZE
            end, size = start, 0
            while end < n:
                more = _TX_SIZE + len(records[end][1])
                if end > start and size + more > room:
                    break
                size += more
                end += 1
            seg, off = self._place(size)
            run = records[start:end] if start or end < n else records
            data = bytearray()
            encode_tx_run(ADD_TX, seg, user_type, tx_id, run, data)
            # one (segment, size) for the records of a size: the ledger keeps one per record,
            # each another object for the collector to look at once
            shared: dict[int, tuple[int, int]] = {}
            sizes = {id: shared.setdefault(len(body), (seg, _TX_SIZE + len(body))) for id, body in run}
            added.update(sizes)
            ops.extend([(True, id) for id in sizes])
            tx.counts[seg] = tx.counts.get(seg, 0) + len(run)
            tx.total += len(run)
            self._push_run(seg, off, data, (ADD_TX_RUN, sizes, tx_id, seg, size))
            start = end

    def _push_run(self, seg: int, off: int, data: bytearray, item: tuple) -> None:
        """`_push` of the records of ``item`` (an ADD_TX_RUN or DELETE_RUN) whose bytes are ``data``, together."""
        p = self._pending
        with p.lock:
            chunks = p.chunks
            last = chunks[-1] if chunks else None
            if last is not None and last[0] == seg and last[1] + len(last[2]) == off:
                last[2] += data
            else:
                chunks.append([seg, off, data])
            p.items.append(item)
            if p.waiting:
                p.cond.notify()

    def update_tx(self, tx_id: int, id: int, user_type: int, body: bytes) -> None:
        self._tx_record(UPDATE_TX, tx_id, id, user_type, body)

    def delete_tx(self, tx_id: int, id: int) -> None:
        tx = self._txs.get(tx_id)
        if id not in self._known and (tx is None or id not in tx.added):
            raise JournalError(f"cannot delete unknown record {id} in transaction {tx_id}")
        tx = self._tx_record(DELETE_TX, tx_id, id, 0, b"")
        tx.ops.append((False, id))

    def prepare(self, tx_id: int, data: bytes = b"", done: Callback | None = None) -> None:
        self._check()
        tx = self._txs.get(tx_id)
        total = tx.total if tx is not None else 0
        size = record_size(PREPARE, len(data))
        seg, off = self._place(size)
        encoded = encode_tx_end(PREPARE, seg, tx_id, total, data)
        self._push(seg, off, encoded, (PREPARE, 0, tx_id, seg, size), done)

    def commit(self, tx_id: int, done: Callback | None = None) -> None:
        self._check()
        tx = self._txs.get(tx_id)
        body = encode_tx_counts(tx.counts) if tx is not None else b""
        total = tx.total if tx is not None else 0
        size = record_size(COMMIT, len(body))
        seg, off = self._place(size)
        data = encode_tx_end(COMMIT, seg, tx_id, total, body)
        if tx is not None:
            del self._txs[tx_id]
            known = self._known
            for added, rid in tx.ops:
                if added:
                    known.add(rid)
                else:
                    known.discard(rid)
        self._push(seg, off, data, (COMMIT, 0, tx_id, seg, size), done)

    def rollback(self, tx_id: int, done: Callback | None = None) -> None:
        self._check()
        size = record_size(ROLLBACK, 0)
        seg, off = self._place(size)
        data = encode_tx_end(ROLLBACK, seg, tx_id, 0, b"")
        self._txs.pop(tx_id, None)
        self._push(seg, off, data, (ROLLBACK, 0, tx_id, seg, size), done)

    def sync(self, done: Callback) -> None:
        """``done`` runs once everything appended so far is durable.

        If ``done`` has a ``fail(error)`` method, that runs instead when the journal cannot
        write: at once while a write failure lasts (see writer.py)."""
        writer = self._writer
        if writer.failure is not None and hasattr(done, "fail"):
            writer.fail_waiters([done], writer.failure)
            return
        self._check()
        p = self._pending
        with p.lock:
            p.callbacks.append(done)
            if p.waiting:
                p.cond.notify()

    # maintenance and introspection ----------------------------------------------------

    def compact(self) -> int:
        """Compact now, whatever the thresholds; returns the number of segments replaced.

        Blocks the caller until done; the writer thread goes on confirming appends
        meanwhile (the compaction runs beside it, see compact.py).  If one is already
        running, waits for that one.
        """
        self._check()
        writer = self._writer
        if self._state != "started":
            return writer.compact_now()
        started = threading.Event()
        tasks: list = []

        def request() -> None:
            try:
                tasks.append(writer.maybe_compact(force=True))
            finally:
                started.set()

        writer._post(request)
        self._wait(started)
        task = tasks[0] if tasks else None
        if task is None:
            return 0
        self._wait(task.done)
        if task.error is not None:
            raise JournalError(f"compaction failed: {task.error}") from task.error
        return task.replaced

    def _wait(self, event: threading.Event) -> None:
        while not event.wait(0.5):
            if self._writer.dead:
                raise JournalError(f"journal writer failed: {self._writer.failure}")

    def segments(self) -> list[SegmentInfo]:
        """The data segments: id, path, live records, bytes used."""
        with self._writer.meta_lock:
            states = sorted(self._ledger.segments.values(), key=lambda s: s.id)
            return [SegmentInfo(s.id, self.layout.data_path(s.id), s.live, s.used, s.records)
                    for s in states]

    def pending_bytes(self) -> int:
        """Bytes appended but not yet taken by the writer (for back-pressure)."""
        p = self._pending
        with p.lock:
            return sum(len(chunk[2]) for chunk in p.chunks)

    def stats(self) -> dict:
        w = self._writer
        with w.meta_lock:
            used = self._ledger.used_bytes()
            segments = len(self._ledger.segments)
        live = self._ledger.live_bytes
        return {
            "batches": w.batches,
            "records": w.records,
            "syncs": w.syncs,
            "bytes": w.bytes,
            "records_per_batch": w.records / w.batches if w.batches else 0.0,
            "max_batch": w.max_batch,
            "last_sync_latency_ns": w.last_sync_ns,
            "segments": segments,
            "free_files": len(self._pool.free),
            "files_created": self._pool.created,
            "files_reused": self._pool.reused,
            "reclaimed": w.reclaimed,
            "compactions": w.compactions,
            "live_bytes": live,
            "used_bytes": used,
            "live_ratio": live / used if used else 0.0,
            "position": self.position,
        }
