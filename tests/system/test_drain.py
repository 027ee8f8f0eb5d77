"""`petrel drain` with real processes: an orphaned data directory emptied into a live broker,
every message once, in order, with its kind kept; a drainer killed anywhere and run again
delivers nothing twice; failures are non-zero exits with the reason and keep the source."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time

import pytest

from petrel.client import Message, connect
from petrel.testing.ha import drain, exactly, send_range
from petrel.testing.process import BrokerProcess, free_port, wait_for

pytestmark = pytest.mark.system

SOURCE = ('min_large_message_size = 20000\n'
          '[address_settings."paged.#"]\nmax_size_bytes = 200000\npage_size_bytes = 65536\n')


def run(coro, timeout: float = 120.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def drainer(source: BrokerProcess, target: BrokerProcess | str, *extra: str, timeout: float = 120) \
        -> subprocess.CompletedProcess:
    url = target if isinstance(target, str) else f"tcp://127.0.0.1:{target.port}"
    return subprocess.run([sys.executable, "-m", "petrel", "drain", "--data-dir", str(source.data_dir),
                           "--target", url, "--progress", "json", *extra],
                          capture_output=True, text=True, timeout=timeout)


def events(done: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def brokers(tmp_path):
    made: list[BrokerProcess] = []

    def make(name: str, settings: str = "") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, name=name, settings=settings)
        made.append(b)
        return b

    yield make
    for b in made:
        if b.proc is not None and b.proc.poll() is None:
            b.kill9()


def test_drain_moves_every_kind_of_message_in_order_and_exits_0_only_when_empty(brokers):
    src, dst = brokers("src", SOURCE), brokers("dst")
    src.start()
    dst.start()
    url = f"tcp://127.0.0.1:{src.port}"
    later = int(time.time() * 1000) + 60_000

    async def fill() -> None:
        await send_range(url, "queue://paged.orders", range(5000), body=b"x" * 300)
        await send_range(url, "queue://big", range(10), body=b"L" * 50_000)
        async with await connect(url) as conn:
            # a durable subscription on a topic, and messages of several priorities and groups
            await conn.create_queue("sub.eu", "prices", "MULTICAST", filter="region = 'eu'", exists_ok=True)
            session = await conn.session()
            prices = session.producer("topic://prices")
            for i in range(200):
                await prices.send(Message(b"%d:" % i, {"region": "eu" if i % 2 else "us"}))
            mixed = session.producer("queue://mixed")
            for i in range(300):
                await mixed.send(Message(b"%d:" % i, {"JMSXGroupID": f"g{i % 3}"}, priority=9 if i % 10 == 0 else 4))
            timed = session.producer("queue://timed")
            for i in range(50):
                await timed.send(Message(b"%d:" % i, scheduled=later))
            await session.flush()

    run(fill())
    src.kill9()  # the broker is gone; its directory is orphaned
    done = drainer(src, dst)
    assert done.returncode == 0, done.stderr
    last = events(done)[-1]
    assert last == {**last, "event": "done", "messages_moved": 5000 + 10 + 100 + 300 + 50}, last
    target = f"tcp://127.0.0.1:{dst.port}"

    got = run(drain(target, "queue://paged.orders"))
    exactly(got, range(5000))
    assert got == sorted(got), "the order of a queue changed"
    exactly(run(drain(target, "queue://big")), range(10))
    exactly(run(drain(target, "prices::sub.eu")), range(1, 200, 2))
    mixed = run(drain(target, "queue://mixed"))
    high = [n for n in range(300) if n % 10 == 0]
    assert mixed[:len(high)] == high, "priority order was not kept"
    for g in range(3):  # each group in its order
        group = [n for n in mixed if n % 3 == g]
        assert group == sorted(group) or [n for n in group if n % 10] == sorted(n for n in group if n % 10)

    async def scheduled() -> dict:
        async with await connect(target) as conn:
            return await conn.queue_info("timed")

    info = run(scheduled())
    assert info["message_count"] == 50 and info["scheduled_count"] == 50, info  # still in the future

    again = drainer(src, dst)  # nothing left: done, nothing sent
    assert again.returncode == 0 and events(again)[-1]["messages_moved"] == 0


def test_a_queue_built_while_it_moves_keeps_its_order_priorities_groups_and_schedules(brokers):
    """The drainer builds a plain queue's messages as they move, at most 20,000 ahead of the
    migration (core/staged.py), so the first of these 30,000 move before the last are built: the
    target still gets them in the order the source would deliver them: priority 9 first, each
    group in its order, the scheduled ones still scheduled."""
    src, dst = brokers("src", SOURCE), brokers("dst")
    src.start()
    dst.start()
    url = f"tcp://127.0.0.1:{src.port}"
    count = 30_000
    later = int(time.time() * 1000) + 300_000

    def scheduled(i: int) -> bool:
        return i % 1000 == 500

    async def fill() -> None:
        async with await connect(url) as conn:
            session = await conn.session()
            producer = session.producer("queue://staged.many")
            for i in range(count):
                await producer.send(Message(b"%d:" % i, {"JMSXGroupID": f"g{i % 4}"},
                                            priority=9 if i % 9 == 0 else 4,
                                            scheduled=later if scheduled(i) else 0))
            await session.flush()

    run(fill(), timeout=300)
    src.kill9()
    target = f"tcp://127.0.0.1:{dst.port}"

    now = [i for i in range(count) if not scheduled(i)]

    async def drain_and_consume() -> tuple[int, str, str, list[int]]:
        """A consumer on the target from before the drain: it takes the messages as they arrive,
        so it sees the order they were sent in (priority 4 sent first would come first)."""
        async with await connect(target) as conn:
            consumer = await (await conn.session()).consumer("queue://staged.many")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "petrel", "drain", "--data-dir", str(src.data_dir), "--target", target,
                "--progress", "json", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            finished = asyncio.ensure_future(proc.communicate())
            got: list[int] = []
            while len(got) < len(now) and (m := await consumer.receive(60)) is not None:
                got.append(int(m.body.partition(b":")[0]))
            out, err = await finished
        return proc.returncode, out.decode(), err.decode(), got

    code, out, err, got = run(drain_and_consume(), timeout=300)
    assert code == 0, err
    assert f"{count} of the messages are built as they move" in err, err[-2000:]
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["messages_total"] == lines[-1]["messages_moved"] == count, (lines[0], lines[-1])
    assert got == [i for i in now if i % 9 == 0] + [i for i in now if i % 9], "the queue's order changed"

    async def info() -> dict:
        async with await connect(target) as conn:
            return await conn.queue_info("staged.many")

    left = run(info())
    assert left["message_count"] == left["scheduled_count"] == count // 1000, left


@pytest.mark.timeout(600)
def test_a_drainer_killed_at_random_points_and_run_again_20_times_loses_and_duplicates_nothing(brokers):
    src, dst = brokers("src", SOURCE), brokers("dst")
    src.start()
    dst.start()
    count = 50_000
    run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://paged.orders", range(count), body=b"k" * 200),
        timeout=300)
    src.kill9()
    # killed once it has started moving (or at once now and then)
    kills = killed_drains(src, dst, 20, random.Random(20261123), moving=0.8, pause=0.08)
    assert kills >= 15
    finish_and_check(src, dst, "queue://paged.orders", count)


def killed_drains(src: BrokerProcess, dst: BrokerProcess, runs: int, rng: random.Random, *, moving: float,
                  pause: float) -> int:
    """`runs` drainers, each killed (SIGKILL) up to `pause` s after its first progress line (the
    migration moves), or at once with the chance 1 - `moving`; how many were killed."""
    kills = 0
    for _ in range(runs):
        proc = subprocess.Popen([sys.executable, "-m", "petrel", "drain", "--data-dir", str(src.data_dir),
                                 "--target", f"tcp://127.0.0.1:{dst.port}", "--progress", "json"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        first = proc.stdout.readline() if rng.random() < moving else ""
        time.sleep(rng.uniform(0.0, pause)) if first else None
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.wait(30)
        proc.stdout.close()
    return kills


def finish_and_check(src: BrokerProcess, dst: BrokerProcess, queue: str, count: int) -> None:
    """A drainer run to the end; the target then holds 0..count-1 once each, in order."""
    done = drainer(src, dst, timeout=300)
    assert done.returncode == 0, done.stderr
    got = run(drain(f"tcp://127.0.0.1:{dst.port}", queue), timeout=300)
    exactly(got, range(count))
    assert got == sorted(got), "the order of the queue changed"


@pytest.mark.timeout(600)
def test_a_drainer_killed_while_it_builds_a_queue_and_run_again_loses_and_duplicates_nothing(brokers):
    """A plain queue of 45,000 (more than the 20,000 the drainer builds ahead): drainer runs are
    killed as they move, while part of the queue is not built yet; the last run finishes."""
    src, dst = brokers("src", SOURCE), brokers("dst")
    src.start()
    dst.start()
    count = 45_000
    run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://plain", range(count), body=b"p" * 200), timeout=300)
    src.kill9()
    # each killed while it moves the queue, whose later messages are not built yet
    kills = killed_drains(src, dst, 6, random.Random(20261128), moving=1.0, pause=0.05)
    assert kills >= 3
    finish_and_check(src, dst, "queue://plain", count)


def test_target_unreachable_is_exit_1_with_the_reason_and_the_source_is_kept(brokers):
    src = brokers("src")
    src.start()
    run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://q", range(100)))
    src.kill9()
    done = drainer(src, f"tcp://127.0.0.1:{free_port()}")
    assert done.returncode == 1 and "cannot reach the target" in done.stderr, done.stderr
    assert events(done)[-1]["event"] == "failed"
    src.start()  # the messages are still there
    exactly(run(drain(f"tcp://127.0.0.1:{src.port}", "queue://q")), range(100))


def test_a_directory_in_use_by_a_live_broker_is_refused(brokers):
    src, dst = brokers("src"), brokers("dst")
    src.start()
    dst.start()
    done = drainer(src, dst)
    assert done.returncode == 1 and "in use by another broker" in done.stderr, done.stderr


def test_the_target_going_down_mid_drain_then_a_rerun_moves_the_rest_once(brokers):
    src, dst = brokers("src", SOURCE), brokers("dst")
    src.start()
    dst.start()
    run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://paged.orders", range(20_000), body=b"t" * 200),
        timeout=300)
    src.kill9()
    proc = subprocess.Popen([sys.executable, "-m", "petrel", "drain", "--data-dir", str(src.data_dir),
                             "--target", f"tcp://127.0.0.1:{dst.port}", "--progress", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    dst.kill9()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "target" in err, err
    dst.start()
    done = drainer(src, dst)
    assert done.returncode == 0, done.stderr
    exactly(run(drain(f"tcp://127.0.0.1:{dst.port}", "queue://paged.orders"), timeout=300), range(20_000))


def test_a_live_only_broker_scales_down_on_stop_and_its_clients_follow(brokers):
    """[ha_policy] live_only with scale_down: SIGTERM moves every message to the target first; a
    CORE client is sent there and keeps consuming; the queue arrives whole and in order."""
    dst = brokers("dst")
    dst.start()
    src = brokers("src", f'[ha_policy]\nlive_only = true\n'
                         f'scale_down = {{ enabled = true, connectors = ["tcp://127.0.0.1:{dst.port}"] }}\n')
    src.start()
    run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://orders", range(3000)))

    async def consume_across() -> list[int]:
        loop = asyncio.get_running_loop()
        conn = await connect(f"failover:(tcp://127.0.0.1:{src.port})?initialReconnectDelay=10&maxReconnectDelay=100")
        session = await conn.session()
        consumer = await session.consumer("queue://orders", ack="client")
        got = []
        for _ in range(500):  # each acknowledged (on the source's disk) before the scale-down
            m = await consumer.receive(5.0)
            assert await consumer.ack(m) == 1
            got.append(int(m.body.split(b":")[0]))
        code = await loop.run_in_executor(None, src.stop)
        assert code == 0, src.log()
        while (m := await consumer.receive(3.0)) is not None:
            await consumer.ack(m)
            got.append(int(m.body.split(b":")[0]))
        assert conn.endpoint.port == dst.port  # the scale-down sent the client to the target
        await conn.close()
        return got

    got = run(consume_across())
    exactly(got, range(3000))
    assert "scale_down.done" in src.log()


def test_scale_down_through_the_management_api(brokers, tmp_path):
    import urllib.request

    dst = brokers("dst")
    dst.start()
    src = BrokerProcess(tmp_path / "api-src", name="api-src", http=True)
    src.start()
    try:
        run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://q", range(1000)))
        request = urllib.request.Request(f"http://127.0.0.1:{src.http_port}/api/v1/broker/scale-down",
                                         data=json.dumps({"target": f"tcp://127.0.0.1:{dst.port}"}).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 202
        assert src.proc.wait(60) == 0, src.log()  # the broker stopped once everything moved
        exactly(run(drain(f"tcp://127.0.0.1:{dst.port}", "queue://q")), range(1000))
    finally:
        if src.proc.poll() is None:
            src.kill9()


def test_a_scale_down_that_cannot_reach_its_target_stops_non_zero_and_keeps_the_messages(brokers):
    src = brokers("src", f'[ha_policy]\nlive_only = true\n'
                         f'scale_down = {{ enabled = true, connectors = ["tcp://127.0.0.1:{free_port()}"] }}\n')
    src.start()
    run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://q", range(200)))
    assert src.stop() == 1
    assert "petrel drain" in src.log()  # it says what to do
    dst = brokers("dst")
    dst.start()
    done = drainer(src, dst)
    assert done.returncode == 0, done.stderr
    exactly(run(drain(f"tcp://127.0.0.1:{dst.port}", "queue://q")), range(200))


def test_duplicate_ids_and_delivery_counts_move_with_the_messages(brokers):
    src, dst = brokers("src"), brokers("dst")
    src.start()
    dst.start()
    url = f"tcp://127.0.0.1:{src.port}"

    async def fill() -> None:
        async with await connect(url) as conn:
            session = await conn.session()
            producer = session.producer("queue://orders")
            for i in range(100):
                await producer.send(Message(b"%d:" % i, duplicate_id=f"order-{i}"))
            await session.flush()
            # the first ten are delivered once and not acknowledged: delivery count 1
            consumer = await session.consumer("queue://orders", ack="client")
            for _ in range(10):
                assert await consumer.receive(5.0) is not None
            await consumer.close()
            # these are sent and consumed here: only the source's duplicate-ID cache knows them
            done = session.producer("queue://done")
            for i in range(50):
                await done.send(Message(b"%d:" % i, duplicate_id=f"done-{i}"))
            await session.flush()
            consumer = await session.consumer("queue://done", ack="client")
            for _ in range(50):  # acknowledged on the source's disk before it goes
                assert await consumer.ack(await consumer.receive(5.0)) == 1
            await consumer.close()

    run(fill())
    src.kill9()
    assert drainer(src, dst).returncode == 0
    target = f"tcp://127.0.0.1:{dst.port}"

    async def check() -> list[tuple[int, int]]:
        async with await connect(target) as conn:
            session = await conn.session()
            producer = session.producer("queue://orders")
            for i in range(100):  # a client resending after the scale-down: each already known
                await producer.send(Message(b"%d:" % i, duplicate_id=f"order-{i}"))
            done = session.producer("queue://done")
            for i in range(50):
                await done.send(Message(b"%d:" % i, duplicate_id=f"done-{i}"))
            await session.flush()
            assert (await conn.queue_info("done") or {}).get("message_count", 0) == 0, "consumed sends came back"
            consumer = await session.consumer("queue://orders")
            out = []
            while (m := await consumer.receive(1.0)) is not None:
                out.append((int(m.body.split(b":")[0]), m.delivery_count))
            return out

    got = run(check())
    exactly([n for n, _ in got], range(100))
    counts = dict(got)
    assert all(counts[n] >= 1 for n in range(10)), counts
    assert all(counts[n] == 0 for n in range(10, 100))


@pytest.mark.parametrize("policy", ["FAIL", "BLOCK"])
def test_a_full_target_address_makes_the_drain_wait_and_retry_then_finish(brokers, policy):
    """The target's address fills (FAIL or BLOCK): the refused messages stay at the origin and are
    sent again while a consumer on the target makes room; the drain then finishes, none lost."""
    src = brokers("src")
    dst = brokers("dst", f'[address_settings."orders"]\nmax_size_bytes = 60000\naddress_full_policy = "{policy}"\n')
    src.start()
    dst.start()
    run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://orders", range(2000), body=b"p" * 500))
    src.kill9()
    log = open(src.workdir / "drain.log", "w+")  # a file, not a pipe nobody reads meanwhile
    proc = subprocess.Popen([sys.executable, "-m", "petrel", "drain", "--data-dir", str(src.data_dir),
                             "--target", f"tcp://127.0.0.1:{dst.port}", "--progress", "none"],
                            stdout=log, stderr=subprocess.STDOUT, text=True)

    async def consume_slowly() -> list[int]:
        async with await connect(f"tcp://127.0.0.1:{dst.port}") as conn:
            session = await conn.session()
            consumer = await session.consumer("queue://orders")
            got = []
            while len(got) < 2000 and (m := await consumer.receive(30.0)) is not None:
                got.append(int(m.body.split(b":")[0]))
                if len(got) % 100 == 0:
                    await asyncio.sleep(0.05)  # slower than the drain could go
            return got

    got = run(consume_slowly(), timeout=300)
    proc.wait(60)
    log.seek(0)
    err = log.read()
    assert proc.returncode == 0, err
    exactly(got, range(2000))
    assert got == sorted(got), "the refusals changed the order"
    assert "refuses" in err and err.count("refuses") < 100  # it had to wait for room, and said so, briefly


def test_a_message_in_two_durable_subscriptions_reaches_both_after_a_drain(brokers):
    """One send with a duplicate ID, held by two subscriptions: each moves (found by chaos seed 3001:
    the second copy was dropped as a duplicate of the first)."""
    src, dst = brokers("src"), brokers("dst")
    src.start()
    dst.start()
    url = f"tcp://127.0.0.1:{src.port}"

    async def fill() -> None:
        async with await connect(url) as conn:
            for sub in ("sub.a", "sub.b"):
                await conn.create_queue(sub, "news", "MULTICAST", exists_ok=True)
            session = await conn.session()
            producer = session.producer("topic://news")
            for i in range(300):
                await producer.send(Message(b"%d:" % i, duplicate_id=f"news-{i}"))
            await session.flush()

    run(fill())
    src.kill9()
    assert drainer(src, dst).returncode == 0
    for sub in ("sub.a", "sub.b"):
        exactly(run(drain(f"tcp://127.0.0.1:{dst.port}", f"news::{sub}")), range(300))


def test_a_drained_cluster_node_strands_nothing_in_store_and_forward_queues(tmp_path):
    """Two clustered nodes. Copies on their way between them when node 1 dies: node 0's
    store-and-forward queue toward node 1 (for node 1's queue) and node 1's toward node 0. After
    node 1 is drained into node 0, every message is in a queue of node 0 a consumer reads."""
    from petrel.testing.cluster import make_cluster, start_all, wait_bindings

    nodes = make_cluster(tmp_path, 2, balancing="STRICT")
    n0, n1 = nodes
    try:
        start_all(nodes)

        async def prepare() -> None:
            # a queue on each node, each advertised to the other
            for node, name in ((n0, "zero"), (n1, "one")):
                async with await connect(f"tcp://127.0.0.1:{node.port}") as conn:
                    await conn.create_queue(name, "shared", "ANYCAST", exists_ok=True)

        run(prepare())
        wait_bindings(n0, "one")
        wait_bindings(n1, "zero")
        run(send_range(f"tcp://127.0.0.1:{n0.port}", "queue://shared", range(0, 1000)))  # STRICT: half forwarded
        n1.kill9()
        run(send_range(f"tcp://127.0.0.1:{n0.port}", "queue://shared", range(1000, 2000)))  # half stuck for node 1
        done = drainer(n1, n0, "--config", str(n1.config_path))
        assert done.returncode == 0, done.stderr
        got = run(drain(f"tcp://127.0.0.1:{n0.port}", "shared::zero")) + \
            run(drain(f"tcp://127.0.0.1:{n0.port}", "shared::one"))
        exactly(got, range(2000))
    finally:
        for node in nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.kill9()


def test_paged_copies_in_two_subscriptions_with_duplicate_ids_all_move(brokers):
    """Found by chaos seed 8004 (scale 3): a paging topic, two subscriptions, producers' duplicate IDs:
    the second subscription's paged copies were dropped as duplicates of the first's."""
    src = brokers("src", '[address_settings."#"]\nmax_size_bytes = 100000\npage_size_bytes = 65536\n')
    dst = brokers("dst")
    src.start()
    dst.start()
    url = f"tcp://127.0.0.1:{src.port}"

    async def fill() -> None:
        async with await connect(url) as conn:
            for sub in ("sub0", "sub1"):
                await conn.create_queue(sub, "feed", "MULTICAST", exists_ok=True)
            session = await conn.session()
            producer = session.producer("topic://feed")
            for i in range(2000):
                await producer.send(Message(b"%d:" % i + b"f" * 200, duplicate_id=f"d-{i}"))
            await session.flush()

    run(fill())
    src.kill9()
    assert drainer(src, dst).returncode == 0
    for sub in ("sub0", "sub1"):
        exactly(run(drain(f"tcp://127.0.0.1:{dst.port}", f"feed::{sub}")), range(2000))


def test_a_drain_into_a_secured_target_logs_in_as_the_cluster_and_leaves_no_users_file(brokers, tmp_path):
    """Security as shipped on the target (users, permissions, a cluster password of its own): the
    drainer logs in with that cluster password, moves everything, and, listening on nothing,
    writes no users file into the orphaned directory."""
    from petrel.testing.process import OWN_SECURITY

    src = brokers("src")
    dst = BrokerProcess(tmp_path / "dst", name="dst", env=OWN_SECURITY,
                        settings='cluster_password = "drain-secret"\n')
    src.start()
    dst.start()
    try:
        run(send_range(f"tcp://127.0.0.1:{src.port}", "queue://orders", range(300)))
        src.kill9()
        env = {k: v for k, v in os.environ.items() if k != "PETREL_SECURITY_ENABLED"}  # as shipped
        cmd = [sys.executable, "-m", "petrel", "drain", "--data-dir", str(src.data_dir),
               "--target", f"tcp://127.0.0.1:{dst.port}", "--progress", "json"]
        refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        assert refused.returncode == 1, refused.stderr  # the default cluster password is not the target's
        assert "login refused" in refused.stderr and "--password" in refused.stderr, refused.stderr
        done = subprocess.run([*cmd, "--password", "drain-secret"], capture_output=True, text=True, timeout=120,
                              env=env)
        assert done.returncode == 0, done.stderr
        assert events(done)[-1]["messages_moved"] == 300
        assert not (src.data_dir / "users.toml").exists()

        async def count() -> int:
            async with await connect(f"tcp://127.0.0.1:{dst.port}", user="ACTIVEMQ.CLUSTER.ADMIN.USER",
                                     password="drain-secret") as conn:
                return (await conn.queue_info("orders"))["message_count"]

        assert run(count()) == 300
    finally:
        dst.kill9()


def test_queues_named_before_the_name_rules_still_drain(brokers, tmp_path):
    """A directory written before names were checked (here a queue `legacy..orders` on an address
    `x*y`, made as such a broker would have) drains: the target takes the names as they are."""
    import petrel
    from petrel.core.message import Message as Stored, RoutingType

    data = tmp_path / "legacy"

    async def write_legacy() -> None:
        async with petrel.Broker(data_dir=str(data), port=-1, stomp_port=-1, http_port=-1, max_disk_usage=100,
                                 security_enabled=False) as broker:
            office = broker.office
            with office.names_from_elsewhere():
                office.create_queue("legacy..orders", "x*y", RoutingType.ANYCAST)
            done = asyncio.get_running_loop().create_future()
            for i in range(50):
                office.send(Stored(office.store.next_id(), "x*y", b"%d:" % i, durable=True), RoutingType.ANYCAST)
            office.store.sync(lambda: done.set_result(None))
            await done

    run(write_legacy())
    dst = brokers("dst")
    dst.start()
    done = subprocess.run([sys.executable, "-m", "petrel", "drain", "--data-dir", str(data),
                           "--target", f"tcp://127.0.0.1:{dst.port}", "--progress", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert events(done)[-1]["messages_moved"] == 50
    exactly(run(drain(f"tcp://127.0.0.1:{dst.port}", "x*y::legacy..orders")), range(50))
