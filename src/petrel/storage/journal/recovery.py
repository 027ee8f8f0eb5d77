"""Reading a journal back: scanning segments, replaying records, judging damage.

Load reads every data segment in id order and replays its records:

* A record that fails to decode ends the segment's data, unless a valid record
  of the same segment follows it: then the bytes in between are damage.
* The end of a segment is clean when what follows is zeros or records of another
  segment (a reused file).  It is a torn tail when a record of this segment is
  cut short or fails its CRC there.  A torn tail is dropped if no later segment
  holds data (the crash cut the last write; nothing there was confirmed);
  otherwise it is damage.
* A hole (bytes that do not decode, followed by valid records) in the newest
  segment holding data is a torn tail too when it lies at or after that
  segment's last sync point on record; see "Power loss" below.
* Damage raises :class:`DamagedJournal`, or with ``skip_damaged`` is skipped,
  reported in :attr:`LoadedJournal.skipped` and logged.  A segment whose header
  is unreadable is then renamed ``*.damaged``; damaged bytes inside a segment
  stay until compaction rewrites the segment or it is reclaimed, so until then
  a load without ``skip_damaged`` reports them again.

Power loss
----------
A crash that takes the OS page cache with it keeps what was synced and, of what
was written after the last completed ``fdatasync``, any subset of pages (the
disk may write them in any order).  So the newest segment may end in a hole
followed by valid records: they were never confirmed (a confirmed record's sync
would have made every byte before it durable, hole included), and the region is
a torn tail to drop.  The same bytes can also be real damage to synced data
(a bad sector), and then records after it may be confirmed: that must stop the
broker.  The two are told apart by MARK records: the appender writes, before
the first record it places after a sync completed, a MARK holding the offset up
to which the segment was then synced (records.py).  A valid MARK is proof, even
when it lies after the hole, that everything before its offset was synced.  With
``M`` the highest offset any valid MARK of the newest segment vouches for and
``H`` the first hole:

* ``H < M``: the hole is in synced data: damage (file and offset reported).
* ``H >= M``: no sync on record covers the hole.  Power loss can produce it, so
  it is treated as a torn tail: records from ``H`` on are dropped (with a
  warning), a MARK of ``H`` is written at ``H`` (see below), the bytes after it
  are zeroed, and appends resume after the MARK.  What this gives up:
  real damage inside the last synced batch whose MARK never reached the disk
  (at most the batches synced after the last durable MARK) reads as a torn tail.

Older segments need no MARKs: one is synced whole before a newer one is written,
so any hole in a segment followed by data in a later one is damage.

Dropping a torn tail leaves a MARK
----------------------------------
Whether a hole is damage or a torn tail depends on whether later segments hold
data, so a load must not destroy the evidence an earlier load judged by.  With
holes in segments 1 and 2, say, the valid records after segment 2's hole prove
segment 2 was written, hence segment 1 synced whole: its hole is damage and the
records after it are kept (and served).  Segment 2's hole is a torn tail; if
dropping it left segment 2 empty, the next load would see segment 1 as the
newest segment holding data, judge its hole a torn tail and drop the records the
first load kept.  So the dropped tail is replaced by a MARK of its offset,
written and synced before the bytes after it are zeroed: the segment still
holds a record (the evidence stays), the MARK truthfully vouches that the
segment is synced up to there (recovery synced it), and appends resume after
it.  A MARK is an ordinary record of format version 1 that older code reads too.

The evidence must also outlive reclaim: a segment holding nothing live goes once
it is older than the segment appends go to.  So when a hole was kept because
later segments hold data and the segment appends resume in holds no record (a
new one, or one left empty), the journal appends a MARK there first, synced
before load returns: the segment appends go to always holds a record newer than
every kept hole (a rollover's first record is synced before anything older is
reclaimed; compaction never takes the current segment).

Transactions take effect at their COMMIT.  A COMMIT whose counts do not match the
records found is dropped; a transaction left open at the end is rolled back and
reported, and the caller appends a ROLLBACK for it.  A prepared one (its PREPARE
found) is rolled back the same way, unless the caller keeps prepared
transactions (``keep_prepared``): then it is handed back, records and PREPARE
data, still open, for its owner to commit or roll back later (XA).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from petrel.storage.stream import FileTruncate, StoreStream

from .errors import DamagedJournal
from .ledger import Ledger
from .records import ADD, ADD_TX, COMMIT, DELETE, DELETE_TX, MARK, PREPARE, ROLLBACK, UPDATE, UPDATE_TX
from .records import (
    HEADER_SIZE,
    CorruptRecord,
    Record,
    RecordError,
    RecordType,
    TornRecord,
    decode_raw,
    decode_run,
    decode_tx_counts,
    encode_data,
    find_candidate,
    record_size,
)
from .segment import Layout, SegmentInfo, check_header, read_file

__all__ = ["LoadedJournal", "LoadedRecord", "PreparedTx", "Replay", "Scan", "read_segments", "recover", "scan"]

log = logging.getLogger("petrel.storage.journal")

_ZEROS = bytes(1 << 20)
_MARK_SIZE = record_size(MARK, 0)


@dataclass(slots=True)
class LoadedRecord:
    id: int
    user_type: int
    body: bytes
    updates: list[tuple[int, bytes]] = field(default_factory=list)  # (user_type, body), in order


@dataclass
class LoadedJournal:
    records: dict[int, LoadedRecord]  # live records in insertion (add) order
    rolled_back: list[int]  # tx ids rolled back on load
    skipped: list[str]  # damaged regions skipped (skip_damaged=True)
    max_id: int  # highest record id seen anywhere, even deleted
    prepared: list[PreparedTx] = field(default_factory=list)  # kept open (``keep_prepared``), in order


@dataclass(slots=True)
class PreparedTx:
    """A transaction found prepared and kept open: its records as written, its PREPARE's data."""

    tx_id: int
    data: bytes
    records: list[tuple[int, int, int, bytes]]  # (type code, record id, user type, body), in order
    found: dict[int, int]  # segment -> records of it there (what its COMMIT must count)


