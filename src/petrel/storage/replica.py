"""`ReplicaDirectory`: a backup's copy of the live's data directory, kept by applying the
live's `StoreStream` operations in order (see storage/stream.py).

`apply(first_seq, ops)` applies a list of operations, then makes them durable together
(fsync of every file written and every directory whose entries changed) and returns the
last sequence number now durable: that is what the backup acknowledges. Before an
operation that destroys something (a rename over a file, a deletion, a truncation, a
re-creation), what the list wrote so far is made durable first, so the disk never holds
the destruction without the writes before it (the live's own order: a page file goes only
once the journal's cursor past it is synced).

Operations are idempotent: a chunk of the initial copy and a live write of the same bytes
agree; a rename whose source is missing (a file the copy had not reached) removes the
target, whose content will come from the copy under the new name.

Before a new initial sync, `set_aside(max_saved)` moves what the directory holds to an
`oldreplica.N` directory beside it, keeping at most `max_saved` of those (Artemis's
`max-saved-replicated-journals-size`, 2 by default): a backup's old journal is kept, not lost.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
from collections import OrderedDict
from pathlib import Path

from petrel.storage.journal.segment import fsync_dir, make_dirs
from petrel.storage.stream import (
    FileCreate,
    FileDelete,
    FileLink,
    FileRename,
    FileTruncate,
    FileWrite,
    SyncDone,
)

__all__ = ["ReplicaDirectory", "ReplicaGap", "DEFAULT_MAX_SAVED"]

log = logging.getLogger("petrel.storage.replica")

DEFAULT_MAX_SAVED = 2
_OLD = re.compile(r"oldreplica\.(\d+)")
_MAX_OPEN = 64


class ReplicaGap(Exception):
    """Operations arrived out of order: a sequence number is missing."""


class ReplicaDirectory:
    def __init__(self, directory: str | Path, *, sync: bool = True) -> None:
        self.directory = Path(os.path.abspath(directory))
        self.sync = sync
        self.applied_seq = 0  # last operation applied
        self.durable_seq = 0  # last operation applied and made durable
        self.synced = False  # a SyncDone was applied: the copy is complete
        self.manifest_seq = 0
        self._fds: OrderedDict[str, int] = OrderedDict()  # path -> fd, least recently used first
        self._touched: dict[str, None] = {}  # files written since the last flush
        self._dirs: dict[str, None] = {}  # directories whose entries changed since the last flush
        self._made: set[str] = set()  # directories known to exist
        make_dirs(self.directory, sync)

    # -- applying ---------------------------------------------------------------------------------

    def apply(self, first_seq: int, ops: list) -> int:
        """Apply `ops` (numbered from `first_seq`) in order, make them durable; the last
        sequence number durable now."""
        if self.applied_seq and first_seq != self.applied_seq + 1:
            raise ReplicaGap(f"expected operation {self.applied_seq + 1}, got {first_seq}")
        seq = first_seq - 1
        for op in ops:
            self._apply(op)
            seq += 1
            self.applied_seq = seq
        self.flush()
        self.durable_seq = self.applied_seq
        return self.durable_seq

    def _path(self, rel: str) -> str:
        if rel.startswith("/") or rel == ".." or rel.startswith("../") or "/../" in rel:
            raise ValueError(f"operation path {rel!r} leaves the replica directory")
        return os.path.join(self.directory, rel)

    def _apply(self, op) -> None:
        kind = type(op)
        if kind is FileWrite:
            fd = self._open(op.path)
            view = memoryview(op.data)
            at = op.offset
            while view:
                n = os.pwrite(fd, view, at)
                view = view[n:]
                at += n
            self._touched[op.path] = None
        elif kind is FileCreate:
            path = self._path(op.path)
            if os.path.lexists(path):
                self.flush()
            self._close(op.path)
            self._parent(path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.ftruncate(fd, op.size)
            self._keep(op.path, fd)
            self._touched[op.path] = None
            self._dirs[os.path.dirname(path)] = None
        elif kind is FileTruncate:
            fd = self._open(op.path)
            if os.fstat(fd).st_size > op.size:
                self.flush()
            os.ftruncate(fd, op.size)
            self._touched[op.path] = None
        elif kind is FileRename:
            self.flush()
            src, dst = self._path(op.src), self._path(op.dst)
            self._close(op.src)
            self._close(op.dst)
            self._parent(dst)
            try:
                os.replace(src, dst)
            except FileNotFoundError:
                # the copy had not reached the source: the target is that file now, still to come
                _remove(dst)
            self._dirs[os.path.dirname(src)] = None
            self._dirs[os.path.dirname(dst)] = None
        elif kind is FileDelete:
            self.flush()
            path = self._path(op.path)
            self._close(op.path)
            _remove(path)
            self._made.discard(path)
            self._dirs[os.path.dirname(path)] = None
        elif kind is FileLink:
            src, dst = self._path(op.src), self._path(op.dst)
            self._parent(dst)
            self._close(op.dst)
            _remove(dst)
            if not os.path.lexists(src):  # not copied yet: its copy fills both names
                self._parent(src)
                os.close(os.open(src, os.O_WRONLY | os.O_CREAT, 0o644))
                self._dirs[os.path.dirname(src)] = None
            os.link(src, dst)
            self._dirs[os.path.dirname(dst)] = None
        elif kind is SyncDone:
            self.flush()
            self.synced = True
            self.manifest_seq = op.manifest_seq
            log.info("replica %s complete: %d files, %d bytes copied", self.directory, op.files, op.bytes,
                     extra={"event": "replica.synced"})
        else:
            raise TypeError(f"not a store operation: {op!r}")

    def _parent(self, path: str) -> None:
        parent = os.path.dirname(path)
        if parent not in self._made:
            make_dirs(Path(parent), self.sync)
            self._made.add(parent)

    def _open(self, rel: str) -> int:
        fd = self._fds.get(rel)
        if fd is not None:
            self._fds.move_to_end(rel)
            return fd
        path = self._path(rel)
        self._parent(path)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            self._dirs[os.path.dirname(path)] = None
        self._keep(rel, fd)
        return fd

    def _keep(self, rel: str, fd: int) -> None:
        self._fds[rel] = fd
        while len(self._fds) > _MAX_OPEN:
            old, old_fd = self._fds.popitem(last=False)
            if old in self._touched and self.sync:
                os.fdatasync(old_fd)
            self._touched.pop(old, None)
            os.close(old_fd)

    def _close(self, rel: str) -> None:
        fd = self._fds.pop(rel, None)
        if fd is not None:
            if rel in self._touched and self.sync:
                os.fdatasync(fd)
            self._touched.pop(rel, None)
            os.close(fd)

    def flush(self) -> None:
        """Make durable what was applied: the files written, then the directories changed."""
        if self.sync:
            for rel in self._touched:
                fd = self._fds.get(rel)
                if fd is not None:
                    os.fdatasync(fd)
            for directory in self._dirs:
                try:
                    fsync_dir(Path(directory))
                except FileNotFoundError:
                    pass
        self._touched.clear()
        self._dirs.clear()

    def close(self) -> None:
        self.flush()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    # -- before a new initial sync ----------------------------------------------------------------

    def set_aside(self, max_saved: int = DEFAULT_MAX_SAVED, *, keep: tuple[str, ...] = ()) -> Path | None:
        """Move the directory's contents (but the names in `keep`) to a new `oldreplica.N`
        directory beside it; keep the `max_saved` newest of those, delete older ones. Returns
        the new directory, or None when there was nothing to move (or `max_saved` is 0: the
        contents are deleted)."""
        self.close()
        self.applied_seq = self.durable_seq = self.manifest_seq = 0
        self.synced = False
        self._made.clear()
        names = [n for n in sorted(os.listdir(self.directory)) if n not in keep]
        parent = self.directory.parent
        saved = None
        if names:
            if max_saved > 0:
                numbers = [int(m.group(1)) for n in os.listdir(parent) if (m := _OLD.fullmatch(n))]
                saved = parent / f"oldreplica.{max(numbers, default=0) + 1}"
                saved.mkdir()
                for name in names:
                    # a data directory that is a mount point (a volume) has its parent on another file
                    # system: a rename cannot cross it, a move (copy, then delete) can
                    shutil.move(str(self.directory / name), str(saved / name))
                if self.sync:
                    fsync_dir(saved)
                    fsync_dir(self.directory)
                    fsync_dir(parent)
                log.info("replica %s: the previous contents moved to %s", self.directory, saved,
                         extra={"event": "replica.set_aside"})
            else:
                for name in names:
                    _remove_tree(self.directory / name)
                if self.sync:
                    fsync_dir(self.directory)
        old = sorted((int(m.group(1)), n) for n in os.listdir(parent) if (m := _OLD.fullmatch(n)))
        for _, name in old[:max(0, len(old) - max_saved)]:
            _remove_tree(parent / name)
            log.info("deleted old replica %s", parent / name, extra={"event": "replica.old_deleted"})
        return saved


def _remove(path: str) -> None:
    """Unlink a file or remove an empty directory; nothing if it is not there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError):  # some systems say EPERM for unlink on a directory
        if not os.path.isdir(path):
            raise
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno != errno.ENOTEMPTY:
                raise
            shutil.rmtree(path)  # the live's was empty: what is left here is stale


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
