"""``petrel spark recover``: what a killed drain left in a data directory reaches the target once,
in queue order, with its properties' types (a recover the target refuses first fails with the
reason and duplicates nothing), and a second recover adds nothing; a copy of the
directory taken before a drain (what the drain moved is all still there) adds nothing either;
a live broker's directory, a dead target and wrong credentials are refused."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from petrel.cli import main
from petrel.client import Connection, Message, connect
from petrel.config import DEFAULT_CLUSTER_PASSWORD, DEFAULT_CLUSTER_USER
from petrel.spark.recover import RecoverFailed, plan_rounds, recover
from petrel.testing.ha import drain, exactly, send_range

pytestmark = pytest.mark.spark

SOURCE = ('min_large_message_size = 20000\n'
          '[address_settings."paged.#"]\nmax_size_bytes = 100000\npage_size_bytes = 32768\n')
TARGET_FULL = '[address_settings."paged.#"]\nmax_size_bytes = 60000\naddress_full_policy = "FAIL"\n'


def run(coro, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def petrel(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "petrel", *args], capture_output=True, text=True, timeout=timeout)


def counts(url: str, *queues: str) -> dict[str, int]:
    with Connection(url) as conn:
        return {q: (conn.queue_info(q) or {}).get("message_count", 0) for q in queues}


def test_plan_rounds_keeps_each_queue_in_order_and_each_round_within_the_window():
    rounds = plan_rounds({("d", 1): 25, ("d", 2): 5, ("d", 3): 0}, chunk=10, window=15)
    assert rounds == [[("d", 1, 0), ("d", 2, 0)], [("d", 1, 1)], [("d", 1, 2)]]


def test_recover_after_a_killed_drain_delivers_every_message_once(spark, broker_factory, tmp_path):
    src, dst = broker_factory(SOURCE, name="src").start(), broker_factory(TARGET_FULL, name="dst").start()
    source, target = f"tcp://127.0.0.1:{src.port}", f"tcp://127.0.0.1:{dst.port}"

    async def fill() -> None:
        await send_range(source, "queue://paged.orders", range(1500), body=b"o" * 200)  # paged
        await send_range(source, "queue://big", range(3), body=b"L" * 30_000)  # large messages
        async with await connect(source) as conn:
            session = await conn.session()
            typed = session.producer("queue://typed")
            for i in range(20):
                await typed.send(Message(b"%d:" % i, {"n": i, "even": i % 2 == 0}, priority=9 if i < 5 else 4))
            await session.flush()

    run(fill())
    src.kill9()

    # a drain that moves "big", part of "paged.orders" until the target refuses more, then is killed
    proc = subprocess.Popen([sys.executable, "-m", "petrel", "drain", "--data-dir", str(src.data_dir), "--target",
                             target, "--progress", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    for line in proc.stdout:
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("queue") == "paged.orders" and event.get("messages_moved", 0) > 3:
            break
    proc.kill()
    proc.wait(30)
    proc.stdout.close()
    moved = counts(target, "paged.orders", "big", "typed")
    assert moved["big"] == 3 and 0 < moved["paged.orders"] < 1500 and moved["typed"] == 0, moved
    # recover while the target still refuses: exit 1 with the reason; what it took stays there once
    with pytest.raises(RecoverFailed, match="refused"):
        recover(spark, [str(src.data_dir)], target, user=DEFAULT_CLUSTER_USER, password=DEFAULT_CLUSTER_PASSWORD)
    dst.stop()
    dst.config_path.write_text(dst.config_path.read_text().replace('"FAIL"', '"PAGE"'))  # room for the rest
    dst.start()

    done = CliRunner().invoke(main, ["spark", "recover", "--data-dir", str(src.data_dir), "--target", target,
                                     "--chunk", "400"])  # in this process: the test's SparkSession
    assert done.exit_code == 0, done.output
    assert "every one confirmed" in done.output and "paged.orders" in done.output
    after = counts(target, "paged.orders", "big", "typed")
    assert after == {"paged.orders": 1500, "big": 3, "typed": 20}

    # again: every message is already there
    report = recover(spark, [str(src.data_dir)], target, user=DEFAULT_CLUSTER_USER,
                     password=DEFAULT_CLUSTER_PASSWORD, chunk=400)
    assert report.complete and report.held == report.confirmed > 0, report
    assert counts(target, "paged.orders", "big", "typed") == after

    orders = run(drain(target, "queue://paged.orders"))
    exactly(orders, range(1500))
    assert orders == sorted(orders), "the queue's order changed"
    exactly(run(drain(target, "queue://big")), range(3))

    async def typed() -> list[Message]:
        async with await connect(target) as conn:
            session = await conn.session()
            consumer = await session.consumer("queue://typed")
            out = []
            while (m := await consumer.receive(1.0)) is not None:
                out.append(m)
            return out

    got = run(typed())
    assert [int(m.body.split(b":")[0]) for m in got] == list(range(20))  # priority 9 first, then in order
    assert all(m.properties["n"] == int(m.body.split(b":")[0]) and isinstance(m.properties["even"], bool)
               for m in got)


def test_what_a_drain_moved_but_did_not_remove_is_not_delivered_again(spark, broker_factory, tmp_path):
    """Two directories at once (two origins, one queue name): one is a copy taken before a drain
    that then moved everything, so all of its messages are on the target already."""
    one, two = broker_factory(name="one").start(), broker_factory(name="two").start()
    dst = broker_factory(name="dst").start()
    target = f"tcp://127.0.0.1:{dst.port}"
    run(send_range(f"tcp://127.0.0.1:{one.port}", "queue://orders", range(150), body=b"o" * 100))
    run(send_range(f"tcp://127.0.0.1:{two.port}", "queue://orders", range(150, 300), body=b"o" * 100))
    one.kill9()
    two.kill9()
    before = tmp_path / "before-drain"  # as a drain killed before it removed anything leaves it
    shutil.copytree(one.data_dir, before)
    assert petrel("drain", "--data-dir", str(one.data_dir), "--target", target).returncode == 0
    report = recover(spark, [str(before), str(two.data_dir)], target, user=DEFAULT_CLUSTER_USER,
                     password=DEFAULT_CLUSTER_PASSWORD, chunk=100)
    assert report.complete and report.held == 300 and len({q.node for q in report.queues}) == 2, report
    exactly(run(drain(target, "queue://orders")), range(300))


def test_recover_refuses_a_live_directory_a_dead_target_and_wrong_credentials(broker_factory):
    """Said before Spark starts, exit 1 with the reason."""
    live, gone = broker_factory(name="live").start(), broker_factory(name="gone").start()
    gone.kill9()
    done = petrel("spark", "recover", "--data-dir", str(live.data_dir), "--target", "tcp://127.0.0.1:1", timeout=60)
    assert done.returncode == 1 and "in use by another broker" in done.stderr, done.stderr
    done = petrel("spark", "recover", "--data-dir", str(gone.data_dir), "--target", "tcp://127.0.0.1:1", timeout=60)
    assert done.returncode == 1 and "cannot reach the target" in done.stderr, done.stderr
    done = petrel("spark", "recover", "--data-dir", str(gone.data_dir), "--target", f"tcp://127.0.0.1:{live.port}",
                  "--password", "wrong", timeout=60)
    assert done.returncode == 1 and "the target" in done.stderr, done.stderr
    assert counts(f"tcp://127.0.0.1:{live.port}", "x") == {"x": 0}