# a decoded record: (offset, type code, user_type, id, tx_id, count, body, size)
Raw = tuple[int, int, int, int, int, int, bytes, int]


@dataclass(frozen=True, slots=True)
class Damage:
    offset: int
    reason: str
    resume: int  # offset of the next valid record


@dataclass(slots=True)
class Scan:
    records: list[Raw]  # (offset, type code, user_type, id, tx_id, count, body, size)
    damage: list[Damage]  # holes followed by valid records
    end: int  # offset just past the last valid record
    tail: RecordError | None  # what stopped the scan at ``end`` (None: end of buffer)

    @property
    def torn(self) -> bool:
        """The data ends in a record of this segment that is cut short or corrupt."""
        tail = self.tail
        return isinstance(tail, CorruptRecord) or (isinstance(tail, TornRecord) and tail.ours)


def next_valid(buf, start: int, segment_id: int) -> int:
    """Offset of the first decodable record of ``segment_id`` at or after ``start``, or -1."""
    at = start
    while True:
        at = find_candidate(buf, at, segment_id)
        if at < 0:
            return -1
        try:
            decode_raw(buf, at, segment_id)
        except RecordError:
            at += 1
            continue
        return at


def scan(buf, segment_id: int, start: int = HEADER_SIZE) -> Scan:
    """Decode every record of one segment's bytes, noting holes and how the data ends."""
    records: list[Raw] = []
    damage = []
    off = start
    size = len(buf)
    append = records.append
    while off < size:
        off = decode_run(buf, off, segment_id, append)  # up to the first record that does not decode
        if off >= size:
            break
        try:
            decode_raw(buf, off, segment_id)
        except RecordError as e:
            resume = next_valid(buf, off + 1, segment_id)
            if resume < 0:
                return Scan(records, damage, off, e)
            damage.append(Damage(off, str(e), resume))
            off = resume
            continue
        raise AssertionError(f"record at offset {off} decodes, yet decode_run stopped there")
    return Scan(records, damage, off, None)


def as_record(raw: Raw) -> Record:
    _off, code, user_type, rid, tx_id, count, body, _size = raw
    return Record(RecordType(code), rid, user_type, body, tx_id, count)


