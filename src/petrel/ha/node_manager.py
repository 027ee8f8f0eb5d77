"""Shared store: who may run on a data directory two brokers share (Artemis ``FileLockNodeManager``).

Three files in the data directory, on a filesystem both hosts see:

- ``server.lock`` holds the node ID (see :mod:`petrel.storage.server_lock`) and, at byte 24,
  the state of the pair: ``L`` live, ``F`` a primary is failing back, ``P`` paused (the
  active node stopped gracefully and handed over to nobody), ``N`` not started.
- ``serverlock.1``: the live lock. Whoever holds it serves; the kernel drops it when the
  holder dies, however it dies.
- ``serverlock.2``: the backup lock. One backup waits at a time.

A backup that gets the live lock reads the state: ``L`` means the live died holding it
(or stopped with ``failover_on_shutdown``), so it activates; ``P``, ``F`` or ``N`` means the
live left on purpose or a primary is taking its place, so it lets go and waits on.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

from petrel.storage.journal.segment import make_dirs
from petrel.storage.server_lock import node_id_of

__all__ = ["FileNodeManager", "LIVE", "FAILING_BACK", "PAUSED", "NOT_STARTED"]

LIVE = "L"
FAILING_BACK = "F"
PAUSED = "P"
NOT_STARTED = "N"

STATE_OFFSET = 24  # after the magic and the node UUID
LIVE_LOCK = "serverlock.1"
BACKUP_LOCK = "serverlock.2"


class FileNodeManager:
    def __init__(self, data_dir: Path | str, *, poll: float = 0.05) -> None:
        self.data_dir = Path(data_dir)
        self.poll = poll
        make_dirs(self.data_dir)
        self.node_id = node_id_of(self.data_dir)
        self._fds: dict[str, int] = {}

    # -- the state byte ----------------------------------------------------------------------

    def state(self) -> str:
        with open(self.data_dir / "server.lock", "rb") as f:
            f.seek(STATE_OFFSET)
            b = f.read(1)
        return b.decode() if b and b in b"LFPN" else NOT_STARTED

    def set_state(self, state: str) -> None:
        fd = os.open(self.data_dir / "server.lock", os.O_RDWR)
        try:
            os.pwrite(fd, state.encode(), STATE_OFFSET)
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- the locks ---------------------------------------------------------------------------

    def try_lock(self, name: str) -> bool:
        if name in self._fds:
            return True
        fd = os.open(self.data_dir / name, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fds[name] = fd
        return True

    async def lock(self, name: str) -> None:
        """Wait for a lock, looking every ``poll`` seconds (cancel the task to stop waiting)."""
        while not self.try_lock(name):
            await asyncio.sleep(self.poll)

    def unlock(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def holds(self, name: str) -> bool:
        return name in self._fds

    def live_lock_free(self) -> bool:
        """Whether nobody holds the live lock right now (a look, not a claim)."""
        if self.holds(LIVE_LOCK):
            return False
        if self.try_lock(LIVE_LOCK):
            self.unlock(LIVE_LOCK)
            return True
        return False

    # -- the two roles -------------------------------------------------------------------------

    async def start_primary(self) -> None:
        """Tell an active backup to give way, then wait for the live lock.

        ``F`` is written again while waiting: a backup that was recovering when it was first
        written writes ``L`` once it serves, and would then never see the request."""
        self.set_state(FAILING_BACK)
        while not self.try_lock(LIVE_LOCK):
            if self.state() != FAILING_BACK:
                self.set_state(FAILING_BACK)
            await asyncio.sleep(self.poll)

    async def await_failover(self) -> None:
        """As a backup: return holding the live lock once the live has died (state L, lock free)."""
        await self.lock(BACKUP_LOCK)
        try:
            while True:
                if self.try_lock(LIVE_LOCK):
                    if self.state() == LIVE:
                        return
                    self.unlock(LIVE_LOCK)
                await asyncio.sleep(self.poll)
        finally:
            self.unlock(BACKUP_LOCK)

    def release(self, *, state: str | None) -> None:
        """Leave the live role: write ``state`` (None keeps L: the backup takes over) and let go."""
        if state is not None and self.holds(LIVE_LOCK):
            self.set_state(state)
        self.unlock(LIVE_LOCK)
        self.unlock(BACKUP_LOCK)
