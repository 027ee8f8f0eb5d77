"""Page files: the backlog of a queue that does not fit in memory.

Each paging queue has a directory `paging/<queue id>/` of page files `NNNNNNNNN.page`, each a
12-byte header `u32 0 | "PTPG" | u32 format version` (files without one are version 1, read
as before) then a run of records `u32 length | u32 crc32 | payload` with payload = msgpack (seq, durable, message
id, encoded message[, True when the record is its send's only home, see `append`]). Writes are appended by one writer thread and made durable together
(`sync(done)`, like the journal's group commit); reads happen where the queue drains.

A queue's read position (its cursor) lives in the message journal, written in the same
transaction that moves a batch of paged messages into the journal (`FileStore.depage`), so a
crash can neither lose nor duplicate a paged message. A page file is deleted once the cursor
has passed it and the journal record saying so is durable (the store unlinks the paths
`release`, `reset` and `delete_queue` return from its sync callback). Non-durable messages are
paged too (to bound memory) but skipped when read back after a restart.

A queue's page file numbers only grow, across paging episodes and restarts: a new file is
numbered after every file on disk and after the file its recovered cursor points into, so
the cursor, which only moves forward, never points past a file still to be read.

A new file and a new queue directory are made durable (their directory fsynced) by the
writer before the callbacks of the sync that confirms records in them run.

Every change to the files is made under the data directory's `StoreStream` lock and recorded
there (storage/stream.py): file creation, each record written, a failed batch's rewind,
deletions.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from petrel.core.message import Message, decode_message, encode_message
from petrel.storage.journal.segment import fsync_dir
from petrel.storage.stream import FileCreate, FileWrite, StoreStream

log = logging.getLogger("petrel.storage.paging")

_HEAD = struct.Struct("<II")
_FILE_HEAD = struct.Struct("<I4sI")  # 0 (no record is empty), magic, format version
PAGE_MAGIC = b"PTPG"
PAGE_FORMAT_VERSION = 2  # 1: the files had no header
HEADER = _FILE_HEAD.pack(0, PAGE_MAGIC, PAGE_FORMAT_VERSION)


class PageFormatError(Exception):
    """A page file written by a newer (or unknown) version of the broker."""


def _records_start(head: bytes, path: Path | str) -> int:
    """Where the records of a page file start, from its first bytes (0: a version-1 file)."""
    if len(head) >= _FILE_HEAD.size and head[:8] == b"\0\0\0\0" + PAGE_MAGIC:
        version = _FILE_HEAD.unpack_from(head, 0)[2]
        if version != PAGE_FORMAT_VERSION:
            raise PageFormatError(
                f"page file {path} has format version {version}; this broker reads versions 1 and "
                f"{PAGE_FORMAT_VERSION}: start the version that wrote it, or move the file aside")
        return _FILE_HEAD.size
    return 0
_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


@dataclass(slots=True, frozen=True, order=True)
class PagePosition:
    file: int
    offset: int


@dataclass(slots=True)
class PagedMessage:
    position: PagePosition  # where the record after this one starts
    seq: int
    message: Message
    home: bool = False  # the record is its send's only durable home (see `PageStore.append`)


class _QueuePages:
    __slots__ = ("queue_id", "dir", "write_file", "write_offset", "fd", "files", "ends")

    def __init__(self, queue_id: int, directory: Path) -> None:
        self.queue_id = queue_id
        self.dir = directory
        self.write_file = 0
        self.write_offset = 0
        self.fd: int | None = None
        self.files: list[int] = []
        self.ends: dict[int, int] = {}  # file -> where its last record ends (the files this run filled)

    def path(self, file: int) -> Path:
        return self.dir / f"{file:09d}.page"


class PageStore:
    def __init__(self, directory: Path, *, page_size: int = 10 * 1024 * 1024, datasync: bool = True,
                 dispatch: Callable[[list[Callable[[], None]]], None] | None = None,
                 stream: StoreStream | None = None) -> None:
        self.dir = Path(directory)
        self.stream = stream if stream is not None else StoreStream(self.dir)
        self.page_size = page_size
        self.datasync = datasync
        self.dispatch = dispatch or _run_all
        self._queues: dict[int, _QueuePages] = {}
        self._pending: list[tuple[int, bytes, int]] = []  # (fd, data, queue id); b"" closes fd, fd -1 a sync
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.run_start: dict[int, int] = {}  # queue id -> first page file written by this run
        self._unwritten: dict[int, int] = {}  # queue id -> records appended but not yet written
        self.failure: OSError | None = None  # why page writes fail now (the writer retries)
        self._rewind: dict[int, int] = {}  # fd -> size to cut it back to before a retried batch
        self._dirs: dict[Path, None] = {}  # directories with a new entry, fsynced by the next write
        self._paths: dict[int, Path] = {}  # open fd -> its file (the writer's rewinds name it)

    # -- recovery ----------------------------------------------------------------------

    def recover(self, cursor_files: dict[int, int] | None = None) -> dict[int, list[int]]:
        """The page files of every queue directory (queue id -> file numbers), positioned for appends.

        `cursor_files` maps a queue id to the page file its recovered cursor points into: this
        run's files are numbered after it, even when the files up to it are gone."""
        cursor_files = cursor_files or {}
        if not self.dir.is_dir():
            self.dir.mkdir(parents=True, exist_ok=True)
            self._dirs[self.dir.parent] = None
        found: dict[int, list[int]] = {}
        for qdir in self.dir.iterdir():
            if not qdir.is_dir() or not qdir.name.isdigit():
                continue
            qid = int(qdir.name)
            files = sorted(int(p.stem) for p in qdir.glob("*.page") if p.stem.isdigit())
            for f in files:
                path = qdir / f"{f:09d}.page"
                with open(path, "rb") as fh:
                    _records_start(fh.read(_FILE_HEAD.size), path)  # refuses an unknown version
            pages = _QueuePages(qid, qdir)
            pages.files = files
            self._queues[qid] = pages
            found[qid] = files
        for qid, cursor_file in cursor_files.items():
            if qid not in self._queues:
                self._queues[qid] = _QueuePages(qid, self.dir / str(qid))
        for qid, pages in self._queues.items():
            last = max(pages.files[-1] if pages.files else 0, cursor_files.get(qid, 0))
            # This run appends to a new file: records before it are from earlier runs
            # (their non-durable messages are skipped when read back).
            pages.write_file = last + 1
            pages.write_offset = 0
            self.run_start[qid] = pages.write_file
        return found

    @staticmethod
    def _valid_end(path: Path) -> int:
        """Offset after the last whole record (a torn tail was never confirmed)."""
        data = path.read_bytes()
        pos = _records_start(data[:_FILE_HEAD.size], path)
        while pos + 8 <= len(data):
            length, crc = _HEAD.unpack_from(data, pos)
            end = pos + 8 + length
            if length == 0 or end > len(data) or zlib.crc32(memoryview(data)[pos + 8 : end]) != crc:
                break
            pos = end
        return pos

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="petrel-paging", daemon=True)
        self._thread.start()

    # -- writing (event loop thread) ---------------------------------------------------

    def append(self, queue_id: int, seq: int, message: Message, *, home: bool = False) -> PagePosition:
        """`home`: this record is the only durable home of its send (no journal record, no other
        page record), so recovery may take the message's duplicate ID from it (a fifth field)."""
        pages = self._queues.get(queue_id)
        if pages is None:
            pages = self._queues[queue_id] = _QueuePages(queue_id, self.dir / str(queue_id))
        fields = (seq, message.durable, message.id, encode_message(message))
        payload = _enc.encode(fields + (True,) if home else fields)
        record = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        if pages.fd is None:
            self._open(pages)
            record = HEADER + record  # a new file's first write: its header, then the record
        elif pages.write_offset > 0 and pages.write_offset + len(record) > self.page_size:
            with self._lock:
                self._pending.append((pages.fd, b"", 0))  # the writer closes it after its last write
            pages.fd = None
            pages.ends[pages.write_file] = pages.write_offset
            pages.write_file += 1
            pages.write_offset = 0
            self._open(pages)
            record = HEADER + record
        pages.write_offset += len(record)
        with self._lock:
            self._pending.append((pages.fd, record, queue_id))
            self._unwritten[queue_id] = self._unwritten.get(queue_id, 0) + 1
            self._lock.notify()
        return PagePosition(pages.write_file, pages.write_offset)

    def has_unwritten(self, queue_id: int) -> bool:
        with self._lock:
            return self._unwritten.get(queue_id, 0) > 0

    def _open(self, pages: _QueuePages) -> None:
        new_dir = not pages.dir.is_dir()
        if new_dir:
            pages.dir.mkdir(parents=True, exist_ok=True)
        if pages.write_file == 0:
            pages.write_file, pages.write_offset = 1, 0
        if pages.write_file not in pages.files:
            pages.files.append(pages.write_file)
        path = pages.path(pages.write_file)
        stream = self.stream
        with stream.lock:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.ftruncate(fd, 0)  # a new file (numbers only grow): drop what a crash left
            if stream.active:
                stream.emit(FileCreate(stream.rel(path), 0))
        pages.fd = fd
        with self._lock:  # the new names, durable with the first records in them
            self._paths[fd] = path
            self._dirs[pages.dir] = None
            if new_dir:
                self._dirs[self.dir] = None

    def sync(self, done: Callable[[], None]) -> None:
        """`done` runs once every record appended so far is durable.  If it has a `fail(error)`
        method, that runs instead when the writes fail (at once while a failure lasts); the
        writer rewinds the files to their last good end and retries until a write succeeds."""
        failure = self.failure
        if failure is not None and hasattr(done, "fail"):
            self.dispatch([lambda: done.fail(failure)])
            return
        with self._lock:
            self._callbacks.append(done)
            self._pending.append((-1, b"", 0))
            self._lock.notify()

    def end_position(self, queue_id: int) -> PagePosition:
        pages = self._queues.get(queue_id)
        if pages is None:
            return PagePosition(0, 0)
        return PagePosition(pages.write_file, pages.write_offset)

    def _run(self) -> None:
        retry = 0.0
        while True:
            with self._lock:
                while not self._pending and not self._stopping:
                    self._lock.wait()
                if self.failure is not None:  # a failed batch waits a little before its retry
                    deadline = time.monotonic() + retry
                    while not self._stopping and (left := deadline - time.monotonic()) > 0:
                        self._lock.wait(left)
                if not self._pending and self._stopping:
                    return
                batch, self._pending = self._pending, []
                callbacks, self._callbacks = self._callbacks, []
                dirs, self._dirs = self._dirs, {}
            try:
                closing, written = self._write(batch, dirs)
            except OSError as e:
                retry = 0.05 if self.failure is None else min(retry * 2, 1.0)
                if self._failed(batch, callbacks, dirs, e):
                    return
                continue
            if self.failure is not None:
                log.warning("page files write again (%s is over)", self.failure,
                            extra={"event": "paging.write_resumed"})
                self.failure = None
            if written:
                with self._lock:
                    for queue_id, n in written.items():
                        self._unwritten[queue_id] = self._unwritten.get(queue_id, 0) - n
            for fd in closing:
                with self._lock:
                    self._paths.pop(fd, None)
                try:
                    os.close(fd)
                except OSError:
                    pass
            if callbacks:
                self.dispatch(callbacks)

    def _write(self, batch: list, dirs: dict) -> tuple[list[int], dict[int, int]]:
        """Write and sync one batch; (fds to close, records written per queue)."""
        rewind = self._rewind
        stream = self.stream
        for fd, size in list(rewind.items()):  # what a failed try left behind goes first
            stream.truncate(fd, self._paths[fd], size)
        touched: dict[int, int] = {}  # fd -> where its next write lands (the files are O_APPEND)
        closing = []
        written: dict[int, int] = {}
        lock = stream.lock
        for fd, data, queue_id in batch:
            if fd < 0:
                continue
            if data:
                offset = touched.get(fd)
                if offset is None:
                    if fd not in rewind:
                        rewind[fd] = os.lseek(fd, 0, os.SEEK_END)  # this file's last good end
                    offset = rewind[fd]
                with lock:
                    n = os.write(fd, data)
                    if stream.active:
                        stream.emit(FileWrite(stream.rel(self._paths[fd]), offset,
                                              data if n == len(data) else data[:n]))
                touched[fd] = offset + n
                if n < len(data):  # only when the disk is full: rewound and retried
                    raise OSError(errno.ENOSPC, "short write to a page file")
                written[queue_id] = written.get(queue_id, 0) + 1
            else:
                closing.append(fd)
        if self.datasync:
            for fd in touched:
                os.fdatasync(fd)
            for directory in dirs:
                fsync_dir(directory)
        rewind.clear()
        return closing, written

    def _failed(self, batch: list, callbacks: list, dirs: dict, error: OSError) -> bool:
        """Put a failed batch back to be retried (its files are cut back to their last good end
        first); fail the waiters that can hear it.  True when stopping: give up."""
        error = error.with_traceback(None)
        if self.failure is None:
            log.error("page files cannot be written: %s; nothing paged is confirmed until a retry succeeds",
                      error, extra={"event": "paging.write_failed"})
        self.failure = error
        with self._lock:
            self._pending[:0] = batch
            for directory in dirs:
                self._dirs.setdefault(directory, None)
            waiting = callbacks + self._callbacks
            self._callbacks = []
            stopping = self._stopping
        keep, failing = [], []
        for cb in waiting:
            fail = getattr(cb, "fail", None)
            if fail is None and not stopping:
                keep.append(cb)
            elif fail is not None:
                failing.append(lambda fail=fail: fail(error))
        if failing:
            self.dispatch(failing)
        if stopping:
            log.error("page files: stopping with records never written (%s); none was confirmed", error,
                      extra={"event": "paging.unwritten"})
            return True
        with self._lock:
            self._callbacks[:0] = keep
        return False

    # -- reading -----------------------------------------------------------------------

    def read(self, queue_id: int, cursor: PagePosition, max_bytes: int, *, after_restart_from: int = 0
             ) -> list[PagedMessage]:
        """Records after `cursor`, up to about `max_bytes` of payload. Non-durable records in files
        older than `after_restart_from` (written before the last restart) are skipped."""
        pages = self._queues.get(queue_id)
        if pages is None:
            return []
        out: list[PagedMessage] = []
        total = 0
        for f in list(pages.files):
            if f < cursor.file:
                continue
            offset = cursor.offset if f == cursor.file else 0
            end = pages.write_offset if f == pages.write_file else pages.ends.get(f)
            path = pages.path(f)
            try:
                fh = open(path, "rb")
            except FileNotFoundError:
                continue
            with fh:
                if offset == 0:
                    offset = _records_start(fh.read(_FILE_HEAD.size), path)
                while total < max_bytes:
                    want = max(max_bytes - total, 65536) + 65536
                    if end is not None:
                        want = min(want, end - offset)
                    if want <= 0:
                        break
                    fh.seek(offset)
                    data = fh.read(want)
                    pos = 0
                    while pos + 8 <= len(data):
                        length, crc = _HEAD.unpack_from(data, pos)
                        stop = pos + 8 + length
                        if length == 0 or stop > len(data):
                            break
                        payload = data[pos + 8 : stop]
                        if zlib.crc32(payload) != crc:
                            break
                        pos = stop
                        seq, durable, message_id, encoded, *home = _dec.decode(payload)
                        if durable or f >= after_restart_from:
                            message = decode_message(message_id, encoded)
                            out.append(PagedMessage(PagePosition(f, offset + pos), seq, message, bool(home)))
                            total += length
                            if total >= max_bytes:
                                break
                    if pos == 0:
                        if len(data) >= 8 and _HEAD.unpack_from(data, 0)[0] + 8 > len(data) and len(data) == want:
                            want_more = _HEAD.unpack_from(data, 0)[0] + 8  # one record bigger than the chunk
                            fh.seek(offset)
                            big = fh.read(want_more)
                            if len(big) == want_more:
                                length, crc = _HEAD.unpack_from(big, 0)
                                payload = big[8:]
                                if zlib.crc32(payload) == crc:
                                    seq, durable, message_id, encoded, *home = _dec.decode(payload)
                                    offset += want_more
                                    if durable or f >= after_restart_from:
                                        out.append(PagedMessage(PagePosition(f, offset), seq,
                                                                decode_message(message_id, encoded), bool(home)))
                                        total += length
                                    continue
                        break
                    offset += pos
            if total >= max_bytes or (end is not None and offset < end):
                break  # (the rest of this file is still on its way to disk: the next file waits)
        return out

    def release(self, queue_id: int, cursor: PagePosition) -> list[Path]:
        """Forget the page files wholly before the cursor; returns their paths, for the caller to
        unlink once the record of the cursor is durable."""
        pages = self._queues.get(queue_id)
        if pages is None:
            return []
        done = [f for f in pages.files if f < cursor.file and f != pages.write_file]
        for f in done:
            pages.files.remove(f)
            pages.ends.pop(f, None)
        return [pages.path(f) for f in done]

    def reset(self, queue_id: int) -> list[Path]:
        """Everything was read back: forget the queue's page files (returned, to unlink as in
        `release`); new pages start a new file, numbered after them."""
        pages = self._queues.get(queue_id)
        if pages is None:
            return []
        paths = self._discard(pages)
        pages.write_file += 1
        pages.write_offset = 0
        return paths

    def delete_queue(self, queue_id: int) -> list[Path]:
        """Forget the queue: its page files then its directory, returned to unlink in that order."""
        pages = self._queues.pop(queue_id, None)
        if pages is None:
            return []
        return [*self._discard(pages), pages.dir]

    def _discard(self, pages: _QueuePages) -> list[Path]:
        """Forget every page file of a queue; the writer closes the open one after its last write."""
        if pages.fd is not None:
            with self._lock:
                self._pending.append((pages.fd, b"", 0))
                self._lock.notify()
            pages.fd = None
        paths = [pages.path(f) for f in pages.files]
        pages.files = []
        pages.ends.clear()
        return paths

    def homes_after(self, queue_id: int, cursor: PagePosition) -> Iterator[Message]:
        """The durable messages of the records after `cursor` that are their send's only home
        (`append`; recovery takes their duplicate IDs from them), one file in memory at a time."""
        pages = self._queues.get(queue_id)
        if pages is None:
            return
        for f in list(pages.files):
            if f < cursor.file:
                continue
            try:
                data = pages.path(f).read_bytes()
            except FileNotFoundError:
                continue
            pos = cursor.offset if f == cursor.file else 0
            if pos == 0:
                pos = _records_start(data[:_FILE_HEAD.size], pages.path(f))
            while pos + 8 <= len(data):
                length, crc = _HEAD.unpack_from(data, pos)
                stop = pos + 8 + length
                if length == 0 or stop > len(data) or zlib.crc32(memoryview(data)[pos + 8 : stop]) != crc:
                    break
                if data[pos + 8] == 0x95:  # a msgpack array of five: the home flag is there
                    _seq, durable, message_id, encoded, _home = _dec.decode(data[pos + 8 : stop])
                    if durable:
                        yield decode_message(message_id, encoded)
                pos = stop

    def count_after(self, queue_id: int, cursor: PagePosition) -> int:
        """How many records follow the cursor (recovery: the queue's paged backlog)."""
        pages = self._queues.get(queue_id)
        if pages is None:
            return 0
        n = 0
        for f in pages.files:
            if f < cursor.file:
                continue
            path = pages.path(f)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            pos = cursor.offset if f == cursor.file else 0
            if pos == 0:
                pos = _records_start(data[:_FILE_HEAD.size], path)
            end = pages.write_offset if f == pages.write_file else len(data)
            while pos + 8 <= end:
                length, _ = _HEAD.unpack_from(data, pos)
                if length == 0 or pos + 8 + length > end:
                    break
                pos += 8 + length
                n += 1
        return n

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()
        for pages in self._queues.values():
            if pages.fd is not None:
                try:
                    os.close(pages.fd)
                except OSError:
                    pass
                pages.fd = None


def remove(paths: list[Path], stream: StoreStream | None = None) -> None:
    """Unlink page files (and rmdir emptied queue directories) that may already be gone."""
    for path in paths:
        try:
            if stream is None:
                if path.suffix == ".page":
                    path.unlink(missing_ok=True)
                else:
                    path.rmdir()
            elif path.suffix == ".page":
                stream.unlink(path, missing_ok=True)
            else:
                stream.rmdir(path)
        except OSError as exc:
            if path.exists():
                log.warning("cannot remove %s: %s", path, exc)




def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for cb in callbacks:
        cb()