class _Tx:
    __slots__ = ("records", "found", "prepared", "data")

    def __init__(self) -> None:
        self.records: list[tuple[int, int, int, bytes]] = []  # (type, id, user_type, body)
        self.found: dict[int, int] = {}  # segment -> records of this tx there
        self.prepared = False
        self.data = b""  # its PREPARE's


class Replay:
    """Applies records in journal order; feeds a ledger when given one."""

    def __init__(self, ledger: Ledger | None = None) -> None:
        self.ledger = ledger
        self.records: dict[int, LoadedRecord] = {}
        self.txs: dict[int, _Tx] = {}
        self.max_id = 0
        self.dropped: list[int] = []

    def apply_all(self, raws: list[Raw], seg: int) -> None:
        records = self.records
        ledger_apply = self.ledger.apply if self.ledger is not None else None
        max_id = self.max_id
        for _off, code, user_type, rid, tx_id, count, body, size in raws:
            if code <= DELETE and rid > max_id:
                max_id = rid
            if code == ADD:
                if rid in records:
                    del records[rid]
                records[rid] = LoadedRecord(rid, user_type, body, [])
            elif code == UPDATE:
                r = records.get(rid)
                if r is not None:
                    r.updates.append((user_type, body))
            elif code == DELETE:
                records.pop(rid, None)
            elif code == ADD_TX or code == UPDATE_TX or code == DELETE_TX:
                tx = self.txs.get(tx_id)
                if tx is None:
                    tx = self.txs[tx_id] = _Tx()
                tx.records.append((code, rid, user_type, body))
                tx.found[seg] = tx.found.get(seg, 0) + 1
            elif code == PREPARE:
                tx = self.txs.get(tx_id)
                if tx is None:
                    tx = self.txs[tx_id] = _Tx()
                tx.prepared = True
                tx.data = bytes(body)
            elif code == MARK:
                pass
            elif code == COMMIT:
                tx = self.txs.pop(tx_id, None)
                reason = _commit_mismatch(tx, count, body, seg)
                if reason is None:
                    if tx is not None:
                        self._commit(tx)
                else:
                    log.warning("dropping transaction %d: %s", tx_id, reason,
                                extra={"event": "journal.tx_dropped"})
                    self.dropped.append(tx_id)
                    code = ROLLBACK
            else:  # ROLLBACK
                self.txs.pop(tx_id, None)
            if ledger_apply is not None:
                ledger_apply(code, rid, tx_id, seg, size)
        self.max_id = max_id

    def _commit(self, tx: _Tx) -> None:
        records = self.records
        for code, rid, user_type, body in tx.records:
            if code == ADD_TX:
                records.pop(rid, None)
                records[rid] = LoadedRecord(rid, user_type, body, [])
            elif code == UPDATE_TX:
                live = records.get(rid)
                if live is not None:
                    live.updates.append((user_type, body))
            else:
                records.pop(rid, None)


def _commit_mismatch(tx: _Tx | None, count: int, body: bytes, seg: int) -> str | None:
    """Why a COMMIT does not match the records found, or None when it does.

    Segments listed in the COMMIT body that hold none of the transaction's
    records were reclaimed or compacted (older segments are synced before a
    newer one is written, so they cannot have lost records to a crash); only the
    COMMIT's own segment must hold exactly what it lists.
    """
    found = tx.found if tx is not None else {}
    if not body:
        total = sum(found.values())
        return None if total == count else f"COMMIT counts {count} records, found {total}"
    try:
        listed = decode_tx_counts(body)
    except ValueError as e:
        return str(e)
    if sum(listed.values()) != count:
        return "COMMIT count disagrees with its per-segment counts"
    for s, n in listed.items():
        have = found.get(s, 0)
        if have != n and (have != 0 or s == seg):
            return f"segment {s}: COMMIT counts {n} records, found {have}"
    for s in found:
        if s not in listed:
            return f"segment {s} holds records the COMMIT does not count"
    return None


@dataclass
class Recovered:
    """What load found, beyond the loaded journal itself."""

    loaded: LoadedJournal
    resume_segment: int  # segment to append to (0: none usable, start a new one)
    resume_offset: int
    resume_exists: bool  # the resume segment's file exists
    max_segment: int  # highest segment id in the directory
    open_txs: list[tuple[int, bool]]  # (tx id, prepared) still open: to roll back
    # damage kept because later segments hold data, and the resume segment holds no record:
    # the caller appends a MARK there first (see "Dropping a torn tail leaves a MARK")
    mark_resume: bool = False


