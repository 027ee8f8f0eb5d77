"""Large-message files: one file per body, under `<data dir>/large-messages/`.

A body larger than `min_large_message_size` is written as `<message id>.msg.tmp` while it
arrives, then (for a durable message) fsynced, renamed to `<message id>.msg` and the
directory fsynced, all before the journal record that names it is written. A copy of a
large message (dead-letter, expiry, divert, move) gets its own name for its own id, a hard
link to the same data; the data goes when the last name does.

A file is deleted only after the journal's delete record is durable (the post office asks
the store's `sync` first), so a crash never leaves a live record without its file. On
start, `reconcile` removes what a crash left behind: every `.tmp` file, and every `.msg`
file that no live journal record names. Non-durable messages use files too (a 50 MiB
non-persistent body is no better in memory); they skip the fsyncs and, having no journal
record, are removed at the next start.

File I/O is plain and blocking; the server calls `LargeWriter.finish` for durable bodies
from a worker thread (it fsyncs) and everything else from the event loop.

Every change (a file created, each chunk appended, the rename that finishes it, a link, a
deletion) is made under the data directory's `StoreStream` lock and recorded there (see
storage/stream.py), when the store is given that stream. The files have no header (their
bytes are the body), so no format version: `<id>.msg` is the body, nothing else.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from petrel.core.message import LargeBody
from petrel.storage.journal.segment import fsync_dir
from petrel.storage.stream import FileCreate, FileWrite, StoreStream

if TYPE_CHECKING:
    from petrel.storage.store import Recovered, Store

__all__ = ["LargeBody", "LargeFiles", "LargeMessageStore", "LargeWriter", "BodyReader", "reconcile"]

log = logging.getLogger("petrel.storage.large")

SUFFIX = ".msg"
TMP_SUFFIX = ".msg.tmp"
READ_CHUNK = 256 * 1024


class LargeFiles(Protocol):
    """What the post office needs: copies get their own name, and names go away."""

    def link(self, body: LargeBody, new_id: int, *, durable: bool = True) -> LargeBody: ...
    def delete(self, body: LargeBody) -> None: ...


class LargeBodyMissing(Exception):
    """A large message's file is not there (deleted by hand, or a broken data directory)."""


