"""The lock manager seam: a distributed lock and a coordinated sequence per node id.

A pluggable lock manager (Artemis `DistributedPrimitiveManager`) lets a pair of brokers that
share a node id agree on which one is active without a quorum of brokers: the one holding
the node id's lock is active, and the coordinated activation sequence tells a node whose
data fell behind that it must not activate (see `petrel.ha.activation_sequence`).

Implementations: `petrel.ha.zookeeper.ZooKeeperLockManager` (kazoo). Every call here is
synchronous and may block for up to its timeout; an asyncio broker runs them in a thread
(``await asyncio.to_thread(manager.start, 8.0)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from petrel.errors import PetrelError

__all__ = ["CoordinatedSequence", "DistributedLock", "LockManager", "LockManagerUnavailable", "UnavailableListener"]

#: Called with no arguments when the lock manager's session is suspended or lost.
UnavailableListener = Callable[[], None]


class LockManagerUnavailable(PetrelError):
    """The coordination service cannot be reached, or the session with it is gone.

    The message says what to check: the connect string, and that the service is up.
    """


@runtime_checkable
class DistributedLock(Protocol):
    """One holder at a time across every process that names the same node id."""

    def try_lock(self, timeout: float = 0.0) -> bool:
        """Take the lock within `timeout` seconds: True if held (already held counts).

        Raises `LockManagerUnavailable` when the service cannot be reached."""
        ...

    def unlock(self) -> None:
        """Release the lock if held; harmless otherwise."""
        ...

    def held(self) -> bool:
        """True while this process holds the lock and its session is connected and alive."""
        ...


@runtime_checkable
class CoordinatedSequence(Protocol):
    """A signed 64-bit integer shared by every process naming the same node id.

    A sequence that was never set reads 0."""

    def get(self) -> int:
        ...

    def compare_and_set(self, expected: int, new: int) -> bool:
        """Set `new` only if the value is still `expected`; False when it is not."""
        ...


@runtime_checkable
class LockManager(Protocol):
    def start(self, timeout: float | None = None) -> None:
        """Connect; raise `LockManagerUnavailable` after `timeout` seconds if that fails."""
        ...

    def stop(self) -> None:
        """Disconnect: every lock this process holds is released."""
        ...

    def lock(self, node_id: str) -> DistributedLock:
        ...

    def sequence(self, node_id: str) -> CoordinatedSequence:
        ...

    def add_unavailable_listener(self, listener: UnavailableListener) -> None:
        """Call `listener` when the session is suspended or lost.

        It may run on the implementation's own thread: it must not block, and an asyncio
        caller hops to its loop (``loop.call_soon_threadsafe``)."""
        ...