def _zero_from(path: Path, offset: int, sync: bool, stream: StoreStream) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        with stream.lock:
            end = os.fstat(fd).st_size
            start = offset
            while offset < end:
                n = os.pwrite(fd, _ZEROS[:min(len(_ZEROS), end - offset)], offset)
                offset += n
            if stream.active and start < end:  # the same bytes, without shipping the zeros
                rel = stream.rel(path)
                stream.emit(FileTruncate(rel, start), FileTruncate(rel, end))
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def _mark_at(path: Path, offset: int, sync: bool, stream: StoreStream, segment_id: int) -> None:
    """Write (and sync) a MARK of ``offset`` at ``offset``: where a torn tail was dropped."""
    fd = os.open(path, os.O_RDWR)
    try:
        stream.pwrite(fd, path, encode_data(MARK, segment_id, 0, offset, b""), offset)
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def recover(layout: Layout, ledger: Ledger, *, skip_damaged: bool, sync: bool,
            keep_prepared: bool = False) -> Recovered:
    """Replay every data segment of ``layout`` into ``ledger``; see the module doc."""
    replay = Replay(ledger)
    skipped: list[str] = []
    files = layout.data_files()
    # a torn tail waiting to learn whether later segments hold data: (path, offset, reason, segment)
    suspect: tuple[Path, int, str, int] | None = None
    last: tuple[int, Path, Scan, bytes] | None = None  # last segment with a sound header

    def damaged(path: Path, offset: int, reason: str, until: str) -> None:
        if not skip_damaged:
            raise DamagedJournal(str(path), offset, reason)
        note = f"{path} at offset {offset} ({reason}), skipped to {until}"
        log.warning("journal damage skipped: %s", note, extra={"event": "journal.damage_skipped"})
        skipped.append(note)

    # a hole waiting to learn whether its segment is the newest holding data:
    # (path, segment, scan, index of the first record after the hole)
    held: tuple[Path, int, Scan, int] | None = None
    resume_end = 0
    kept_older = False  # a hole kept as damage because later segments hold data

    def judge_held(newest: bool) -> bool:
        """Settle the held hole; True when it was a torn tail (records after it dropped)."""
        nonlocal kept_older
        h_path, h_seg, h_scan, first_after = held
        hole = h_scan.damage[0].offset
        vouched = max((raw[3] for raw in h_scan.records if raw[1] == MARK), default=0)
        if newest and hole >= vouched:
            dropped = len(h_scan.records) - first_after
            log.warning("dropping torn tail of %s from offset %d (%s): %d records after it were never "
                        "synced (a power loss can leave that)", h_path, hole, h_scan.damage[0].reason, dropped,
                        extra={"event": "journal.torn_tail"})
            return True
        reason = h_scan.damage[0].reason
        if not newest:
            reason += " (later segments hold data)"
            kept_older = True
        else:
            reason += f" (in data synced up to offset {vouched})"
        damaged(h_path, hole, reason, f"offset {h_scan.damage[0].resume}")
        for d in h_scan.damage[1:]:
            damaged(h_path, d.offset, d.reason, f"offset {d.resume}")
        replay.apply_all(h_scan.records[first_after:], h_seg)
        return False

    for seg, path in files.items():
        buf = read_file(path)
        problem = check_header(path, buf, seg)
        if problem is not None:
            damaged(path, 0, problem, "the next segment")
            aside = path.with_name(path.name + ".damaged")
            layout.stream.rename(path, aside)  # out of the way of later loads, kept for inspection
            log.warning("moved unreadable journal segment %s to %s", path, aside)
            continue
        result = scan(buf, seg)
        ledger.add_segment(seg, result.end)
        if result.records and held is not None:
            judge_held(newest=False)
            held = None
        if result.records and suspect is not None:
            s_path, s_off, s_reason, _ = suspect
            damaged(s_path, s_off, f"torn record followed by data in later segments: {s_reason}",
                    "the next segment")
            suspect = None
        if result.damage:
            hole = result.damage[0].offset
            first_after = next(i for i, raw in enumerate(result.records) if raw[0] > hole)
            replay.apply_all(result.records[:first_after], seg)
            held = (path, seg, result, first_after)
        else:
            replay.apply_all(result.records, seg)
        if result.torn:
            suspect = (path, result.end, str(result.tail), seg)
        last = (seg, path, result, buf)
        resume_end = result.end

    if held is not None:
        torn_hole = judge_held(newest=True)
        h_path, h_seg, h_scan, _ = held
        if torn_hole:
            # The segment keeps a MARK where its data now ends (see "Dropping a torn tail
            # leaves a MARK"), written and synced before the bytes after it are zeroed.
            hole = h_scan.damage[0].offset
            _mark_at(h_path, hole, sync, layout.stream, h_seg)
            ledger.apply(MARK, hole, 0, h_seg, _MARK_SIZE)
            ledger.segments[h_seg].used = hole + _MARK_SIZE
            _zero_from(h_path, hole + _MARK_SIZE, sync, layout.stream)
            if last is not None and last[0] == h_seg:
                resume_end = hole + _MARK_SIZE
            if suspect is not None and suspect[3] == h_seg:
                suspect = None  # the torn record lay after the hole: zeroed with it

    if suspect is not None:  # a torn tail nothing follows: the crash cut the last write
        s_path, s_off, s_reason, s_seg = suspect
        log.info("dropping torn tail of %s at offset %d: %s", s_path, s_off, s_reason)
        _zero_from(s_path, s_off, sync, layout.stream)

    max_segment = max(files) if files else 0
    resume_segment, resume_offset, resume_exists = 0, HEADER_SIZE, False
    if last is not None and last[0] == max_segment:
        seg, path, result, buf = last
        resume_segment, resume_offset, resume_exists = seg, resume_end, True
        if (suspect is None or suspect[3] != seg) and resume_end == result.end:
            if find_candidate(buf, result.end, seg) >= 0:  # leftovers of an earlier torn tail
                _zero_from(path, result.end, sync, layout.stream)

    kept = [PreparedTx(tx_id, tx.data, tx.records, tx.found) for tx_id, tx in replay.txs.items()
            if tx.prepared and keep_prepared]
    open_txs = [(tx_id, tx.prepared) for tx_id, tx in replay.txs.items() if not (tx.prepared and keep_prepared)]
    for tx_id, prepared in open_txs:
        if prepared:
            log.warning("rolling back prepared transaction %d (no XA recovery)", tx_id,
                        extra={"event": "journal.tx_rolled_back"})
        else:
            log.warning("rolling back unfinished transaction %d", tx_id,
                        extra={"event": "journal.tx_rolled_back"})
    for tx in kept:
        log.info("keeping prepared transaction %d (%d records) for its owner to finish", tx.tx_id,
                 len(tx.records), extra={"event": "journal.tx_prepared_kept"})
    loaded = LoadedJournal(replay.records, [tx_id for tx_id, _ in open_txs], skipped, replay.max_id, kept)
    holds = resume_exists and resume_offset > HEADER_SIZE  # a valid record lies before the offset
    return Recovered(loaded, resume_segment, resume_offset, resume_exists, max_segment, open_txs,
                     kept_older and not holds)


def read_segments(directory: str | Path, prefix: str = "petrel-data",
                  extension: str = "pj") -> Iterator[tuple[SegmentInfo, Iterator[tuple[int, Record]]]]:
    """Decode a journal offline (``petrel data print``): each segment in id order
    with its valid records and their offsets.  Damaged bytes are skipped; nothing
    is written."""
    layout = Layout(directory, prefix, extension)
    for seg, path in layout.data_files().items():
        buf = read_file(path)
        if check_header(path, buf, seg) is not None:
            yield SegmentInfo(seg, path, None, 0, 0), iter(())
            continue
        result = scan(buf, seg)
        records = [raw for raw in result.records if raw[1] != MARK]  # bookkeeping, not data
        info = SegmentInfo(seg, path, None, result.end, len(records))
        yield info, iter([(raw[0], as_record(raw)) for raw in records])
