"""`StoreStream`: one ordered stream of every change made to the files of a data directory.

Replication is physical: a backup mirrors the live's data directory file by file, without
knowing what a journal is. Every place in `storage` that changes a file under the data
directory makes its change while holding `StoreStream.lock` and, right after it, records
what it did as one of the operations below. Each operation gets the next sequence number
(`StoreStream.seq` is the last one given), so the operations, applied in that order to a copy
of the directory (`replica.ReplicaDirectory`), make the same changes in an order the live
really made them.

Operations carry paths relative to the data directory, in POSIX form. `FileWrite.data` is
the very object the writer wrote (a journal batch's bytearray, a page record): it is never
changed afterwards, so a subscriber may encode it later, in another thread.

Subscribers (`subscribe(sink)`) are called as `sink(first_seq, ops)` synchronously in the
thread that made the change, under the lock: they must be quick (hand the list to a queue)
and must not call back into the store. A sink that raises is dropped (`Subscription.error`
says why). With no subscriber nothing is built: a change costs one uncontended lock.

`start_sync` is the initial copy made while the live keeps serving: see `InitialSync`.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Union

__all__ = [
    "DurabilityGate", "FileCreate", "FileDelete", "FileLink", "FileRename", "FileTruncate", "FileWrite",
    "InitialSync", "Op", "Sink", "StoreStream", "Subscription", "SyncDone",
]

log = logging.getLogger("petrel.storage.stream")

DEFAULT_CHUNK = 1 << 20
_ZERO_CHUNKS_PER_STEP = 16  # all-zero chunks skipped in one step, at most


# -- the operations ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FileWrite:
    """`data` written at `offset` of `path` (the file is created if missing)."""
    path: str
    offset: int
    data: bytes | bytearray


@dataclass(frozen=True, slots=True)
class FileCreate:
    """`path` (re)created as `size` zero bytes (a preallocated file: the zeros are not shipped)."""
    path: str
    size: int


@dataclass(frozen=True, slots=True)
class FileTruncate:
    """`path` cut (or extended with zeros) to `size` bytes; created if missing."""
    path: str
    size: int


@dataclass(frozen=True, slots=True)
class FileRename:
    """`src` renamed to `dst`, replacing what `dst` was."""
    src: str
    dst: str


@dataclass(frozen=True, slots=True)
class FileDelete:
    """`path` removed: a file, or an empty directory."""
    path: str


@dataclass(frozen=True, slots=True)
class FileLink:
    """`dst` made a second name of the file `src` (a hard link)."""
    src: str
    dst: str


@dataclass(frozen=True, slots=True)
class SyncDone:
    """The initial copy is complete: applied up to this operation, the copy equals the live's
    directory. `manifest_seq` is the last operation before the copy's manifest was taken."""
    manifest_seq: int
    files: int
    bytes: int


Op = Union[FileWrite, FileCreate, FileTruncate, FileRename, FileDelete, FileLink, SyncDone]
Sink = Callable[[int, list], None]


class DurabilityGate(Protocol):
    """What `FileStore.set_gate` takes: a sync whose records are locally durable calls
    `after(done, failed)` instead of `done()`; the gate reads `store.stream.seq` and calls
    `done` once the backup has that far (or `failed(error)`)."""

    def after(self, done: Callable[[], None], failed: Callable[[BaseException], None] | None) -> None: ...


# -- the stream -------------------------------------------------------------------------------

class Subscription:
    __slots__ = ("stream", "sink", "error")

    def __init__(self, stream: StoreStream, sink: Sink) -> None:
        self.stream = stream
        self.sink = sink
        self.error: BaseException | None = None  # why the sink was dropped

    @property
    def active(self) -> bool:
        return self in self.stream._subs

    def close(self) -> None:
        self.stream._unsubscribe(self)


