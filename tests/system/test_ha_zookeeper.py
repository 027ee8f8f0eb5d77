"""A replicated pair with a ZooKeeper lock manager (a real ZooKeeper, started here): never two
lives for one node ID, a stale backup never activates, failover after the live's session.

"Two lives" is checked from the outside: a node serves when its client port takes a CORE
connection and a confirmed send.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from petrel.client import Message, connect
from petrel.testing.ha import (drain, exactly, ha_view, make_pair, route_through, send_range, start_pair,
                               stop_all, wait_in_sync)
from petrel.testing.process import BrokerProcess, wait_for
from petrel.testing.proxy import TcpProxy
from petrel.testing.zookeeper import ZooKeeperServer, zookeeper_available

pytestmark = pytest.mark.system

FAST = "initialReconnectDelay=10&maxReconnectDelay=100&randomize=false&maxReconnectAttempts=-1"
SESSION_MS = 2000


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.close()


def zk_pair(tmp_path, zookeeper, *, primary: str = "", backup: str = "") -> tuple[BrokerProcess, BrokerProcess]:
    lock = (f'lock_manager = {{ type = "zookeeper", connect_string = "{zookeeper.connect_string}", '
            f'session_ms = {SESSION_MS}, connection_ms = 3000, namespace = "t{uuid.uuid4().hex[:12]}" }}\n')
    return make_pair(tmp_path, primary=lock + primary, backup=lock + backup)


def run(coro, timeout: float = 120.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))








def serves(node: BrokerProcess) -> bool:
    """Whether the node takes a confirmed send right now (checked from outside)."""
    async def probe() -> bool:
        try:
            conn = await asyncio.wait_for(connect(f"tcp://127.0.0.1:{node.port}?reconnectAttempts=0"), 2)
        except Exception:
            return False
        try:
            session = await conn.session()
            await asyncio.wait_for(session.producer("queue://probe").send(Message(b"-1")), 2)
            await asyncio.wait_for(session.flush(), 2)
            return True
        except Exception:
            return False
        finally:
            try:
                await asyncio.wait_for(conn.close(), 2)
            except Exception:
                pass

    return asyncio.run(probe())




def test_kill9_of_the_live_under_load_the_backup_takes_over_after_its_session(tmp_path, zookeeper):
    p, b = zk_pair(tmp_path, zookeeper)
    try:
        start_pair(p, b)

        async def go() -> int:
            loop = asyncio.get_running_loop()
            conn = await connect(f"failover:(tcp://127.0.0.1:{p.port},tcp://127.0.0.1:{b.port})?{FAST}")
            session = await conn.session()
            producer = session.producer("queue://orders")
            for i in range(3000):
                await producer.send(Message(b"%d" % i))
                if i == 1000:
                    await loop.run_in_executor(None, p.kill9)
            await session.flush()
            await conn.close()
            return 3000

        t0 = time.monotonic()
        n = run(go())
        assert b.health().get("status") == "ok"
        exactly(run(drain(f"tcp://127.0.0.1:{b.port}", "queue://orders")), range(n))
        assert ha_view(b)["failovers"] == 1, f"took {time.monotonic() - t0:.1f}s"
    finally:
        stop_all(p, b)


def test_a_cut_between_live_and_backup_never_makes_two_lives_and_the_stale_backup_never_activates(
        tmp_path, zookeeper):
    p, b = zk_pair(tmp_path, zookeeper)
    proxy = TcpProxy("127.0.0.1", p.port).start()
    route_through(b, p, proxy.port)
    try:
        start_pair(p, b)
        target = f"tcp://127.0.0.1:{p.port}"
        run(send_range(target, "queue://q", range(0, 500)))
        proxy.cut()
        # for longer than a session: the backup tries the lock, the live holds it
        deadline = time.monotonic() + SESSION_MS / 1000 * 2.5
        while time.monotonic() < deadline:
            assert not serves(b), "the backup serves while the live does: two lives"
            assert serves(p), "the live stopped serving"
        run(send_range(target, "queue://q", range(500, 1000)))  # only the live has these: the backup is stale
        assert (ha_view(p).get("replication", {}).get("backup") or {}).get("state") == "lost"
        p.kill9()  # the live dies while the backup is cut off and stale
        wait_for(lambda: "stale" in b.log(), 20, message=b.log())
        assert not serves(b), "a stale backup activated"
        proxy.heal()
        p.start()  # the primary is current: it serves everything, and the backup syncs from it again
        exactly([x for x in run(drain(target, "queue://q")) if x >= 0], range(1000))
        wait_in_sync(b)
    finally:
        proxy.stop()
        stop_all(p, b)


def test_failback_with_a_lock_manager(tmp_path, zookeeper):
    p, b = zk_pair(tmp_path, zookeeper, primary="check_for_live_server = true\n")
    try:
        start_pair(p, b)
        run(send_range(f"tcp://127.0.0.1:{p.port}", "queue://q", range(500)))
        p.kill9()
        b.wait_state("ok", timeout=30)
        run(send_range(f"tcp://127.0.0.1:{b.port}", "queue://q", range(500, 1000)))
        p.start(wait=False)
        p.wait_state("ok", timeout=60)
        wait_in_sync(b)
        exactly(run(drain(f"tcp://127.0.0.1:{p.port}", "queue://q")), range(1000))
    finally:
        stop_all(p, b)


def test_zookeeper_unreachable_at_startup_is_a_clear_error(tmp_path):
    from petrel.testing.process import free_port

    p, _ = make_pair(tmp_path, primary=f'lock_manager = {{ type = "zookeeper", connect_string = '
                                        f'"127.0.0.1:{free_port()}", connection_ms = 1000 }}\n')
    p.start(wait=False)
    assert p.proc.wait(30) != 0
    assert "ZooKeeper" in p.log()


def test_zookeeper_down_stops_the_live_and_it_serves_again_when_zookeeper_is_back(tmp_path):
    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    with ZooKeeperServer(tmp_path / "zk") as zk:
        p, b = zk_pair(tmp_path, zk)
        try:
            p.start()
            b.start(wait=False)
            wait_in_sync(b)
            target = f"tcp://127.0.0.1:{p.port}"
            run(send_range(target, "queue://q", range(300)))
            zk.stop()
            wait_for(lambda: p.health().get("status") != "ok", 20, message=p.log())
            assert not serves(b)
            zk.start()
            wait_for(lambda: p.health().get("status") == "ok" or b.health().get("status") == "ok", 60,
                     message=p.log() + b.log())
            live = p if p.health().get("status") == "ok" else b
            exactly([x for x in run(drain(f"tcp://127.0.0.1:{live.port}", "queue://q")) if x >= 0], range(300))
        finally:
            stop_all(p, b)


def test_the_live_cut_off_from_zookeeper_stops_serving_and_its_backup_takes_over(tmp_path, zookeeper):
    """Only the live loses ZooKeeper (its link to it goes through a proxy that freezes): it stops
    serving within a third of the session, the backup takes the lock once the session expires,
    never both at once, and nothing confirmed is lost."""
    proxy = TcpProxy("127.0.0.1", zookeeper.port).start()
    namespace = f"t{uuid.uuid4().hex[:12]}"

    def lock(port: int) -> str:
        return (f'lock_manager = {{ type = "zookeeper", connect_string = "127.0.0.1:{port}", '
                f'session_ms = {SESSION_MS}, connection_ms = 3000, namespace = "{namespace}" }}\n')

    p, b = make_pair(tmp_path, primary=lock(proxy.port), backup=lock(zookeeper.port))
    try:
        start_pair(p, b)
        run(send_range(f"tcp://127.0.0.1:{p.port}", "queue://q", range(500)))
        proxy.freeze()
        overlap = []

        def settled() -> bool:
            p_serves, b_serves = p.health().get("status") == "ok", b.health().get("status") == "ok"
            if p_serves and b_serves:
                overlap.append(time.monotonic())
            return b_serves and not p_serves

        wait_for(settled, 30, interval=0.05, message=p.log() + b.log())
        assert not overlap, "the live and its backup both served"
        exactly([x for x in run(drain(f"tcp://127.0.0.1:{b.port}", "queue://q")) if x >= 0], range(500))
        proxy.heal()
        wait_in_sync(p)  # the old live, its lock lost to the backup, is the backup now
    finally:
        proxy.stop()
        stop_all(p, b)
