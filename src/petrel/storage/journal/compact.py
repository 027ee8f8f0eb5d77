"""Compaction: rewrite the live records of old segments into fewer segments.

Runs in the writer thread (appends keep buffering meanwhile):

1. Pick the oldest segments up to, not including, the current one and the first
   one holding records of a transaction that is not resolved inside the set.
2. Replay them from disk; keep the records the ledger still counts live.
3. Write those records (each add followed by its updates, in add order, as plain
   ADD/UPDATE records) into ``<prefix>-<id>.<ext>.cmp`` files, reusing the ids of
   the segments they replace, so they sort before the current segment.  Sync.
4. Write ``journal-rename-control.ctr``: the renames and drops to perform, with a
   CRC.  Sync it and the directory.
5. Rename each ``.cmp`` over its data name, drop the replaced files that were not
   reused (to the pool, or deleted), sync the directory, delete the control file.

Load rolls a complete control file forward (every step is idempotent) before it
reads anything, and deletes a torn control file together with stray ``.cmp``
and ``.tmp`` files: without a control file the old segments are all intact.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .ledger import Ledger, SegmentState
from .records import HEADER_SIZE, RecordType, encode_data, record_size
from .recovery import Replay, scan
from .segment import FilePool, Layout, check_header, fsync_dir, read_file

__all__ = ["Compactor", "RenamePlan", "clean_strays", "read_control", "roll_forward", "write_control"]

log = logging.getLogger("petrel.storage.journal")

_CONTROL_MAGIC = "petrel-journal-rename-control 1"

Checkpoint = Callable[[str], None]
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
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
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
                os.replace(directory / src, directory / dst)
            checkpoint(f"renamed {i + 1}")
        for i, name in enumerate(plan.drops):
            if (directory / name).exists():
                release(directory / name)
            checkpoint(f"dropped {i + 1}")
        if sync:
            fsync_dir(directory)
    path.unlink()
    if sync:
        fsync_dir(directory)
    return plan is not None


def clean_strays(layout: Layout) -> None:
    for path in layout.stray_files():
        log.info("deleting leftover journal file %s", path)
        path.unlink()


class Compactor:
    def __init__(self, layout: Layout, pool: FilePool, ledger: Ledger, file_size: int, sync: bool,
                 release: Callable[[Path], None], checkpoint: Checkpoint = _no_checkpoint,
                 skip_damaged: bool = False) -> None:
        self.layout = layout
        self.pool = pool
        self.ledger = ledger
        self.file_size = file_size
        self.sync = sync
        self.release = release
        self.checkpoint = checkpoint
        self.skip_damaged = skip_damaged  # damage load was told to skip may be compacted away

    def candidates(self, current: int) -> list[int]:
        blocked = self.ledger.tx_segments()
        first_blocked = min(blocked) if blocked else current
        return [s for s in sorted(self.ledger.segments) if s < min(current, first_blocked)]

    def _replay(self, segments: list[int]) -> tuple[list[int], Replay, bool] | None:
        """Replay ``segments``; shrink them until no transaction is left open inside.

        Each segment is read and decoded once; shrinking replays the cached records.
        Returns the segments, their replay, and whether skipped damage was seen."""
        scanned: dict[int, object] = {}
        first_seen: dict[int, int] = {}  # tx id -> first segment holding one of its records
        while len(segments) >= 1:
            replay = Replay()
            damaged = False
            for seg in segments:
                result = scanned.get(seg)
                if result is None:
                    buf = read_file(self.layout.data_path(seg))
                    if check_header(self.layout.data_path(seg), buf, seg) is not None:
                        return None
                    result = scanned[seg] = scan(buf, seg)
                    for _off, code, _ut, _rid, tx_id, _count, _body, _size in result.records:
                        if code in _TX_RECORDS and tx_id not in first_seen:
                            first_seen[tx_id] = seg
                if result.damage or result.torn:
                    if not self.skip_damaged:
                        log.warning("not compacting: damage in segment %d", seg)
                        return None
                    damaged = True
                replay.apply_all(result.records, seg)
            if not replay.txs:
                return segments, replay, damaged
            # some transaction is not resolved inside: stop before its first record
            cut = min((first_seen.get(tx_id, segments[-1]) for tx_id in replay.txs), default=segments[-1])
            segments = [s for s in segments if s < cut]
        return None

    def run(self, current: int) -> int:
        """Compact what can be; returns how many segments were replaced (0: nothing done)."""
        picked = self._replay(self.candidates(current))
        if picked is None:
            return 0
        segments, replay, damaged = picked
        replaced = set(segments)
        live = self.ledger.live
        # what to copy, in add order: (type, id, user_type, body)
        items = []
        for rid, rec in replay.records.items():
            entry = live.get(rid)
            if entry is None or entry[0] not in replaced:
                continue  # deleted later, or superseded by a newer add
            items.append((RecordType.ADD, rid, rec.user_type, rec.body))
            for user_type, body in rec.updates:
                items.append((RecordType.UPDATE, rid, user_type, body))
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
        if len(bins) >= len(ids) and not damaged:
            return 0  # would not save a file (rewriting damage away is worth it anyway)
        outputs: dict[int, SegmentState] = {}
        moved: dict[int, list[int]] = {}
        cmp_paths = []
        for seg, records in zip(ids, bins):
            state = SegmentState(seg)
            chunks = []
            for rtype, rid, user_type, body in records:
                data = encode_data(rtype, seg, user_type, rid, body)
                chunks.append(data)
                entry = moved.setdefault(rid, [])
                entry.append(seg)
                entry.append(len(data))
                state.live += 1
                state.live_bytes += len(data)
                state.records += 1
            blob = b"".join(chunks)
            state.used = HEADER_SIZE + len(blob)
            path = self.layout.compact_path(seg)
            f = self.pool.activate(seg, path)
            try:
                f.write(blob, HEADER_SIZE)
                # the file may once have been this very segment: its old records
                # would read as valid, so nothing may be left after the new ones
                f.zero(state.used, self.file_size)
                if self.sync:
                    os.fdatasync(f.fd)
            finally:
                f.close()
            outputs[seg] = state
            cmp_paths.append(path)
        self.checkpoint("compacted files written")
        plan = RenamePlan(
            tuple((p.name, self.layout.data_path(seg).name) for p, seg in zip(cmp_paths, ids)),
            tuple(self.layout.data_path(seg).name for seg in ids[len(bins):]),
        )
        write_control(self.layout, plan, self.sync)
        self.checkpoint("control file written")
        roll_forward(self.layout, self.release, self.sync, self.checkpoint)
        self.ledger.rebase(moved, replaced, outputs)
        log.info("compacted %d journal segments into %d (%d records)", len(ids), len(bins), len(items),
                 extra={"event": "journal.compacted"})
        return len(ids)
