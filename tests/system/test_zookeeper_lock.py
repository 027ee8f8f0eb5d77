"""The ZooKeeper lock manager against a real ZooKeeper (Debian's `zookeeper` package).

Two `ZooKeeperLockManager`s are two brokers sharing one node id: exactly one holds its lock;
a holder cut off from ZooKeeper hears about it at once (its unavailable listener) and the
other takes the lock once the holder's session expired; a node whose data is stale never
activates, even holding the lock; an interrupted claim is repaired by the node that made it;
sequences survive a ZooKeeper restart. Sessions are 2 s here (18 s by default).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from petrel.ha.activation_sequence import (ActivationCheck, StaleActivationSequence, activate, read_local_sequence,
                                           replica_lost, write_local_sequence)
from petrel.ha.lock_manager import DistributedLock, LockManager, LockManagerUnavailable
from petrel.ha.zookeeper import ZooKeeperLockManager
from petrel.testing.process import free_port, wait_for
from petrel.testing.proxy import TcpProxy
from petrel.testing.zookeeper import ZooKeeperServer, zookeeper_available

pytestmark = pytest.mark.system

SESSION_MS = 2000


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    missing = zookeeper_available()
    if missing is not None:
        pytest.skip(missing)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
        print(f"\nZooKeeper started in {server.last_start_seconds:.2f}s on {server.connect_string}")
        yield server
    finally:
        server.close()


@pytest.fixture
def zk(zookeeper):
    """The module's ZooKeeper, running again after a test that stopped it."""
    yield zookeeper
    zookeeper.start()


class Broker:
    """What a broker keeps of its lock manager: the manager, its data dir, the listener's calls."""

    def __init__(self, connect_string: str, data_dir: Path, **options) -> None:
        options.setdefault("session_ms", SESSION_MS)
        self.manager = ZooKeeperLockManager(connect_string, **options)
        self.data_dir = data_dir
        self.unavailable = threading.Event()
        self.listener_threads: list[str] = []
        self.manager.add_unavailable_listener(self._on_unavailable)

    def _on_unavailable(self) -> None:
        self.listener_threads.append(threading.current_thread().name)
        self.unavailable.set()


@pytest.fixture
def brokers(tmp_path):
    made: list[Broker] = []
    node_ids = iter(range(1000))

    def make(connect_string: str, name: str, start: bool = True, **options) -> Broker:
        broker = Broker(connect_string, tmp_path / name, **options)
        made.append(broker)
        if start:
            broker.manager.start(timeout=10)
        return broker

    make.node_id = lambda: f"node-{tmp_path.name[-12:]}-{next(node_ids)}"
    yield make
    for broker in made:
        broker.manager.stop()


def test_the_manager_fits_the_protocols(zk, brokers):
    broker = brokers(zk.connect_string, "a")
    assert isinstance(broker.manager, LockManager)
    assert isinstance(broker.manager.lock("n"), DistributedLock)