class LargeMessageStore:
    def __init__(self, directory: str | Path, *, sync: bool = True, stream: StoreStream | None = None) -> None:
        """`stream`: the data directory's (`FileStore.stream`), so replication sees these files;
        by default one of the directory's own."""
        self.directory = Path(directory)
        # False: never fsync (journal_datasync = false): survives a process crash, not power loss
        self.sync = sync
        self._dir = str(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        if stream is not None:
            stream.rel(self.directory)  # under the stream's directory, or ValueError now (not mid-write)
        self.stream = stream if stream is not None else StoreStream(self.directory)

    def path(self, body: LargeBody) -> str:
        return os.path.join(self._dir, body.name)

    # -- writing ------------------------------------------------------------------------

    def create(self, message_id: int) -> LargeWriter:
        """A writer for the body of `message_id`; `finish` it or `abort` it."""
        return LargeWriter(self, message_id)

    def write(self, message_id: int, chunks: Iterable[bytes], *, durable: bool = True) -> LargeBody:
        """Write a whole body from chunks; returns it finished."""
        writer = self.create(message_id)
        try:
            for chunk in chunks:
                writer.write(chunk)
        except BaseException:
            writer.abort()
            raise
        return writer.finish(durable=durable)

    def link(self, body: LargeBody, new_id: int, *, durable: bool = True) -> LargeBody:
        """The same data under the name of `new_id` (a hard link; a copy where links fail)."""
        new = LargeBody.for_message(new_id, body.size)
        src, dst = self.path(body), self.path(new)
        try:
            self.stream.link(src, dst)
        except FileNotFoundError:
            raise LargeBodyMissing(f"large-message file {src} is missing") from None
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            tmp = dst + ".tmp"
            stream = self.stream
            with stream.lock:
                shutil.copyfile(src, tmp)
                if stream.active:  # the copy shipped as such: what a link would have given
                    stream.emit(*_whole_file(stream, tmp))
            if durable and self.sync:
                _fsync_file(tmp)
            stream.rename(tmp, dst)
        if durable and self.sync:
            fsync_dir(self._dir)
        return new

    # -- reading ------------------------------------------------------------------------

    def open(self, body: LargeBody) -> BodyReader:
        """A reader over the body in chunks. The data stays readable through it even if the
        name is deleted meanwhile (the message acknowledged while its delivery streams)."""
        try:
            f = open(self.path(body), "rb", buffering=0)
        except FileNotFoundError:
            raise LargeBodyMissing(f"large-message file {self.path(body)} is missing") from None
        return BodyReader(f, body.size)

    def read(self, body: LargeBody) -> bytes:
        """The whole body in memory (for protocols or views that cannot stream)."""
        with self.open(body) as reader:
            return reader.read(body.size)

    # -- removing -----------------------------------------------------------------------

    def delete(self, body: LargeBody) -> None:
        self.stream.unlink(self.path(body), missing_ok=True)

    def names(self) -> list[str]:
        """Every file in the directory (finished or not), sorted."""
        try:
            return sorted(os.listdir(self._dir))
        except FileNotFoundError:
            return []

    def remove_orphans(self, live: Iterable[str]) -> int:
        """Delete `.tmp` files and every `.msg` file not in `live`; returns how many went."""
        keep = set(live)
        removed = 0
        for name in self.names():
            if name.endswith(TMP_SUFFIX):
                why = "unfinished large-message file"
            elif name.endswith(SUFFIX) and name not in keep:
                why = "orphaned large-message file"
            else:
                if not name.endswith(SUFFIX):
                    log.warning("unexpected file %s in %s left alone", name, self._dir)
                continue
            if not self.stream.unlink(os.path.join(self._dir, name), missing_ok=True):
                continue
            removed += 1
            log.info("%s %s removed", why, name, extra={"event": "large.orphan_removed"})
        if removed and self.sync:
            fsync_dir(self._dir)
        return removed


class LargeWriter:
    """One body being written: `<id>.msg.tmp` until `finish` names it `<id>.msg`."""

    __slots__ = ("store", "message_id", "size", "tmp", "_f")

    def __init__(self, store: LargeMessageStore, message_id: int) -> None:
        self.store = store
        self.message_id = message_id
        self.size = 0
        self.tmp = os.path.join(store._dir, f"{message_id}{TMP_SUFFIX}")
        stream = store.stream
        with stream.lock:
            self._f = open(self.tmp, "wb", buffering=0)
            if stream.active:
                stream.emit(FileCreate(stream.rel(self.tmp), 0))

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        f = self._f
        stream = self.store.stream
        with stream.lock:
            view = memoryview(chunk)
            while view:  # a raw file may write less than asked
                n = f.write(view)
                view = view[n:]
            if stream.active:  # a copy: the caller may reuse its buffer
                stream.emit(FileWrite(stream.rel(self.tmp), self.size, bytes(chunk)))
        self.size += len(chunk)

    def finish(self, *, durable: bool = True) -> LargeBody:
        """Close, and for a durable body fsync the file, rename it and fsync the directory."""
        f = self._f
        sync = durable and self.store.sync
        try:
            if sync:
                os.fsync(f.fileno())
        finally:
            f.close()
        body = LargeBody.for_message(self.message_id, self.size)
        self.store.stream.rename(self.tmp, self.store.path(body))
        if sync:
            fsync_dir(self.store._dir)
        return body

    def abort(self) -> None:
        """Forget the body: close and delete the temporary file."""
        try:
            self._f.close()
        finally:
            self.store.stream.unlink(self.tmp, missing_ok=True)


class BodyReader:
    """Reads exactly `size` bytes of a body file; raises if the file turns out shorter."""

    __slots__ = ("_f", "remaining")

    def __init__(self, f, size: int) -> None:
        self._f = f
        self.remaining = size

    def read(self, n: int = READ_CHUNK) -> bytes:
        """Up to `n` bytes; b"" once the body is done."""
        want = min(n, self.remaining)
        if want <= 0:
            return b""
        data = self._f.read(want)
        if len(data) < want:
            # a short read from a raw file is legal; only an empty one means the end
            parts = [data]
            got = len(data)
            while got < want:
                more = self._f.read(want - got)
                if not more:
                    raise LargeBodyMissing(f"large-message file {self._f.name} is shorter than its message says")
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        self.remaining -= want
        return data

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> BodyReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reconcile(large: LargeMessageStore, recovered: Recovered, store: Store, extra_live: Iterable[str] = ()) -> int:
    """After a restart: drop recovered messages whose file is gone, then every file no live
    message names (and none of `extra_live`, e.g. names held by page files). Returns the
    number of files removed."""
    present = set(large.names())
    keep = []
    live = set(extra_live)
    for message, refs in recovered.messages:
        body = message.large
        if body is not None:
            if body.name not in present:
                log.error(
                    "message %s lost its body: large-message file %s is missing; removing the message",
                    message.id, body.name, extra={"event": "large.missing"},
                )
                store.delete_message(0, message.id)
                continue
            live.add(body.name)
        keep.append((message, refs))
    recovered.messages = keep
    for prepared in recovered.prepared:  # a prepared transaction's sends (core/prepared.py) keep theirs
        live.update(message.large.name for message, _ in prepared.messages if message.large is not None)
    return large.remove_orphans(live)


def _whole_file(stream: StoreStream, path: str) -> list:
    """A file as operations: created, then its bytes (a copy made under the stream's lock)."""
    rel = stream.rel(path)
    ops: list = [FileCreate(rel, 0)]
    with open(path, "rb") as f:
        offset = 0
        while chunk := f.read(1 << 20):
            ops.append(FileWrite(rel, offset, chunk))
            offset += len(chunk)
    return ops


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
