"""Shared-store HA with real processes: a primary and a backup on one data directory.

Every test counts exactly (the chaos `Ledger`): a message whose send was confirmed is consumed
(its acknowledgement confirmed) once, or found by the final drain, and never seen again after
its acknowledgement was confirmed. Redeliveries of unacknowledged messages are allowed.

Failover times are measured and printed, never asserted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ha_harness import (
    CoreLoad, Pair, StompLoad, core_load, drain_bodies, drain_core, fail_over, ha, kill_cycles,
    report, run, send_confirmed, verdict, wait_until,
)
from petrel.client import ClientError, Connection, Message, connect
from petrel.testing.chaos.channels import ChannelError, stomp_producer
from petrel.testing.chaos.faults import DiskMount, can_mount_tmpfs
from petrel.testing.chaos.ledger import Ledger
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system

@pytest.fixture
def pairs(tmp_path):
    made: list[Pair] = []

    def make(policy: str = "", shared: Path | None = None, top: str = "") -> Pair:
        pair = Pair(tmp_path / f"pair{len(made)}", policy, shared, top)
        made.append(pair)
        return pair

    yield make
    for pair in made:
        pair.kill()


@pytest.mark.timeout(900)
def test_core_20_kill9_cycles_alternating_live_nothing_lost_or_twice(pairs):
    """allow_failback = false: each kill makes the other node live, so the live alternates."""
    pair = pairs("allow_failback = false\n").start()
    ledger = Ledger()
    load = CoreLoad(ledger)
    cycles, per_cycle = 20, 300
    lives = []

    def progressed(k: int) -> bool:
        load.cap = (k + 1) * per_cycle
        return load.confirmed >= k * per_cycle + per_cycle // 2 and load.received > k * per_cycle // 2

    async def go() -> list[float]:
        loop = asyncio.get_running_loop()
        await load.open(pair.failover_url())
        tasks = [asyncio.ensure_future(load.produce()), asyncio.ensure_future(load.consume())]

        def cycle() -> list[float]:
            out = []
            for k in range(cycles):
                lives.append(pair.live().config_path.parent.name)
                out += kill_cycles(pair, 1, lambda _: progressed(k))
            return out

        times = await loop.run_in_executor(None, cycle)
        load.cap = cycles * per_cycle
        await load.finish()
        await asyncio.gather(*tasks)
        failovers = load.conn.failovers
        await load.conn.close()
        assert failovers >= cycles, f"the client failed over {failovers} times"
        return times

    times = run(go())
    assert not load.errors, load.errors
    assert lives == ["p", "b"] * (cycles // 2), lives
    report("CORE kill -9", times)
    drained = drain_core(pair.live(), CoreLoad.QUEUE, ledger)
    print(f"drained {drained} after the cycles")
    assert load.sent == cycles * per_cycle
    verdict(ledger)
    assert (ha(pair.p)["state"], ha(pair.b)["state"]) == ("live", "backup")


@pytest.mark.timeout(900)
def test_stomp_20_kill9_cycles_alternating_live_nothing_lost_or_twice(pairs):
    pair = pairs("allow_failback = false\n").start()
    ledger = Ledger()
    load = StompLoad([pair.p.stomp_port, pair.b.stomp_port], ledger).start()
    cycles, per_cycle = 20, 200

    def progressed(k: int) -> bool:
        if load.errors:
            raise load.errors[0]
        load.cap = (k + 1) * per_cycle
        return ledger.confirmed_count >= k * per_cycle + per_cycle // 2 and load.received > k * per_cycle // 2

    try:
        times = kill_cycles(pair, cycles, progressed)
        wait_for(lambda: ledger.confirmed_count >= cycles * per_cycle and not load.errors, 120,
                 message=f"{ledger.confirmed_count} of {cycles * per_cycle} confirmed")
        wait_for(lambda: load.received >= cycles * per_cycle, 120)
    finally:
        load.stop()
    assert not load.errors, load.errors
    report("STOMP kill -9", times)
    print(f"the producer reconnected {load.reconnects} times")
    drain_core(pair.live(), StompLoad.QUEUE, ledger)
    verdict(ledger)
    assert (ha(pair.p)["state"], ha(pair.b)["state"]) == ("live", "backup")


def test_sigterm_with_failover_on_shutdown_hands_over_to_the_backup(pairs):
    pair = pairs("failover_on_shutdown = true\n").start()
    took = []

    def stop_primary() -> None:
        t0 = time.monotonic()
        assert pair.p.stop() == 0
        pair.b.wait_state("ok")
        took.append(time.monotonic() - t0)

    load = run(core_load(pair, [stop_primary]))
    report("SIGTERM with failover_on_shutdown", took)
    assert load.failovers == 1
    assert ha(pair.b)["state"] == "live" and ha(pair.b)["failovers"] == 1
    assert pair.state_byte() == "L"
    assert "ha.handover" in pair.p.log_path.read_text()
    drain_core(pair.b, CoreLoad.QUEUE, load.ledger)
    verdict(load.ledger)


def test_sigterm_without_failover_on_shutdown_pauses_the_pair_until_the_primary_returns(pairs):
    pair = pairs().start()
    paused = []

    def stop_and_restart_primary() -> None:
        assert pair.p.stop() == 0
        paused.append(pair.state_byte())
        # the backup sees the live lock free but the pair paused: it must not take over. The
        # primary's restart (a new process) takes far longer than the backup's look (50 ms).
        pair.p.start(wait=False)
        pair.p.wait_state("ok")

    load = run(core_load(pair, [stop_and_restart_primary]))
    assert paused == ["P"]
    assert load.failovers == 1
    assert ha(pair.b)["failovers"] == 0 and pair.b.health()["status"] == "backup"
    assert ha(pair.p)["state"] == "live"
    drain_core(pair.p, CoreLoad.QUEUE, load.ledger)
    verdict(load.ledger)


def test_failback_the_primary_serves_again_and_the_backup_waits_again(pairs):
    """allow_failback and restart_backup (the defaults): kill -9 the primary, the backup serves;
    restart the primary, it takes over again and the backup waits again, so a second kill makes
    it serve again. A consumer on the failover client keeps receiving throughout."""
    pair = pairs().start()
    seen = {}

    def kill_primary() -> None:
        _, took = fail_over(pair)
        seen["takeover"] = took
        assert ha(pair.b)["state"] == "live"

    def restart_primary() -> None:
        t0 = time.monotonic()
        pair.p.start(wait=False)
        pair.p.wait_state("ok")
        pair.b.wait_state("backup")
        seen["failback"] = time.monotonic() - t0
        seen["b after failback"] = ha(pair.b)
        seen["p after failback"] = ha(pair.p)

    def kill_primary_again() -> None:
        pair.p.kill9()
        pair.b.wait_state("ok")
        seen["b after the second kill"] = ha(pair.b)

    load = run(core_load(pair, [kill_primary, restart_primary, kill_primary_again]))
    print(f"takeover {seen['takeover']:.2f}s, failback (from the primary's start) {seen['failback']:.2f}s")
    b, p = seen["b after failback"], seen["p after failback"]
    assert (b["role"], b["state"], b["failovers"]) == ("backup", "backup", 1), b
    assert (p["role"], p["state"]) == ("primary", "live"), p
    assert seen["b after the second kill"]["failovers"] == 2
    assert load.failovers == 3
    assert load.received >= load.sent  # the consumer kept receiving after each switch
    drain_core(pair.b, CoreLoad.QUEUE, load.ledger)
    verdict(load.ledger)


def test_without_failback_the_returning_primary_waits_until_the_backup_stops(pairs):
    pair = pairs("allow_failback = false\n").start()
    seen = {}

    def kill_primary() -> None:
        fail_over(pair)

    def restart_primary() -> None:
        pair.p.start(wait=False)
        pair.p.wait_state("failing-back")
        seen["byte"] = pair.state_byte()

    def stop_backup() -> None:
        # the load of the step before ran on the backup with the primary waiting: still so
        seen["b"], seen["p"] = ha(pair.b), pair.p.health()["status"]
        assert pair.b.stop() == 0
        pair.p.wait_state("ok")

    load = run(core_load(pair, [kill_primary, restart_primary, stop_backup]))
    assert seen["byte"] == "F"
    assert seen["b"]["state"] == "live" and seen["p"] == "failing-back", seen
    assert load.failovers == 2
    assert ha(pair.p)["state"] == "live"
    drain_core(pair.p, CoreLoad.QUEUE, load.ledger)
    verdict(load.ledger)


def test_without_restart_backup_the_backup_stays_stopped_after_failback(pairs):
    pair = pairs("restart_backup = false\n").start()
    seen = {}

    def kill_primary() -> None:
        fail_over(pair)

    def restart_primary() -> None:
        pair.p.start(wait=False)
        pair.p.wait_state("ok")
        pair.b.wait_state("stopped")

    def kill_and_restart_primary() -> None:
        pair.p.kill9()
        pair.p.start(wait=False)  # the backup stopped for good: nobody serves until then
        pair.p.wait_state("ok")
        seen["b"] = ha(pair.b)

    load = run(core_load(pair, [kill_primary, restart_primary, kill_and_restart_primary]))
    assert (seen["b"]["state"], seen["b"]["failovers"]) == ("stopped", 1), seen["b"]
    assert pair.b.proc.poll() is None
    assert load.failovers == 3
    drain_core(pair.p, CoreLoad.QUEUE, load.ledger)
    verdict(load.ledger)


def test_an_ack_called_during_a_failover_does_not_settle_the_new_deliveries(pairs):
    """Found by the failback tests (20 messages consumed twice after their acknowledgement was
    confirmed). With only the primary running, kill it: the client keeps trying; acknowledge a
    message delivered before; start the backup, which takes over. The acknowledgement belongs to
    the dead connection: nothing may be settled on the backup."""
    pair = pairs()
    pair.p.start(wait=False)
    pair.p.wait_state("ok")

    async def go() -> tuple[int | str, list[bytes]]:
        loop = asyncio.get_running_loop()
        conn = await connect(pair.failover_url())
        session = await conn.session()
        producer = session.producer("queue://ha.ack")
        for i in range(50):
            await producer.send(Message(b"%d" % i))
        await session.flush()
        consumer = await session.consumer("queue://ha.ack", ack="client")
        first = [await consumer.receive(5) for _ in range(10)]
        await loop.run_in_executor(None, pair.p.kill9)
        await wait_until(lambda: not conn.connected, 30)
        ack = asyncio.ensure_future(consumer.ack(first[-1], cumulative=True))
        await loop.run_in_executor(None, lambda: pair.b.start(wait=False).wait_state("ok"))
        await wait_until(lambda: conn.failovers == 1, 60)
        try:
            settled = await asyncio.wait_for(ack, 30)
        except ClientError as exc:
            settled = type(exc).__name__
        await consumer.close()
        await session.close()
        bodies = await drain_bodies(conn, "queue://ha.ack")
        await conn.close()
        return settled, bodies

    settled, bodies = run(go(), 120)
    assert sorted(int(b) for b in bodies) == list(range(50)), f"the stale ack settled {settled}"


# -- a full disk on the live -------------------------------------------------------------------


@pytest.fixture
def shared_tmpfs(tmp_path):
    if not can_mount_tmpfs():
        pytest.skip("needs root to mount a small tmpfs for the shared data directory")
    disk = DiskMount(tmp_path / "shared")
    why = disk.mount()
    if why is not None:
        pytest.skip(why)
    yield disk
    disk.unmount()


def test_a_full_disk_on_the_live_refuses_sends_and_fails_nothing_over(pairs, shared_tmpfs):
    pair = pairs(shared=shared_tmpfs.path, top="max_disk_usage = 100\njournal_file_size = 1048576\n"
                                                "journal_pool_files = 1\n").start()
    ledger = Ledger()
    send_confirmed(pair, ledger, 0, 200)
    shared_tmpfs.fill()
    channel = stomp_producer(pair.p.stomp_port, f"/queue/{StompLoad.QUEUE}", False, ledger.confirmed)
    refused = None
    try:
        for start in range(1000, 100_000, 10):
            batch = [StompLoad._spec(n) for n in range(start, start + 10)]
            for spec in batch:
                ledger.sent(spec.mid, (StompLoad.QUEUE,))
            channel.send(batch)
    except ChannelError as exc:
        refused = str(exc)
    finally:
        channel.abort()
    assert refused is not None and ("No space left" in refused or "Errno 28" in refused), refused
    health = pair.p.health()
    assert health["status"] == "cannot persist", health
    assert pair.p.proc.poll() is None
    assert pair.b.health()["status"] == "backup" and ha(pair.b)["failovers"] == 0

    shared_tmpfs.free()
    pair.p.wait_state("ok")
    send_confirmed(pair, ledger, 200_000, 200)
    assert pair.live() is pair.p  # the full disk made no failover
    assert pair.b.health()["status"] == "backup" and ha(pair.b)["failovers"] == 0

    live, _ = fail_over(pair)  # what was confirmed is on the shared disk: the backup serves it
    assert live is pair.b
    drain_core(live, StompLoad.QUEUE, ledger)
    verdict(ledger)


def test_a_primary_returning_while_the_backup_recovers_still_fails_back(pairs):
    """The primary restarts (and asks for failback: F) while the backup is still recovering a
    long journal after the kill; the backup then writes L as it starts serving. The primary
    must still get its node back (it waited for ever: the request was overwritten)."""
    pair = pairs().start()
    count = 100_000
    with Connection(f"tcp://127.0.0.1:{pair.p.port}") as conn:
        session = conn.session()
        producer = session.producer("queue://ha.long")
        for i in range(count):
            producer.send(Message(b"%06d" % i))
        session.flush()
    pair.p.kill9()
    wait_for(lambda: "taking over" in pair.b.log(), 30, message="the backup never began to take over")
    pair.p.start(wait=False)  # while the backup recovers
    pair.p.wait_state("ok", timeout=120)
    pair.b.wait_state("backup")
    assert ha(pair.b)["failovers"] == 1  # the backup did serve in between
    with Connection(f"tcp://127.0.0.1:{pair.p.port}") as conn:
        assert conn.queue_info("ha.long")["message_count"] == count


def test_a_primary_stopped_while_it_waits_to_fail_back_leaves_the_backup_the_live(pairs):
    """allow_failback = false: the returning primary waits (F); it is stopped before it ever
    serves. The backup is still the live: when it crashes and restarts, it must take over again
    (a stale F kept it waiting, and nobody served)."""
    pair = pairs("allow_failback = false\n").start()
    ledger = Ledger()
    send_confirmed(pair, ledger, 0, 100)
    fail_over(pair)
    pair.p.start(wait=False)
    pair.p.wait_state("failing-back")
    send_confirmed(pair, ledger, 100, 100)
    assert pair.p.stop() == 0
    assert pair.state_byte() == "L"
    pair.b.kill9()
    pair.b.start(wait=False)
    pair.b.wait_state("ok")
    drain_core(pair.b, StompLoad.QUEUE, ledger)
    verdict(ledger)
