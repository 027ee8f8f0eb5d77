"""Segment files: names, preallocation, the pool of free files.

A directory holds:

* ``<prefix>-<id>.<ext>``        data segments (header + records)
* ``<prefix>-free-<n>.<ext>``    free, preallocated files waiting in the pool; their
                                 content (header, stale records) means nothing
* ``*.tmp``                      a file being preallocated (deleted on load)
* ``<prefix>-<id>.<ext>.cmp``    a compacted segment not yet renamed into place
* ``journal-rename-control.ctr`` the compaction's rename plan (see compact.py)

A file enters service by rewriting its header with the new segment id, syncing
it, and renaming it to its data name (then syncing the directory), so a crash
leaves it either free or a data segment with the right header.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from petrel.storage.stream import FileCreate, FileTruncate, FileWrite, StoreStream

from .records import HEADER_SIZE, decode_segment_header, encode_segment_header

__all__ = ["CONTROL_FILE", "FilePool", "Layout", "SegmentFile", "SegmentInfo", "fsync_dir", "make_dirs"]

log = logging.getLogger("petrel.storage.journal")

CONTROL_FILE = "journal-rename-control.ctr"
_ZEROS = bytes(1 << 20)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    id: int
    path: Path
    live: int | None  # live adds/updates held (None when read offline)
    used: int  # bytes used, header included
    records: int = 0  # records read or written in this segment's life


class Layout:
    """File names of one journal directory, and the stream its changes are recorded in."""

    def __init__(self, directory: str | Path, prefix: str, extension: str,
                 stream: StoreStream | None = None) -> None:
        self.directory = Path(directory)
        self.stream = stream if stream is not None else StoreStream(directory)
        self.prefix = prefix
        self.extension = extension
        self._data = re.compile(rf"{re.escape(prefix)}-(\d+)\.{re.escape(extension)}")
        self._free = re.compile(rf"{re.escape(prefix)}-free-(\d+)\.{re.escape(extension)}")
        self._cmp = re.compile(rf"{re.escape(prefix)}-(\d+)\.{re.escape(extension)}\.cmp")

    def data_path(self, segment_id: int) -> Path:
        return self.directory / f"{self.prefix}-{segment_id}.{self.extension}"

    def free_path(self, n: int) -> Path:
        return self.directory / f"{self.prefix}-free-{n}.{self.extension}"

    def compact_path(self, segment_id: int) -> Path:
        return self.directory / f"{self.prefix}-{segment_id}.{self.extension}.cmp"

    @property
    def control_path(self) -> Path:
        return self.directory / CONTROL_FILE

    def data_files(self) -> dict[int, Path]:
        """Data segments by id, in id order."""
        found = {}
        if self.directory.is_dir():
            for entry in os.scandir(self.directory):
                m = self._data.fullmatch(entry.name)
                if m:
                    found[int(m.group(1))] = Path(entry.path)
        return dict(sorted(found.items()))

    def free_files(self) -> dict[int, Path]:
        found = {}
        for entry in os.scandir(self.directory):
            m = self._free.fullmatch(entry.name)
            if m:
                found[int(m.group(1))] = Path(entry.path)
        return dict(sorted(found.items()))

    def stray_files(self) -> list[Path]:
        """Leftovers of interrupted work: ``.tmp`` and ``.cmp`` files of this journal."""
        stray = []
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.startswith(self.prefix + "-") and (name.endswith(".tmp") or self._cmp.fullmatch(name)):
                stray.append(Path(entry.path))
        return sorted(stray)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path, sync: bool = True) -> None:
    """``mkdir -p`` that makes each directory it creates durable: a new directory's entry lives
    in its parent, so the parent is fsynced (and the new directory, for what it will hold)."""
    directory = Path(directory)
    missing = []
    at = directory
    while not at.is_dir():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        if sync:
            fsync_dir(d.parent)
    if missing and sync:
        fsync_dir(directory)


def pwrite_all(fd: int, data, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


def preallocate(path: Path, file_size: int, segment_id: int, sync: bool) -> None:
    """Create ``path`` filled with zeros to ``file_size``, with a segment header.

    The filesystem allocates the blocks (``fallocate``: they read as zeros, and a full disk
    fails here, not in a later append) without the zeros being written: writing them took the
    journal's writer thread ~20 ms per 10 MiB segment, in which no batch became durable.
    Where the filesystem cannot, the zeros are written."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, file_size)
            left = 0
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            left = file_size
        while left > 0:
            n = os.write(fd, _ZEROS[:min(left, len(_ZEROS))])
            left -= n
        pwrite_all(fd, encode_segment_header(segment_id), 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


class SegmentFile:
    """An open data segment."""

    __slots__ = ("id", "path", "fd")

    def __init__(self, segment_id: int, path: Path, fd: int) -> None:
        self.id = segment_id
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, segment_id: int, path: Path, file_size: int, stream: StoreStream | None = None) -> SegmentFile:
        fd = os.open(path, os.O_RDWR)
        if os.fstat(fd).st_size < file_size:  # a truncated file: give it its size back
            if stream is None:
                os.posix_fallocate(fd, 0, file_size)
            else:
                with stream.lock:
                    os.posix_fallocate(fd, 0, file_size)
                    if stream.active:
                        stream.emit(FileTruncate(stream.rel(path), file_size))
        return cls(segment_id, path, fd)

    def write(self, data, offset: int) -> None:
        pwrite_all(self.fd, data, offset)

    def zero(self, start: int, end: int) -> None:
        """Overwrite bytes ``start`` to ``end`` with zeros."""
        while start < end:
            n = os.pwrite(self.fd, _ZEROS[:min(len(_ZEROS), end - start)], start)
            start += n

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class FilePool:
    """Free preallocated files, and the making of new ones.

    Only the writer thread (or load, before it starts) touches the pool.
    """

    def __init__(self, layout: Layout, file_size: int, sync: bool) -> None:
        self.layout = layout
        self.file_size = file_size
        self.sync = sync
        self.free: list[Path] = []
        self._next = 1
        self.created = 0
        self.reused = 0

    def adopt(self, files: dict[int, Path]) -> None:
        """Take the free files found on disk (wrong-size ones are deleted)."""
        for n, path in files.items():
            self._next = max(self._next, n + 1)
            if path.stat().st_size != self.file_size:
                log.info("deleting free journal file %s of the wrong size", path)
                self.layout.stream.unlink(path)
            else:
                self.free.append(path)

    def _new_name(self) -> Path:
        path = self.layout.free_path(self._next)
        self._next += 1
        return path

    def create(self) -> Path:
        """Preallocate one more free file (``file_size`` bytes reading as zeros)."""
        final = self._new_name()
        tmp = final.with_name(final.name + ".tmp")
        try:
            preallocate(tmp, self.file_size, 0, self.sync)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk: give back what the partial file took
            raise
        stream = self.layout.stream
        with stream.lock:  # the copy never sees the .tmp: the file appears whole under its name
            os.rename(tmp, final)
            if stream.active:
                rel = stream.rel(final)
                stream.emit(FileCreate(rel, self.file_size), FileWrite(rel, 0, encode_segment_header(0)))
        if self.sync:
            fsync_dir(self.layout.directory)
        self.free.append(final)
        self.created += 1
        return final

    def release(self, path: Path, keep: bool) -> None:
        """Return a no longer needed data file: back to the pool, or deleted."""
        if keep:
            final = self._new_name()
            self.layout.stream.rename(path, final)
            self.free.append(final)
        else:
            self.layout.stream.unlink(path)
        if self.sync:
            fsync_dir(self.layout.directory)

    def activate(self, segment_id: int, path: Path | None = None) -> SegmentFile:
        """Put a free file in service as data segment ``segment_id``.

        ``path`` defaults to the data name; compaction passes its ``.cmp`` name.
        """
        if self.free:
            source = self.free.pop()
            self.reused += 1
        else:
            source = self.create()
            self.free.remove(source)
        target = path if path is not None else self.layout.data_path(segment_id)
        fd = os.open(source, os.O_RDWR)
        stream = self.layout.stream
        try:
            stream.pwrite(fd, source, encode_segment_header(segment_id), 0)
            if self.sync:
                os.fdatasync(fd)
            stream.rename(source, target)
            if self.sync:
                fsync_dir(self.layout.directory)
        except BaseException:
            os.close(fd)
            raise
        return SegmentFile(segment_id, target, fd)


def read_file(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def check_header(path: Path, buf, segment_id: int) -> str | None:
    """Why the file's header does not belong to ``segment_id``, or None when it does."""
    try:
        found = decode_segment_header(buf[:HEADER_SIZE])
    except ValueError as e:
        return f"bad segment header: {e}"
    if found != segment_id:
        return f"segment header says {found}, file name says {segment_id}"
    return None