class StoreStream:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(os.path.abspath(root))
        self._root = str(self.root)
        self.lock = threading.RLock()
        self.seq = 0
        self._subs: tuple[Subscription, ...] = ()
        self._copying: InitialSync | None = None  # the initial sync in progress, if any

    @property
    def active(self) -> bool:
        """Somebody listens: build and `emit` the operations (read under the lock)."""
        return bool(self._subs)

    def rel(self, path: str | Path) -> str:
        """`path` relative to the data directory, in POSIX form."""
        rel = os.path.relpath(os.path.abspath(path), self._root)
        if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
            raise ValueError(f"{path} is outside the data directory {self._root}")
        return rel.replace(os.sep, "/")

    def subscribe(self, sink: Sink) -> Subscription:
        """From the next change on, `sink(first_seq, ops)` is called with every change."""
        sub = Subscription(self, sink)
        with self.lock:
            self._subs = self._subs + (sub,)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self.lock:
            self._subs = tuple(s for s in self._subs if s is not sub)

    def emit(self, *ops: Op) -> None:
        """Record `ops`, changes just made (the caller holds the lock); nothing when nobody listens."""
        subs = self._subs
        if not subs:
            return
        first = self.seq + 1
        self.seq += len(ops)
        batch = list(ops)
        for sub in subs:
            try:
                sub.sink(first, batch)
            except BaseException as e:  # the change is made: the writer goes on, this subscriber is dropped
                sub.error = e
                self._subs = tuple(s for s in self._subs if s is not sub)
                log.error("a store stream subscriber failed and was dropped: %s", e, exc_info=True,
                          extra={"event": "store.stream_subscriber_failed"})

    # the changes, made and recorded under the lock ---------------------------------------------

    def rename(self, src: str | Path, dst: str | Path) -> None:
        with self.lock:
            os.replace(src, dst)
            if self._subs:
                self.emit(FileRename(self.rel(src), self.rel(dst)))

    def unlink(self, path: str | Path, *, missing_ok: bool = False) -> bool:
        """Remove a file; False when it was not there (and `missing_ok`)."""
        with self.lock:
            try:
                os.unlink(path)
            except FileNotFoundError:
                if not missing_ok:
                    raise
                return False
            if self._subs:
                self.emit(FileDelete(self.rel(path)))
            return True

    def rmdir(self, path: str | Path) -> None:
        with self.lock:
            os.rmdir(path)
            if self._subs:
                self.emit(FileDelete(self.rel(path)))

    def link(self, src: str | Path, dst: str | Path) -> None:
        with self.lock:
            os.link(src, dst)
            if self._subs:
                self.emit(FileLink(self.rel(src), self.rel(dst)))

    def truncate(self, fd: int, path: str | Path, size: int) -> None:
        with self.lock:
            os.ftruncate(fd, size)
            if self._subs:
                self.emit(FileTruncate(self.rel(path), size))

    def pwrite(self, fd: int, path: str | Path, data, offset: int) -> None:
        """Write all of `data` at `offset` (`data` must not change afterwards)."""
        with self.lock:
            view = memoryview(data)
            at = offset
            while view:
                n = os.pwrite(fd, view, at)
                view = view[n:]
                at += n
            if self._subs:
                self.emit(FileWrite(self.rel(path), offset, data))

    def replace_file(self, path: str | Path, data: bytes, *, sync: bool = True) -> None:
        """Replace a small file atomically and durably (a temporary file, fsynced, renamed over
        it, the directory fsynced), recorded as the same three steps: for the data directory's
        small files written after start (cluster-bindings.json, server.activation.sequence)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        try:
            with self.lock:
                os.replace(tmp, path)
                if self._subs:
                    rel_tmp = self.rel(tmp)
                    self.emit(FileCreate(rel_tmp, 0), FileWrite(rel_tmp, 0, data),
                              FileRename(rel_tmp, self.rel(path)))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if sync:
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    # the initial copy ----------------------------------------------------------------------------

    def start_sync(self, sink: Sink, *, chunk_size: int = DEFAULT_CHUNK,
                   exclude: Callable[[str], bool] | None = None) -> InitialSync:
        """Subscribe `sink` and take the manifest, at once (under the lock); returns the copier,
        which sends the files' contents through `sink` too, a chunk at a time (`step`/`run`).

        The copy's operations (chunks, `SyncDone`) are numbered like the others and reach every
        subscriber: one initial sync at a time (RuntimeError while another runs)."""
        with self.lock:
            running = self._copying
            if running is not None and not running.done and running.subscription.active:
                # its chunks and SyncDone go to every subscriber: two at once would mislead each other
                raise RuntimeError("an initial sync is already running on this data directory")
            copier = InitialSync(self, sink, chunk_size, exclude)
            self._copying = copier
            copier.subscription = self.subscribe(copier._observe_then(sink))
            copier._take_manifest()
        return copier


class _Entry:
    """One file (inode) still to copy, under every name it has now."""

    __slots__ = ("names", "limit", "offset", "started", "done")

    def __init__(self, name: str, limit: int) -> None:
        self.names = [name]  # its names now (renames and links followed); copied through the first
        self.limit = limit  # bytes to copy: its size when its copy starts (later bytes come as operations)
        self.offset = 0
        self.started = False
        self.done = False


class InitialSync:
    """The initial copy of a data directory while the live serves.

    The manifest (every regular file under the directory) and the subscription are taken
    together under the stream's lock: a change is either in the files as listed or among the
    operations the sink gets. Files that are hard links of each other are sent as links
    first (`FileLink`), so the copy has the same files under the same names. Then each `step`
    reads one chunk of one file UNDER THE LOCK and sends it through the same sink as a
    `FileWrite`: chunks and live operations reach the backup in the order they happened, and
    a chunk is the file's content at that point of the stream. Writes are idempotent, so a
    chunk and a live write of the same bytes agree; a chunk can never bring back stale bytes,
    as whatever changes the file after it is an operation that comes after it.

    The copier follows the operations recorded since the manifest: a rename moves a file
    still to copy to its new name, a deletion of its last name or its re-creation ends its
    copy (later operations say everything about it), a hard link gives it one more name. A
    file's copy starts with a `FileTruncate` to its size then, and sends its chunks up to
    that size, skipping those that are all zeros (a preallocated journal segment is mostly
    zeros: the truncate made them). A final `SyncDone` marks the end: applied up to there,
    the copy is complete.
    """

    def __init__(self, stream: StoreStream, sink: Sink, chunk_size: int,
                 exclude: Callable[[str], bool] | None) -> None:
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        self.stream = stream
        self.sink = sink
        self.chunk_size = chunk_size
        self.exclude = exclude
        self.subscription: Subscription | None = None
        self.manifest: list[str] = []
        self.manifest_seq = 0
        self.done = False
        self.copied_bytes = 0
        self._entries: list[_Entry] = []
        self._by_name: dict[str, _Entry] = {}
        self._next = 0

    def _take_manifest(self) -> None:
        root = self.stream._root
        self.manifest_seq = self.stream.seq
        inodes: dict[tuple[int, int], _Entry] = {}
        links = []
        for top, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(top, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                if self.exclude is not None and self.exclude(rel):
                    continue
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                self.manifest.append(rel)
                key = (st.st_dev, st.st_ino)
                entry = inodes.get(key) if st.st_nlink > 1 else None
                if entry is not None:  # another name of a file already listed
                    links.append(FileLink(entry.names[0], rel))
                    entry.names.append(rel)
                else:
                    entry = _Entry(rel, st.st_size)
                    self._entries.append(entry)
                    if st.st_nlink > 1:
                        inodes[key] = entry
                self._by_name[rel] = entry
        if links:
            self.stream.emit(*links)

    def _observe_then(self, sink: Sink) -> Sink:
        def observe(first: int, ops: list) -> None:
            if not self.done:
                self._follow(ops)
            sink(first, ops)
        return observe

    def _drop_name(self, name: str) -> None:
        entry = self._by_name.pop(name, None)
        if entry is not None:
            entry.names.remove(name)
            if not entry.names:
                entry.done = True

    def _follow(self, ops: list) -> None:
        """Keep the files still to copy in step with the operations (under the lock)."""
        by_name = self._by_name
        for op in ops:
            kind = type(op)
            if kind is FileWrite or kind is FileTruncate:
                continue
            if kind is FileRename:
                moved = by_name.get(op.src)
                if op.src == op.dst or (moved is not None and by_name.get(op.dst) is moved):
                    continue  # onto itself, or onto another name of the same file: nothing changed
                self._drop_name(op.dst)
                moved = by_name.pop(op.src, None)
                if moved is not None:
                    moved.names[moved.names.index(op.src)] = op.dst
                    by_name[op.dst] = moved
            elif kind is FileDelete:
                self._drop_name(op.path)
                prefix = op.path + "/"  # a directory: nothing under it is left
                for name in [n for n in by_name if n.startswith(prefix)]:
                    self._drop_name(name)
            elif kind is FileCreate:
                entry = by_name.get(op.path)
                if entry is not None:  # emptied (under every name): operations say the rest
                    for name in entry.names:
                        del by_name[name]
                    entry.names = []
                    entry.done = True
            elif kind is FileLink:
                self._drop_name(op.dst)
                source = by_name.get(op.src)
                if source is not None:
                    source.names.append(op.dst)
                    by_name[op.dst] = source

    def step(self) -> bool:
        """Copy one chunk (or finish); False once `SyncDone` has been sent."""
        stream = self.stream
        with stream.lock:
            if self.done:
                return False
            if self.subscription is None or not self.subscription.active:
                raise RuntimeError("the initial sync's subscriber is gone"
                                   + (f": {self.subscription.error}" if self.subscription else ""))
            entries = self._entries
            while self._next < len(entries):
                entry = entries[self._next]
                if entry.done or self._copy_chunk(entry):
                    for name in entry.names:
                        if self._by_name.get(name) is entry:
                            del self._by_name[name]
                    entry.done = True
                    self._next += 1
                    continue
                return True
            self.done = True
            stream.emit(SyncDone(self.manifest_seq, len(self.manifest), self.copied_bytes))
            return False

    def _copy_chunk(self, entry: _Entry) -> bool:
        """Send the next chunk of `entry`; True when the file is done (nothing was sent)."""
        stream = self.stream
        name = entry.names[0]
        path = os.path.join(stream._root, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            # gone without an operation saying so: the copy must not keep a partial file
            stream.emit(FileDelete(name))
            return True
        try:
            size = os.fstat(fd).st_size
            if not entry.started:
                entry.started = True
                entry.limit = size
                stream.emit(FileTruncate(name, size))
            for _ in range(_ZERO_CHUNKS_PER_STEP):
                end = min(entry.limit, size)
                if entry.offset >= end:
                    return True
                want = min(self.chunk_size, end - entry.offset)
                data = os.pread(fd, want, entry.offset)
                if not data:
                    return True
                offset = entry.offset
                entry.offset += len(data)
                if data.count(0) == len(data):
                    continue  # zeros: the truncate made them already (or an op wrote them since)
                self.copied_bytes += len(data)
                stream.emit(FileWrite(name, offset, data))
                return False
            return False  # only zeros so far: go on at the next step (the lock is let go meanwhile)
        finally:
            os.close(fd)

    def run(self, should_stop: Callable[[], bool] | None = None) -> bool:
        """Copy everything (in the calling thread); False when `should_stop` ended it early."""
        while self.step():
            if should_stop is not None and should_stop():
                return False
        return True

    def cancel(self) -> None:
        """Stop copying and drop the subscription."""
        with self.stream.lock:
            self.done = True
            if self.subscription is not None:
                self.subscription.close()

