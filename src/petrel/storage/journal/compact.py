"""Compaction: rewrite the live records of old segments into fewer segments.

It runs beside the writer (its own thread), which keeps appending to newer
segments and confirming syncs meanwhile; only the swap holds the writer:

1. Snapshot (writer thread): the oldest segments up to, not including, the
   current one and the first one holding records of a transaction still open.
   The ledger *watches* them: none is reclaimed, and a record of theirs killed
   from now on is noted with the segment that killed it.
2. Prepare (compaction thread): read each segment once, keep the longest prefix
   that no transaction straddles (one sweep: linear), replay it, and copy the
   records the ledger still counts live (each add followed by its updates, in add
   order, as plain ADD/UPDATE records) into new ``<prefix>-<id>.<ext>.cmp`` files,
   reusing the ids of the segments they replace, so they sort before every
   segment written since.  Sync them.
3. Write ``journal-rename-control.ctr``: the renames and drops to perform, with a
   CRC.  Sync it and the directory.  From here a crash rolls the compaction
   forward on load; before it, load deletes the ``.cmp`` files.
4. Swap (writer thread, between batches): rename each ``.cmp`` over its data
   name, drop the replaced files that were not reused (to the pool, or deleted),
   sync the directory, delete the control file, switch the ledger.  A copied
   record killed meanwhile stays dead: its delete, in a later segment, replays
   after the compacted files, and the ledger counts it dead there.

Load rolls a complete control file forward (every step is idempotent) before it
reads anything, and deletes a torn control file together with stray ``.cmp``
and ``.tmp`` files: without a control file the old segments are all intact.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UnsupportedFormat
from .ledger import Ledger, SegmentState
from .records import ADD, ADD_TX, COMMIT, DELETE, DELETE_TX, PREPARE, ROLLBACK, UPDATE, UPDATE_TX
from .records import HEADER_SIZE, RecordType, encode_data, encode_segment_header, record_size
from .recovery import _commit_mismatch, _Tx, scan
from petrel.storage.stream import FileCreate, FileWrite, StoreStream

from .segment import Layout, check_header, fsync_dir, pwrite_all, read_file

__all__ = ["BackgroundCompaction", "Compactor", "Prepared", "RenamePlan", "clean_strays", "read_control", "roll_forward", "write_control"]

log = logging.getLogger("petrel.storage.journal")

_CONTROL_MAGIC = "petrel-journal-rename-control 1"

Checkpoint = Callable[[str], None]
_ADD, _UPDATE = int(ADD), int(UPDATE)  # plain ints: tuples holding them are not tracked by the GC
_TX_RECORDS = (RecordType.ADD_TX, RecordType.UPDATE_TX, RecordType.DELETE_TX, RecordType.PREPARE)


def _no_checkpoint(step: str) -> None:
    pass


@dataclass(frozen=True, slots=True)
class RenamePlan:
    renames: tuple[tuple[str, str], ...]  # (.cmp file name, data file name)
    drops: tuple[str, ...]  # replaced data files whose ids were not reused


def write_control(layout: Layout, plan: RenamePlan, sync: bool) -> None:
    lines = [_CONTROL_MAGIC]
    lines += [f"rename {src} {dst}" for src, dst in plan.renames]
    lines += [f"drop {name}" for name in plan.drops]
    text = "\n".join(lines) + "\n"
    data = text.encode() + f"end {zlib.crc32(text.encode()):08x}\n".encode()
    path = layout.control_path
    stream = layout.stream
    with stream.lock:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pwrite_all(fd, data, 0)
        except BaseException:
            os.close(fd)
            raise
        if stream.active:
            rel = stream.rel(path)
            stream.emit(FileCreate(rel, 0), FileWrite(rel, 0, data))
    try:
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if sync:
        fsync_dir(layout.directory)


def read_control(layout: Layout) -> RenamePlan | None:
    """The plan in the control file; None when it is torn (never finished writing)."""
    data = layout.control_path.read_bytes()
    body, sep, tail = data.rpartition(b"end ")
    if not sep or tail.strip() != f"{zlib.crc32(body):08x}".encode():
        return None
    lines = body.decode().splitlines()
    if lines and lines[0] != _CONTROL_MAGIC and lines[0].startswith(_CONTROL_MAGIC.rpartition(" ")[0] + " "):
        raise UnsupportedFormat(
            f"compaction control file {layout.control_path} is format {lines[0].rpartition(' ')[2]!r}; "
            f"this broker reads {_CONTROL_MAGIC.rpartition(' ')[2]!r}: start the version that wrote it")
    if not lines or lines[0] != _CONTROL_MAGIC:
        return None
    renames, drops = [], []
    for line in lines[1:]:
        verb, _, rest = line.partition(" ")
        if verb == "rename":
            src, dst = rest.split(" ")
            renames.append((src, dst))
        elif verb == "drop":
            drops.append(rest)
        else:
            return None
    return RenamePlan(tuple(renames), tuple(drops))


def roll_forward(layout: Layout, release: Callable[[Path], None], sync: bool,
                 checkpoint: Checkpoint = _no_checkpoint) -> bool:
    """Finish the renames a control file lists (idempotent); False if there was none to finish."""
    path = layout.control_path
    if not path.exists():
        return False
    plan = read_control(layout)
    directory = layout.directory
    if plan is None:
        log.warning("discarding torn compaction control file %s", path)
    else:
        for i, (src, dst) in enumerate(plan.renames):
            if (directory / src).exists():
                layout.stream.rename(directory / src, directory / dst)
            checkpoint(f"renamed {i + 1}")
        for i, name in enumerate(plan.drops):
            if (directory / name).exists():
                release(directory / name)
            checkpoint(f"dropped {i + 1}")
        if sync:
            fsync_dir(directory)
    layout.stream.unlink(path)
    if sync:
        fsync_dir(directory)
    return plan is not None


def clean_strays(layout: Layout) -> None:
    for path in layout.stray_files():
        log.info("deleting leftover journal file %s", path)
        layout.stream.unlink(path)


class Cancelled(Exception):
    """The journal is stopping: the compaction gives up before its control file."""


@dataclass(slots=True)
class Prepared:
    """What the compaction thread leaves for the swap."""

    replaced: set[int]
    plan: RenamePlan
    moved: dict[int, tuple[int, ...]] = field(default_factory=dict)  # record id -> flat (segment, size, ...)
    outputs: dict[int, SegmentState] = field(default_factory=dict)
    records: int = 0
    extended: set[int] = field(default_factory=set)  # moved records with updates in later segments
    # the last replaced segment's id, kept for the records of transactions straddling its end:
    # (segment, bytes used, transactions, {id: (pieces, bytes) of copied records that were in it})
    carried: tuple[int, int, int, dict[int, tuple[int, int]]] | None = None


def _cut(n: int, spans: dict[int, list[int]]) -> int:
    """Index of the last of ``n`` segments (in order) where compaction can stop, or -1.

    ``spans`` maps a transaction to [index of its first segment, index of the
    segment that ends it, or -1 when none of the ``n`` does].  Compaction may stop
    at the end of segment p when every transaction with records up to p that ends
    after p starts in p itself: those records are then carried, unchanged, in a
    file that keeps p's id, so its COMMIT still finds them where it counted them.
    One sweep over a difference array of the forbidden stops [first + 1, end - 1].
    """
    forbid = [0] * (n + 1)
    for first, end in spans.values():
        if end < 0:
            end = n
        if first + 1 <= end - 1:
            forbid[first + 1] += 1
            forbid[end] -= 1
    best = -1
    depth = 0
    for p in range(n):
        depth += forbid[p]
        if depth == 0:
            best = p
    return best


def write_segment(path: Path, segment_id: int, blob: bytes, file_size: int, sync: bool,
                  stream: StoreStream | None = None) -> None:
    """A new segment file at ``path``: header, ``blob``, zeros to ``file_size``."""
    if stream is None:
        stream = StoreStream(path.parent)
    data = encode_segment_header(segment_id) + blob
    # Written outside the stream's lock (the writer thread must not wait for a whole segment
    # to be written), recorded once whole: nothing else touches a .cmp file meanwhile, and
    # whatever a copy read of it before is reset by the FileCreate.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, data, 0)
        os.posix_fallocate(fd, 0, file_size)
    except BaseException:
        os.close(fd)
        raise
    with stream.lock:
        if stream.active:
            rel = stream.rel(path)
            stream.emit(FileCreate(rel, file_size), FileWrite(rel, 0, data))
    try:
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


class _Replay:
    """Load's replay (recovery.Replay) for what compaction needs, in plain tuples.

    Transactions that straddle the end of the prefix stay in ``txs``: their
    records are carried as they are (see Compactor.prepare).  Tuples of ints and bytes are untracked by the garbage
    collector: a replay of many records adds no work to the full collections
    that stop every thread (the writer's included).
    """

    __slots__ = ("records", "updates", "txs")

    def __init__(self) -> None:
        # id -> (user_type, body, segment, size) of its add, in add order
        self.records: dict[int, tuple[int, bytes, int, int]] = {}
        self.updates: dict[int, tuple] = {}  # id -> ((user_type, body, segment, size), ...)
        self.txs: dict[int, _Tx] = {}

    def _add(self, rid: int, user_type: int, body: bytes, seg: int, size: int) -> None:
        records = self.records
        if rid in records:
            del records[rid]
        records[rid] = (user_type, body, seg, size)
        self.updates.pop(rid, None)

    def _update(self, rid: int, user_type: int, body: bytes, seg: int, size: int) -> None:
        if rid in self.records:
            self.updates[rid] = self.updates.get(rid, ()) + ((user_type, body, seg, size),)

    def _delete(self, rid: int) -> None:
        self.records.pop(rid, None)
        self.updates.pop(rid, None)

    def apply_all(self, raws: list, seg: int) -> None:
        for _off, code, user_type, rid, tx_id, count, body, size in raws:
            if code == ADD:
                self._add(rid, user_type, body, seg, size)
            elif code == UPDATE:
                self._update(rid, user_type, body, seg, size)
            elif code == DELETE:
                self._delete(rid)
            elif code == ADD_TX or code == UPDATE_TX or code == DELETE_TX or code == PREPARE:
                tx = self.txs.get(tx_id)
                if tx is None:
                    tx = self.txs[tx_id] = _Tx()
                if code == PREPARE:
                    tx.prepared = True
                else:
                    tx.records.append((code, rid, user_type, body, seg, size))
                    tx.found[seg] = tx.found.get(seg, 0) + 1
            elif code == COMMIT:
                tx = self.txs.pop(tx_id, None)
                if _commit_mismatch(tx, count, body, seg) is None and tx is not None:
                    for tcode, trid, tuser_type, tbody, tseg, tsize in tx.records:
                        if tcode == ADD_TX:
                            self._add(trid, tuser_type, tbody, tseg, tsize)
                        elif tcode == UPDATE_TX:
                            self._update(trid, tuser_type, tbody, tseg, tsize)
                        else:
                            self._delete(trid)
            elif code == ROLLBACK:
                self.txs.pop(tx_id, None)


class Compactor:
    def __init__(self, layout: Layout, ledger: Ledger, file_size: int, sync: bool,
                 release: Callable[[Path], None], checkpoint: Checkpoint = _no_checkpoint,
                 skip_damaged: bool = False) -> None:
        self.layout = layout
        self.ledger = ledger
        self.file_size = file_size
        self.sync = sync
        self.release = release
        self.checkpoint = checkpoint
        self.skip_damaged = skip_damaged  # damage load was told to skip may be compacted away
        self.cancelled = False  # set from another thread: give up at the next file
        self.plan: RenamePlan | None = None  # the files prepare is writing

    def candidates(self, current: int) -> list[int]:
        blocked = self.ledger.tx_segments()
        first_blocked = min(blocked) if blocked else current
        return [s for s in sorted(self.ledger.segments) if s < min(current, first_blocked)]

    def _replay(self, segments: list[int]) -> tuple[list[int], _Replay, bool, bytes, set[int]] | None:
        """Read ``segments`` once; replay the longest prefix that can be compacted.

        Returns that prefix, its replay, whether skipped damage was seen, and the
        records of the transactions straddling its end (all in its last segment),
        as they are on disk, and their ids."""
        scanned = []
        spans: dict[int, list[int]] = {}  # tx id -> [first index, ending index or -1]
        for index, seg in enumerate(segments):
            if self.cancelled:
                raise Cancelled()
            buf = read_file(self.layout.data_path(seg))
            if check_header(self.layout.data_path(seg), buf, seg) is not None:
                return None
            result = scan(buf, seg)
            if (result.damage or result.torn) and not self.skip_damaged:
                log.warning("not compacting: damage in segment %d", seg)
                segments = segments[:index]
                break
            scanned.append(result)
            for _off, code, _ut, _rid, tx_id, _count, _body, _size in result.records:
                if code in _TX_RECORDS:
                    if tx_id not in spans:
                        spans[tx_id] = [index, -1]
                elif code == COMMIT or code == ROLLBACK:
                    span = spans.get(tx_id)
                    if span is not None:
                        span[1] = index
        last = _cut(len(segments), spans)
        if last < 0:
            return None
        straddling = {tx_id for tx_id, (first, end) in spans.items() if first == last and (end < 0 or end > last)}
        replay = _Replay()
        damaged = False
        for seg, result in zip(segments[:last + 1], scanned):
            damaged = damaged or bool(result.damage or result.torn)
            replay.apply_all(result.records, seg)
        carried = b""
        if straddling:
            buf = read_file(self.layout.data_path(segments[last]))
            carried = b"".join(bytes(buf[off:off + size])
                               for off, code, _ut, _rid, tx_id, _count, _body, size in scanned[last].records
                               if code in _TX_RECORDS and tx_id in straddling)
        return segments[:last + 1], replay, damaged, carried, straddling

    def prepare(self, segments: list[int]) -> Prepared | None:
        """Write the compacted files and the control file (any thread); None: nothing worth doing.

        The ledger must be watching ``segments``."""
        picked = self._replay(segments)
        if picked is None:
            return None
        segments, replay, damaged, carried, straddling = picked
        replaced = set(segments)
        last = segments[-1]
        live = self.ledger.live  # read beside the writer: entries are tuples, replaced whole
        # what to copy, in add order: (type, id, user_type, body)
        items = []
        extended = set()  # records with updates in later segments too
        in_last: dict[int, tuple[int, int]] = {}  # id -> (pieces, bytes) the copy takes out of the last segment
        no_updates = ()
        updates = replay.updates
        for rid, (user_type, body, seg, size) in replay.records.items():
            entry = live.get(rid)
            if entry is None or entry[0] not in replaced:
                continue  # deleted later, or superseded by a newer add
            ups = updates.get(rid, no_updates)
            if len(entry) != 2 + 2 * len(ups):
                extended.add(rid)
            items.append((_ADD, rid, user_type, body))
            pieces, nbytes = (1, size) if seg == last else (0, 0)
            for up_type, up_body, up_seg, up_size in ups:
                items.append((_UPDATE, rid, up_type, up_body))
                if up_seg == last:
                    pieces += 1
                    nbytes += up_size
            if pieces and carried:
                in_last[rid] = (pieces, nbytes)
        # pack greedily into as many segments as needed, reusing the replaced ids
        bins: list[list[tuple[int, int, int, bytes]]] = [[]]
        off = HEADER_SIZE
        for item in items:
            size = record_size(item[0], len(item[3]))
            if off + size > self.file_size:
                bins.append([])
                off = HEADER_SIZE
            bins[-1].append(item)
            off += size
        if not items:
            bins = []
        ids = sorted(segments)
        usable = ids[:-1] if carried else ids  # the carried records keep the last id
        if len(bins) > len(usable):
            # no id left for a copy (two files under one name would overwrite each other):
            # nothing is rewritten, and damage there stays (skipped again on load)
            return None
        kept = usable[:len(bins)] + ([last] if carried else [])
        if len(kept) >= len(ids) and not damaged:
            return None  # would not save a file (rewriting damage away is worth it anyway)
        plan = RenamePlan(
            tuple((self.layout.compact_path(seg).name, self.layout.data_path(seg).name) for seg in kept),
            tuple(self.layout.data_path(seg).name for seg in ids if seg not in kept),
        )
        self.plan = plan  # from here on there may be files to clean up (see abandon)
        prepared = Prepared(replaced, plan, records=len(items), extended=extended)
        if carried:
            prepared.carried = (last, HEADER_SIZE + len(carried), len(straddling), in_last)
        moved = prepared.moved
        for seg, records in zip(ids, bins):
            if self.cancelled:
                raise Cancelled()
            state = SegmentState(seg)
            chunks = []
            for rtype, rid, user_type, body in records:
                data = encode_data(rtype, seg, user_type, rid, body)
                chunks.append(data)
                moved[rid] = moved.get(rid, ()) + (seg, len(data))
                state.live += 1
                state.live_bytes += len(data)
                state.records += 1
            blob = b"".join(chunks)
            state.used = HEADER_SIZE + len(blob)
            write_segment(self.layout.compact_path(seg), seg, blob, self.file_size, self.sync,
                          self.layout.stream)
            prepared.outputs[seg] = state
        if carried:
            write_segment(self.layout.compact_path(last), last, carried, self.file_size, self.sync,
                          self.layout.stream)
        self.checkpoint("compacted files written")
        if self.cancelled:
            raise Cancelled()
        write_control(self.layout, plan, self.sync)
        self.checkpoint("control file written")
        return prepared

    def abandon(self) -> None:
        """Undo a prepare that will not be swapped in: the control file first (so that no
        load rolls it forward), then the ``.cmp`` files.  (An exception out of prepare
        itself leaves the files as a crash would: load cleans up either way.)"""
        plan = self.plan
        if plan is None:
            return
        directory = self.layout.directory
        try:
            self.layout.stream.unlink(self.layout.control_path, missing_ok=True)
            if self.sync:
                fsync_dir(directory)
            for src, _dst in plan.renames:
                self.layout.stream.unlink(directory / src, missing_ok=True)
        except OSError as e:  # load cleans up: a torn or absent control file, stray .cmp files
            log.warning("could not clean up an abandoned compaction: %s", e)

    def swap(self, prepared: Prepared) -> int:
        """Put the compacted files in place and switch the ledger (the writer thread, or load)."""
        roll_forward(self.layout, self.release, self.sync, self.checkpoint)
        self.ledger.rebase(prepared.moved, prepared.replaced, prepared.outputs, prepared.extended,
                           prepared.carried)
        log.info("compacted %d journal segments into %d (%d records)", len(prepared.replaced),
                 len(prepared.plan.renames), prepared.records, extra={"event": "journal.compacted"})
        return len(prepared.replaced)

    def run(self, current: int) -> int:
        """Compact in the calling thread; returns how many segments were replaced (0: nothing done)."""
        segments = self.candidates(current)
        self.ledger.watch(set(segments))
        try:
            prepared = self.prepare(segments)
        except BaseException:
            self.ledger.unwatch()
            raise
        if prepared is None:
            self.ledger.unwatch()
            return 0
        return self.swap(prepared)


class BackgroundCompaction:
    """One compaction beside the writer: prepare in its own thread, swap in the writer's.

    ``post`` hands a callable to the writer thread (run between batches);
    ``finished(replaced)`` is called there once the compaction is over.  ``done``
    is set then too (``replaced`` segments; ``error`` if it failed).
    """

    def __init__(self, compactor: Compactor, segments: list[int], post: Callable[[Callable[[], None]], None],
                 finished: Callable[[int], None], lock: threading.Lock) -> None:
        self.compactor = compactor
        self.segments = segments
        self.post = post
        self.finished = finished
        self.lock = lock  # held for the swap (the segment table's introspection lock)
        self.done = threading.Event()
        self.replaced = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._prepare, name="petrel-journal-compactor", daemon=True)

    def start(self) -> None:
        """Snapshot (the writer thread): the ledger watches the segments, the thread starts."""
        self.compactor.ledger.watch(set(self.segments))
        self.compactor.checkpoint("snapshot taken")
        self.thread.start()

    def join(self, cancel: bool = False) -> None:
        """Wait for the thread (its last step, the swap or the clean-up, then waits for
        the writer); with ``cancel`` it gives up unless its control file is written."""
        if cancel:
            self.compactor.cancelled = True
        self.thread.join()

    def _prepare(self) -> None:
        try:
            prepared = self.compactor.prepare(self.segments)
        except BaseException as e:
            self.compactor.abandon()
            prepared = None
            if not isinstance(e, Cancelled):
                log.error("journal compaction failed (the journal carries on uncompacted): %s", e,
                          exc_info=True, extra={"event": "journal.compaction_failed"})
                self.error = e
        self.post(lambda: self._swap(prepared))

    def _swap(self, prepared: Prepared | None) -> None:
        replaced = 0
        try:
            if prepared is None:
                self.compactor.ledger.unwatch()
            else:
                with self.lock:
                    # a failure here leaves disk and ledger apart: it fails the writer,
                    # and load rolls the control file forward
                    replaced = self.compactor.swap(prepared)
        except BaseException as e:
            self.error = e
            raise
        finally:
            self.replaced = replaced
            self.finished(replaced)
            self.done.set()
