"""The activation sequence: no node whose data fell behind ever activates.

Artemis's `ActivationSequenceStateMachine`. Each node keeps a local sequence L in
``<data_dir>/server.activation.sequence`` (8 bytes, big-endian signed); the lock manager
keeps the coordinated sequence C of the node id. Whoever activates, holding the node id's
lock, first checks L against C (`try_activate`):

    =================================  ===============  ===========================================
    condition                          result           what `activate` does
    =================================  ===============  ===========================================
    L == C                             IN_SYNC          claim/commit
    C > 0 and C != L                   STALE            refuse: sync from the active node first
    C == -L (claimed, L written)       SELF_REPAIR      commit C to L, then claim/commit
    C == -(L+1) (claimed, L+1 not)     MAYBE_IN_SYNC    write L+1, commit C to L+1, then claim/commit
    anything else                      STALE            refuse
    =================================  ===============  ===========================================

then claims and commits the next value (`claim_and_commit`), holding the lock:

1. CAS C from L to -(L+1)   (claimed: nobody else can be in sync with it)
2. write L+1 locally
3. CAS C from -(L+1) to L+1 (committed)

A crash between any two steps leaves a state of the table that the same node repairs and
that a node with older data sees as STALE. The two repairs finish the pending claim and then
run a whole claim/commit, so C ends above every local value any node may hold. A primary
runs claim/commit when it activates and whenever it loses its replica (`replica_lost`), so
the replica it left behind is stale from then on.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from petrel.errors import PetrelError
from petrel.ha.lock_manager import CoordinatedSequence, DistributedLock, LockManager, LockManagerUnavailable

__all__ = [
    "SEQUENCE_FILE", "Activation", "ActivationCheck", "ActivationConflict", "StaleActivationSequence", "activate",
    "claim_and_commit", "read_local_sequence", "repair", "replica_lost", "try_activate", "write_local_sequence",
]

log = logging.getLogger("petrel.ha.activation_sequence")

SEQUENCE_FILE = "server.activation.sequence"
_LONG = struct.Struct(">q")
#: Artemis re-checks the lock every 200 ms while it waits for it.
LOCK_RETRY_INTERVAL = 0.2


class ActivationCheck(enum.Enum):
    IN_SYNC = "in sync"
    SELF_REPAIR = "self repair"
    MAYBE_IN_SYNC = "maybe in sync"
    STALE = "stale"


class StaleActivationSequence(PetrelError):
    """This node's data is older than the node id's last activation: it must not activate."""

    def __init__(self, node_id: str, local: int, coordinated: int) -> None:
        self.node_id, self.local, self.coordinated = node_id, local, coordinated
        hint = " (0: a new or wiped ZooKeeper)" if coordinated == 0 else ""
        super().__init__(
            f"refusing to activate node {node_id}: its data is stale (local activation sequence {local}, "
            f"coordinated {coordinated}{hint}); it must sync from the active node (start it as a backup) "
            f"before it can activate")


class ActivationConflict(PetrelError):
    """The coordinated sequence changed under a compare-and-set: someone else holds the node id."""


def try_activate(local: int, coordinated: int) -> ActivationCheck:
    """The table above: pure, no I/O."""
    if local < 0:
        raise ValueError(f"a local activation sequence is never negative, got {local}")
    if local == coordinated:
        return ActivationCheck.IN_SYNC
    if coordinated > 0:
        return ActivationCheck.STALE
    if coordinated == -local:
        return ActivationCheck.SELF_REPAIR
    if coordinated == -(local + 1):
        return ActivationCheck.MAYBE_IN_SYNC
    return ActivationCheck.STALE


# -- the local file ------------------------------------------------------------------------

def read_local_sequence(data_dir: Path | str) -> int:
    """L: 0 when the file does not exist yet (a fresh data directory)."""
    path = Path(data_dir) / SEQUENCE_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    if len(data) != _LONG.size:
        raise PetrelError(f"{path}: {len(data)} bytes, expected an 8-byte activation sequence")
    value = _LONG.unpack(data)[0]
    if value < 0:
        raise PetrelError(f"{path}: negative activation sequence {value}")
    return value


def write_local_sequence(data_dir: Path | str, value: int) -> None:
    """Replace L atomically and durably: temp file, fsync, rename, fsync the directory."""
    if value < 0:
        raise ValueError(f"a local activation sequence is never negative, got {value}")
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=SEQUENCE_FILE + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(_LONG.pack(value))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, directory / SEQUENCE_FILE)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# -- the steps -----------------------------------------------------------------------------

def claim_and_commit(sequence: CoordinatedSequence, data_dir: Path | str) -> int:
    """Claim, write, commit (the three steps above); return the new L. Run it holding the
    node id's lock. Raises `ActivationConflict` when C is not L."""
    local = read_local_sequence(data_dir)
    claimed = local + 1
    if not sequence.compare_and_set(local, -claimed):
        raise ActivationConflict(f"activation sequence: expected {local} to claim {claimed}, found "
                                 f"{sequence.get()}: another node changed it")
    write_local_sequence(data_dir, claimed)
    if not sequence.compare_and_set(-claimed, claimed):
        raise ActivationConflict(f"activation sequence: expected {-claimed} to commit {claimed}, found "
                                 f"{sequence.get()}: another node changed it")
    log.info("activation sequence committed: %d", claimed, extra={"event": "ha.activation_sequence_committed"})
    return claimed


