"""`server.lock`: the node ID, created once, and the lock that keeps one broker per data directory.

The file holds a 16-byte header (magic, version) and the node UUID. The broker holds an
exclusive `flock` on it while running; a second broker on the same directory fails at once
with a message that says which directory and what to do.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from pathlib import Path

from petrel.storage.journal.segment import fsync_dir, make_dirs

MAGIC = b"PTRLOCK1"


class DataDirLocked(Exception):
    pass


class ServerLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "server.lock"
        self._fd: int | None = None
        self.node_id: str = ""

    def acquire(self) -> str:
        make_dirs(self.path.parent)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLocked(
                f"data directory {self.path.parent} is in use by another broker (lock on {self.path}); "
                "stop that broker or use another --data-dir"
            ) from None
        data = os.pread(fd, 64, 0)
        if data[:8] == MAGIC and len(data) >= 24:
            self.node_id = str(uuid.UUID(bytes=data[8:24]))
        else:
            node = uuid.uuid4()
            os.pwrite(fd, MAGIC + node.bytes, 0)
            os.fsync(fd)
            self.node_id = str(node)
        if created:
            fsync_dir(self.path.parent)  # the file's name is durable before anything relies on it
        self._fd = fd
        return self.node_id

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def read_node_id(data_dir: Path) -> str | None:
    """The node ID of a data directory, without locking it (for `petrel data print`)."""
    try:
        data = (Path(data_dir) / "server.lock").read_bytes()
    except FileNotFoundError:
        return None
    if data[:8] == MAGIC and len(data) >= 24:
        return str(uuid.UUID(bytes=data[8:24]))
    return None


def node_id_of(data_dir: Path) -> str:
    """The node ID of a data directory, created (atomically, durably) when it has none yet.

    For brokers that share a directory (shared store): neither needs the other's lock to learn
    the ID, and two that start at once agree on one.
    """
    data_dir = Path(data_dir)
    existing = read_node_id(data_dir)
    if existing is not None:
        return existing
    make_dirs(data_dir)
    tmp = data_dir / f".server.lock.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(MAGIC + uuid.uuid4().bytes)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, data_dir / "server.lock")  # fails if another broker created it first
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    fsync_dir(data_dir)
    node_id = read_node_id(data_dir)
    if node_id is None:
        raise DataDirLocked(f"{data_dir / 'server.lock'} holds no node ID; move it aside and start again")
    return node_id