def test_two_brokers_compete_exactly_one_holds(zk, brokers):
    a, b = brokers(zk.connect_string, "a"), brokers(zk.connect_string, "b")
    for _ in range(5):
        node_id = brokers.node_id()
        locks = [a.manager.lock(node_id), b.manager.lock(node_id)]
        results: list[bool] = [False, False]
        start = threading.Barrier(2)

        def contend(index: int) -> None:
            start.wait(5)
            results[index] = locks[index].try_lock(0.5)

        threads = [threading.Thread(target=contend, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert sorted(results) == [False, True]
        assert [lock.held() for lock in locks] == results
        winner, loser = (locks[0], locks[1]) if results[0] else (locks[1], locks[0])
        assert winner.try_lock(0) is True  # held already
        began = time.monotonic()
        winner.unlock()
        assert loser.try_lock(5)
        print(f"handover after unlock: {time.monotonic() - began:.3f}s")
        assert not winner.held()
        loser.unlock()


@pytest.mark.parametrize("fault", ["cut", "freeze"])
def test_holder_cut_off_hears_it_and_the_other_takes_over_after_the_session_expires(zk, brokers, fault):
    """`cut`: the holder's connections are reset (it notices at once); `freeze`: a silent
    partition (it notices when its pings go unanswered, 2/3 of the session)."""
    node_id = brokers.node_id()
    with TcpProxy("127.0.0.1", zk.port) as proxy:
        holder = brokers(f"127.0.0.1:{proxy.port}", "holder")
        other = brokers(zk.connect_string, "other")
        began = time.monotonic()
        first = activate(holder.manager, node_id, holder.data_dir, timeout=5)
        print(f"\nactivation with a free lock: {time.monotonic() - began:.3f}s")
        assert first is not None and first.lock.held()
        assert activate(other.manager, node_id, other.data_dir, timeout=0.5) is None

        getattr(proxy, fault)()
        cut_at = time.monotonic()
        assert not other.manager.lock(node_id).try_lock(0), "the lock moved before the session expired"
        assert holder.unavailable.wait(5), "the holder's unavailable listener did not fire"
        print(f"listener fired {time.monotonic() - cut_at:.3f}s after the {fault}, on {holder.listener_threads}")
        assert threading.main_thread().name not in holder.listener_threads
        assert not first.lock.held()

        # the other node's data is in sync with the holder's (it was its replica)
        write_local_sequence(other.data_dir, first.activation_sequence)
        taken = activate(other.manager, node_id, other.data_dir, timeout=15)
        failover = time.monotonic() - cut_at
        print(f"failover after the {fault} (session {SESSION_MS} ms): {failover:.3f}s")
        assert taken is not None and taken.check is ActivationCheck.IN_SYNC
        assert failover >= 1.0, "took the lock before the holder's session could have expired"

        holder.unavailable.clear()
        proxy.heal()
        wait_for(lambda: holder.manager.connected, timeout=15, message="the holder did not reconnect")
        assert not first.lock.held(), "a new session must not inherit the expired one's lock"
        assert taken.lock.held()
        assert activate(holder.manager, node_id, holder.data_dir, timeout=0.5) is None
        taken.lock.unlock()  # even with the lock, the old holder is behind now
        with pytest.raises(StaleActivationSequence, match="stale"):
            activate(holder.manager, node_id, holder.data_dir, timeout=5)
        assert not holder.manager.lock(node_id).held()


def test_a_wait_broken_by_a_dropped_connection_leaves_no_lease_behind(zk, brokers):
    node_id = brokers.node_id()
    holder = brokers(zk.connect_string, "holder")
    path = holder.manager.lock(node_id).path
    leases = lambda: sorted(holder.manager._client.get_children(path))  # noqa: E731
    assert holder.manager.lock(node_id).try_lock(1)
    with TcpProxy("127.0.0.1", zk.port) as proxy:
        waiter = brokers(f"127.0.0.1:{proxy.port}", "waiter", session_ms=15000)
        session = waiter.manager.session_id()
        errors: list[Exception] = []

        def wait_for_the_lock() -> None:
            try:
                waiter.manager.lock(node_id).try_lock(15)
            except LockManagerUnavailable as exc:
                errors.append(exc)

        thread = threading.Thread(target=wait_for_the_lock)
        thread.start()
        try:
            wait_for(lambda: len(leases()) == 2, timeout=5, message="the waiter's lease never appeared")
            proxy.cut()
        finally:
            thread.join(15)
        assert errors and "ZooKeeper" in str(errors[0])
        assert len(leases()) == 2  # the session lives on, and its lease with it
        proxy.heal()
        wait_for(lambda: waiter.manager.connected, timeout=10, message="the waiter did not reconnect")
        assert waiter.manager.session_id() == session
        wait_for(lambda: len(leases()) == 1, timeout=5, message="the waiter's lease was left behind")
    holder.manager.lock(node_id).unlock()
    assert brokers(zk.connect_string, "third").manager.lock(node_id).try_lock(1)


def test_holder_client_closed_without_unlocking(zk, brokers):
    node_id = brokers.node_id()
    holder, other = brokers(zk.connect_string, "holder"), brokers(zk.connect_string, "other")
    assert holder.manager.lock(node_id).try_lock(1)
    holder.manager._client.stop()  # the session ends; nobody called unlock()
    assert holder.unavailable.wait(5)
    began = time.monotonic()
    assert other.manager.lock(node_id).try_lock(5)
    print(f"\nlock taken {time.monotonic() - began:.3f}s after the holder's session closed")
    assert not holder.manager.lock(node_id).held()


def test_stale_node_is_refused_even_when_it_gets_the_lock(zk, brokers):
    node_id = brokers.node_id()
    primary, backup = brokers(zk.connect_string, "primary"), brokers(zk.connect_string, "backup")
    active = activate(primary.manager, node_id, primary.data_dir, timeout=5)
    write_local_sequence(backup.data_dir, active.activation_sequence)  # the replica syncs
    assert replica_lost(active, primary.data_dir) == 2  # ... and is lost: the primary moves on
    primary.manager.stop()  # the primary goes away; its lock with it

    with pytest.raises(StaleActivationSequence, match="stale.*sync from the active node") as refused:
        activate(backup.manager, node_id, backup.data_dir, timeout=5)
    assert (refused.value.local, refused.value.coordinated) == (1, 2)
    assert not backup.manager.lock(node_id).held()
    assert read_local_sequence(backup.data_dir) == 1
    assert backup.manager.sequence(node_id).get() == 2


@pytest.mark.parametrize("interrupted", ["after the claim", "after the local write"])
def test_interrupted_claim_is_repaired_by_the_same_node_and_refused_for_a_stale_one(zk, brokers, interrupted):
    node_id = brokers.node_id()
    primary = brokers(zk.connect_string, "primary")
    active = activate(primary.manager, node_id, primary.data_dir, timeout=5)
    assert active.activation_sequence == 1
    # the next claim/commit (the replica was lost) dies half way: its process crashes
    assert active.sequence.compare_and_set(1, -2)
    if interrupted == "after the local write":
        write_local_sequence(primary.data_dir, 2)
    primary.manager._client.stop()

    stale = brokers(zk.connect_string, "stale")  # a backup that never synced
    with pytest.raises(StaleActivationSequence, match="stale"):
        activate(stale.manager, node_id, stale.data_dir, timeout=5)
    assert not stale.manager.lock(node_id).held()
    assert stale.manager.sequence(node_id).get() == -2

    restarted = brokers(zk.connect_string, "primary-again")
    restarted.data_dir = primary.data_dir
    again = activate(restarted.manager, node_id, restarted.data_dir, timeout=5)
    expected = ActivationCheck.MAYBE_IN_SYNC if interrupted == "after the claim" else ActivationCheck.SELF_REPAIR
    assert again is not None and again.check is expected
    assert again.activation_sequence == 3 == read_local_sequence(primary.data_dir)
    assert restarted.manager.sequence(node_id).get() == 3


def test_zookeeper_down_at_start_is_unavailable_within_the_timeout(brokers):
    port = free_port()  # nothing listens there
    broker = brokers(f"127.0.0.1:{port}", "lonely", start=False)
    began = time.monotonic()
    with pytest.raises(LockManagerUnavailable) as refused:
        broker.manager.start(timeout=1.5)
    took = time.monotonic() - began
    print(f"\nstart against no ZooKeeper gave up after {took:.2f}s")
    assert 1.0 <= took < 5
    assert f"127.0.0.1:{port}" in str(refused.value)
    assert "connect string" in str(refused.value) and "ZooKeeper is up" in str(refused.value)
    with pytest.raises(LockManagerUnavailable, match="not started"):
        broker.manager.lock("n").try_lock(0)


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_zookeeper_restarted_sequences_survive(zk, brokers, how):
    node_id = brokers.node_id()
    broker = brokers(zk.connect_string, "a")
    active = activate(broker.manager, node_id, broker.data_dir, timeout=5)
    assert active.activation_sequence == 1
    assert replica_lost(active, broker.data_dir) == 2

    getattr(zk, how)()
    assert broker.unavailable.wait(5), "the listener did not fire when ZooKeeper went away"
    assert not active.lock.held()
    with pytest.raises(LockManagerUnavailable, match="ZooKeeper is up"):
        broker.manager.sequence(node_id).get()
    zk.start()
    print(f"\nZooKeeper restarted ({how}) in {zk.last_start_seconds:.2f}s")

    wait_for(lambda: broker.manager.connected, timeout=15, message="no reconnection after the restart")
    assert broker.manager.sequence(node_id).get() == 2
    fresh = brokers(zk.connect_string, "b")
    assert fresh.manager.sequence(node_id).get() == 2
    # within its session, the holder keeps its lock across the restart; otherwise it is free
    holders = [active.lock.held(), fresh.manager.lock(node_id).try_lock(0)]
    assert holders.count(True) == 1