def repair(sequence: CoordinatedSequence, data_dir: Path | str, local: int, coordinated: int) -> int:
    """Finish a claim that was interrupted (SELF_REPAIR, MAYBE_IN_SYNC): L becomes -C,
    then C becomes -C. Return the repaired L."""
    claimed = -coordinated
    if claimed <= 0 or try_activate(local, coordinated) not in (ActivationCheck.SELF_REPAIR,
                                                                ActivationCheck.MAYBE_IN_SYNC):
        raise ValueError(f"nothing to repair with local {local} and coordinated {coordinated}")
    if local != claimed:
        write_local_sequence(data_dir, claimed)
    if not sequence.compare_and_set(coordinated, claimed):
        raise ActivationConflict(f"activation sequence: expected {coordinated} to repair it to {claimed}, found "
                                 f"{sequence.get()}: another node changed it")
    log.warning("activation sequence repaired: an interrupted claim of %d is committed", claimed,
                extra={"event": "ha.activation_sequence_repaired"})
    return claimed


def check_and_commit(node_id: str, sequence: CoordinatedSequence, data_dir: Path | str) -> tuple[ActivationCheck, int]:
    """Check L against C, refuse if stale, repair where the table says so, claim/commit.
    Return the check's result and the new L. The caller holds the lock."""
    local = read_local_sequence(data_dir)
    coordinated = sequence.get()
    check = try_activate(local, coordinated)
    if check is ActivationCheck.STALE:
        raise StaleActivationSequence(node_id, local, coordinated)
    if check is not ActivationCheck.IN_SYNC:
        repair(sequence, data_dir, local, coordinated)
    return check, claim_and_commit(sequence, data_dir)


# -- activation ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Activation:
    """A node id this process activated: hold on to `lock` while active."""

    node_id: str
    lock: DistributedLock
    sequence: CoordinatedSequence
    check: ActivationCheck
    activation_sequence: int


def activate(lock_manager: LockManager, node_id: str, data_dir: Path | str, timeout: float = 2.0, *,
             interval: float = LOCK_RETRY_INTERVAL) -> Activation | None:
    """Take the node id's lock (re-trying every `interval` up to `timeout`), check the
    sequences, repair, claim/commit. Blocking: an asyncio caller runs it in a thread.

    Returns None when another node held the lock for the whole timeout. Raises
    `StaleActivationSequence` (lock released) when this node's data is stale,
    `LockManagerUnavailable` when the lock manager could not be reached until the timeout
    (or was lost while activating), `ActivationConflict` when the sequence changed under us."""
    lock = lock_manager.lock(node_id)
    deadline = time.monotonic() + timeout
    began = time.monotonic()
    while True:
        unavailable: LockManagerUnavailable | None = None
        try:
            if lock.try_lock(min(interval, max(deadline - time.monotonic(), 0.0))):
                break
        except LockManagerUnavailable as exc:
            unavailable = exc
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if unavailable is not None:
                raise unavailable
            return None
        if unavailable is not None:
            time.sleep(min(interval, remaining))
    try:
        sequence = lock_manager.sequence(node_id)
        check, value = check_and_commit(node_id, sequence, data_dir)
        if not lock.held():
            raise LockManagerUnavailable(f"lost the lock of node {node_id} while activating: check that "
                                         f"ZooKeeper is up and reachable")
    except BaseException:
        _release(lock)
        raise
    log.info("node %s activated (%s, activation sequence %d) in %.2fs", node_id, check.value, value,
             time.monotonic() - began, extra={"event": "ha.activated"})
    return Activation(node_id, lock, sequence, check, value)


def replica_lost(activation: Activation, data_dir: Path | str) -> int:
    """The active primary lost its replica: claim/commit again, so the replica it left
    behind can never activate. Returns the new L. Raises `LockManagerUnavailable` when the
    lock is no longer held (the primary must stop serving), `StaleActivationSequence` or
    `ActivationConflict` when someone else moved the sequence."""
    if not activation.lock.held():
        raise LockManagerUnavailable(f"node {activation.node_id} no longer holds its lock: it must stop serving")
    local = read_local_sequence(data_dir)
    coordinated = activation.sequence.get()
    if try_activate(local, coordinated) is not ActivationCheck.IN_SYNC:
        raise StaleActivationSequence(activation.node_id, local, coordinated)
    value = claim_and_commit(activation.sequence, data_dir)
    log.warning("node %s lost its replica: activation sequence now %d", activation.node_id, value,
                extra={"event": "ha.replica_lost"})
    return value


def _release(lock: DistributedLock) -> None:
    try:
        lock.unlock()
    except LockManagerUnavailable:
        pass  # the lease goes with the session
