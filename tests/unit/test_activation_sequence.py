"""The activation sequence (petrel.ha.activation_sequence), without ZooKeeper.

Every row of the table; the local file; claim/commit interrupted after each step, then
recovered by the same node and refused for a node with older data; `activate` on an
in-memory lock manager.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from petrel.ha import activation_sequence as seq
from petrel.ha.activation_sequence import (SEQUENCE_FILE, ActivationCheck, ActivationConflict,
                                           StaleActivationSequence, activate, claim_and_commit, read_local_sequence,
                                           replica_lost, try_activate, write_local_sequence)
from petrel.ha.lock_manager import CoordinatedSequence, DistributedLock, LockManager, LockManagerUnavailable


class Crash(Exception):
    """The process died here."""


class MemorySequence:
    """A CoordinatedSequence in memory, which can crash before or after its next writes."""

    def __init__(self, value: int = 0) -> None:
        self.value = value
        self.writes = 0
        #: write number -> "before" (not applied) or "after" (applied, then the answer lost)
        self.crash_at: dict[int, str] = {}

    def get(self) -> int:
        return self.value

    def compare_and_set(self, expected: int, new: int) -> bool:
        self.writes += 1
        when = self.crash_at.pop(self.writes, None)
        if when == "before":
            raise Crash(f"before write {self.writes}")
        if self.value != expected:
            return False
        self.value = new
        if when == "after":
            raise Crash(f"after write {self.writes}")
        return True


class MemoryLock:
    def __init__(self, holders: dict[str, object], node_id: str) -> None:
        self._holders, self._node_id = holders, node_id
        self.unavailable = False

    def try_lock(self, timeout: float = 0.0) -> bool:
        if self.unavailable:
            raise LockManagerUnavailable("memory lock manager: down")
        return self._holders.setdefault(self._node_id, self) is self

    def unlock(self) -> None:
        if self._holders.get(self._node_id) is self:
            del self._holders[self._node_id]

    def held(self) -> bool:
        return self._holders.get(self._node_id) is self


class MemoryLockManager:
    """Two of these sharing `holders` and `sequences` are two brokers on one coordinator."""

    def __init__(self, holders: dict, sequences: dict) -> None:
        self._holders, self._sequences = holders, sequences
        self._locks: dict[str, MemoryLock] = {}

    def start(self, timeout: float | None = None) -> None: ...

    def stop(self) -> None: ...

    def lock(self, node_id: str) -> MemoryLock:
        return self._locks.setdefault(node_id, MemoryLock(self._holders, node_id))

    def sequence(self, node_id: str) -> MemorySequence:
        return self._sequences.setdefault(node_id, MemorySequence())

    def add_unavailable_listener(self, listener) -> None: ...


def test_the_in_memory_doubles_fit_the_protocols():
    manager = MemoryLockManager({}, {})
    assert isinstance(manager, LockManager)
    assert isinstance(manager.lock("n"), DistributedLock)
    assert isinstance(MemorySequence(), CoordinatedSequence)


# -- the table ------------------------------------------------------------------------------

@pytest.mark.parametrize(("local", "coordinated", "expected"), [
    (0, 0, ActivationCheck.IN_SYNC),            # fresh
    (7, 7, ActivationCheck.IN_SYNC),            # L == C
    (3, 7, ActivationCheck.STALE),              # C > 0, C != L: behind
    (9, 7, ActivationCheck.STALE),              # C > 0, C != L: ahead of the coordinator
    (0, 1, ActivationCheck.STALE),              # a fresh node against a used node id
    (7, -7, ActivationCheck.SELF_REPAIR),       # claimed 7, 7 written locally, not committed
    (6, -7, ActivationCheck.MAYBE_IN_SYNC),     # claimed 7 from 6, 7 not written locally
    (0, -1, ActivationCheck.MAYBE_IN_SYNC),     # the first claim ever, interrupted
    (5, -7, ActivationCheck.STALE),             # otherwise: claimed 7, we are two behind
    (8, -7, ActivationCheck.STALE),             # otherwise: ahead of a claim
    (7, 0, ActivationCheck.STALE),              # otherwise: the coordinator lost its data
])
def test_try_activate_table(local, coordinated, expected):
    assert try_activate(local, coordinated) is expected


def test_a_negative_local_sequence_is_a_bug():
    with pytest.raises(ValueError):
        try_activate(-1, 0)


# -- the local file -------------------------------------------------------------------------

def test_local_sequence_file_round_trip(tmp_path):
    assert read_local_sequence(tmp_path) == 0
    write_local_sequence(tmp_path, 41)
    assert read_local_sequence(tmp_path) == 41
    write_local_sequence(tmp_path, 2**63 - 1)
    assert read_local_sequence(tmp_path) == 2**63 - 1
    assert (tmp_path / SEQUENCE_FILE).read_bytes() == (2**63 - 1).to_bytes(8, "big", signed=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [SEQUENCE_FILE]  # no temp file left


def test_local_sequence_write_is_atomic(tmp_path, monkeypatch):
    write_local_sequence(tmp_path, 5)

    def fail(*args):
        raise Crash("power cut before the rename")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(Crash):
        write_local_sequence(tmp_path, 6)
    assert read_local_sequence(tmp_path) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [SEQUENCE_FILE]


def test_a_torn_local_file_is_refused(tmp_path):
    (tmp_path / SEQUENCE_FILE).write_bytes(b"\x00\x01")
    with pytest.raises(Exception, match="8-byte"):
        read_local_sequence(tmp_path)


# -- claim/commit ---------------------------------------------------------------------------

def test_claim_and_commit(tmp_path):
    write_local_sequence(tmp_path, 4)
    sequence = MemorySequence(4)
    assert claim_and_commit(sequence, tmp_path) == 5
    assert (sequence.value, read_local_sequence(tmp_path)) == (5, 5)


def test_claim_refused_when_the_coordinated_sequence_moved(tmp_path):
    write_local_sequence(tmp_path, 4)
    sequence = MemorySequence(6)
    with pytest.raises(ActivationConflict):
        claim_and_commit(sequence, tmp_path)
    assert (sequence.value, read_local_sequence(tmp_path)) == (6, 4)


def crash_claim(tmp_path: Path, sequence: MemorySequence, step: str, monkeypatch) -> None:
    """Run claim/commit from L = C = 4 and crash it at `step`."""
    if step == "step 1 lost":           # the claim never reached the coordinator
        sequence.crash_at[sequence.writes + 1] = "before"
    elif step == "after step 1":        # claimed, then died before writing locally
        sequence.crash_at[sequence.writes + 1] = "after"
    elif step == "during step 2":       # claimed, died while writing the file
        monkeypatch.setattr(seq, "write_local_sequence", _crashing_write)
    elif step == "after step 2":        # written locally, died before committing
        sequence.crash_at[sequence.writes + 2] = "before"
    elif step == "after step 3":        # committed, the answer lost
        sequence.crash_at[sequence.writes + 2] = "after"
    with pytest.raises(Crash):
        claim_and_commit(sequence, tmp_path)
    monkeypatch.setattr(seq, "write_local_sequence", write_local_sequence)


def _crashing_write(data_dir, value):
    raise Crash("died in the middle of the local write")


@pytest.mark.parametrize(("step", "state", "check"), [
    ("step 1 lost", (4, 4), ActivationCheck.IN_SYNC),
    ("after step 1", (4, -5), ActivationCheck.MAYBE_IN_SYNC),
    ("during step 2", (4, -5), ActivationCheck.MAYBE_IN_SYNC),
    ("after step 2", (5, -5), ActivationCheck.SELF_REPAIR),
    ("after step 3", (5, 5), ActivationCheck.IN_SYNC),
])
def test_interrupted_claim_is_recovered_by_the_same_node_and_refused_for_a_stale_one(
        tmp_path, monkeypatch, step, state, check):
    holders: dict = {}
    sequences = {"node-a": MemorySequence(4)}
    primary, backup_dir, old_dir = tmp_path / "primary", tmp_path / "backup", tmp_path / "old"
    write_local_sequence(primary, 4)
    write_local_sequence(backup_dir, 3)  # a replica that missed the activation 4
    write_local_sequence(old_dir, 0)

    crash_claim(primary, sequences["node-a"], step, monkeypatch)
    assert (read_local_sequence(primary), sequences["node-a"].value) == state
    assert try_activate(*state) is check

    for stale in (backup_dir, old_dir):  # a stale node gets the lock and is refused, lock released
        manager = MemoryLockManager(holders, sequences)
        with pytest.raises(StaleActivationSequence, match="stale.*sync from the active node"):
            activate(manager, "node-a", stale, timeout=0)
        assert holders == {}
        assert read_local_sequence(stale) in (0, 3)
    assert (read_local_sequence(primary), sequences["node-a"].value) == state  # nothing touched

    restarted = MemoryLockManager(holders, sequences)
    activation = activate(restarted, "node-a", primary, timeout=0)
    assert activation is not None and activation.check is check
    final = activation.activation_sequence
    assert final == sequences["node-a"].value == read_local_sequence(primary)
    # C ends above every local value anyone may hold (the claimer's L+1 included)
    assert final > max(abs(state[1]), state[0])


def test_repair_interrupted_is_repaired_again(tmp_path):
    """A repair that dies between its local write and its commit leaves SELF_REPAIR."""
    write_local_sequence(tmp_path, 4)
    sequence = MemorySequence(-5)  # MAYBE_IN_SYNC
    sequence.crash_at[1] = "before"
    with pytest.raises(Crash):
        activate(MemoryLockManager({}, {"n": sequence}), "n", tmp_path, timeout=0)
    assert try_activate(read_local_sequence(tmp_path), sequence.value) is ActivationCheck.SELF_REPAIR
    activation = activate(MemoryLockManager({}, {"n": sequence}), "n", tmp_path, timeout=0)
    assert activation.activation_sequence == sequence.value == read_local_sequence(tmp_path) == 6


# -- activate -------------------------------------------------------------------------------

def test_activate_fresh_pair_then_the_other_is_stale(tmp_path):
    holders: dict = {}
    sequences: dict = {}
    a, b = MemoryLockManager(holders, sequences), MemoryLockManager(holders, sequences)
    first = activate(a, "n", tmp_path / "a", timeout=0)
    assert first.check is ActivationCheck.IN_SYNC and first.activation_sequence == 1
    assert activate(b, "n", tmp_path / "b", timeout=0) is None  # a holds the lock
    first.lock.unlock()
    with pytest.raises(StaleActivationSequence) as refused:
        activate(b, "n", tmp_path / "b", timeout=0)
    assert (refused.value.local, refused.value.coordinated) == (0, 1)
    assert not b.lock("n").held()


def test_activate_waits_for_the_lock_until_its_timeout(tmp_path):
    holders: dict = {}
    sequences: dict = {}
    a, b = MemoryLockManager(holders, sequences), MemoryLockManager(holders, sequences)
    assert a.lock("n").try_lock()
    contender = b.lock("n")
    refused = threading.Event()
    plain_try = contender.try_lock

    def try_lock(timeout: float = 0.0) -> bool:
        got = plain_try(timeout)
        if not got:
            refused.set()
        return got

    contender.try_lock = try_lock
    thread = threading.Thread(target=lambda: refused.wait(5) and a.lock("n").unlock())
    thread.start()
    try:
        activation = activate(b, "n", tmp_path / "b", timeout=5, interval=0.01)
    finally:
        thread.join()
    assert refused.is_set()
    assert activation is not None and activation.lock.held()


def test_activate_raises_unavailable_after_the_timeout(tmp_path):
    manager = MemoryLockManager({}, {})
    manager.lock("n").unavailable = True
    with pytest.raises(LockManagerUnavailable, match="down"):
        activate(manager, "n", tmp_path, timeout=0.05, interval=0.01)


def test_replica_lost_makes_the_replica_stale(tmp_path):
    holders: dict = {}
    sequences: dict = {}
    primary = activate(MemoryLockManager(holders, sequences), "n", tmp_path / "p", timeout=0)
    write_local_sequence(tmp_path / "r", primary.activation_sequence)  # the replica synced
    assert replica_lost(primary, tmp_path / "p") == primary.activation_sequence + 1
    primary.lock.unlock()
    with pytest.raises(StaleActivationSequence):
        activate(MemoryLockManager(holders, sequences), "n", tmp_path / "r", timeout=0)


def test_replica_lost_without_the_lock_refuses(tmp_path):
    primary = activate(MemoryLockManager({}, {}), "n", tmp_path, timeout=0)
    primary.lock.unlock()
    with pytest.raises(LockManagerUnavailable, match="must stop serving"):
        replica_lost(primary, tmp_path)
    assert read_local_sequence(tmp_path) == 1
