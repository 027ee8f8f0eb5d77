"""readStream.format("petrel") over a node that died and is drained by ``petrel drain``, the
drainer killed part way: the batch that had read the node and was not committed runs again
before the drainer is run again. It must wait for the rest of the node's messages (the target
still says the node is migrating to it) and read each message once, not read the part that
had arrived and then skip the rest when it comes (the node's offset covers it). Also with the
target killed (kill -9) and started again before the drainer resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from petrel.client import Connection, Message
from petrel.testing.process import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cluster_queue import bodies, two_nodes  # noqa: E402
from source_job import run  # noqa: E402

QUEUE = "dr.q"
MOVED = 4000


@pytest.fixture
def cluster(tmp_path):
    # the moved messages large (each its own FORWARD) and a small duplicate-ID cache (the drainer
    # keeps at most half of it in flight): it moves them in many rounds and can be caught part way
    yield from two_nodes(tmp_path, QUEUE, balancing="OFF",
                         extra_top="id_cache_size = 200\nmin_large_message_size = 2048\n")


def drain_command(node, url: str) -> list[str]:
    return [sys.executable, "-m", "petrel", "drain", "--data-dir", str(node.data_dir), "--config",
            str(node.config_path), "--target", url, "--progress", "json"]


def drain_part_way(node, url: str, target) -> int:
    """Run the drainer and kill it (SIGKILL) once the target holds some of the moved messages,
    not all; how many it held then."""
    before = target.queue_info(QUEUE)["message_count"]
    proc = subprocess.Popen(drain_command(node, url), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    moved = 0
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            moved = target.queue_info(QUEUE)["message_count"] - before
            if moved > 0:
                break
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return target.queue_info(QUEUE)["message_count"] - before if moved else 0


def send(conn, prefix: str, numbers: range, size: int = 0) -> set[str]:
    """`cluster_queue.send`, the bodies padded to `size` bytes after a ``|``."""
    with conn.session() as session:
        producer = session.producer(f"queue://{QUEUE}")
        for i in numbers:
            producer.send(Message(f"{prefix}-{i}|".encode().ljust(size, b"x"), durable=True))
        session.flush()
    return {f"{prefix}-{i}" for i in numbers}


def names(spark, out: Path) -> Counter:
    return Counter(body.split("|")[0] for body in bodies(spark, out).elements())


def test_a_batch_run_again_after_a_drain_killed_part_way_waits_for_the_rest(spark, tmp_path, cluster):
    batch_run_again_after_a_drain_killed_part_way(spark, tmp_path, cluster, restart_target=False)


def test_the_target_restarted_meanwhile_still_knows_the_drain_is_not_done(spark, tmp_path, cluster):
    """As above, the target killed (kill -9) and started again between the drainer's kill and
    its resume: it must still say the node is migrating to it (the mark is in its store)."""
    batch_run_again_after_a_drain_killed_part_way(spark, tmp_path, cluster, restart_target=True)


def batch_run_again_after_a_drain_killed_part_way(spark, tmp_path, cluster, *, restart_target: bool) -> None:
    nodes, (stay, leave) = cluster
    url = f"tcp://127.0.0.1:{nodes[0].port}"
    out, ck = tmp_path / "out", tmp_path / "ck"
    expected = send(stay, "stay", range(30)) | send(leave, "read", range(60))
    run(spark, url, QUEUE, str(out), str(ck))
    expected |= send(leave, "uncommitted", range(MOVED), size=4096)
    run(spark, url, QUEUE, str(out), str(ck))
    # the last batch (the leaving node's MOVED) as if the query died before committing it
    batch = max(int(p.name) for p in (ck / "commits").glob("[0-9]*"))
    for log in (ck / "commits", out / "_spark_metadata"):
        for name in (str(batch), f".{batch}.crc"):
            (log / name).unlink(missing_ok=True)
    leaving = leave.node_id
    nodes[1].kill9()
    wait_for(lambda: all(m.node_id != leaving for m in stay.topology), 30)
    moved = drain_part_way(nodes[1], url, stay)
    if not 0 < moved < MOVED:
        pytest.skip(f"the drainer was not caught part way ({moved} of {MOVED} moved)")
    if restart_target:
        nodes[0].kill9()
        nodes[0].start()
        stay = Connection(url)  # (the fixture's is gone with the process; closed below)
        assert stay.queue_info(QUEUE)["migrating_from"] == [leaving], "the restarted target forgot the drain"

    def resume() -> None:
        """The drainer again once the replayed batch is committed (what a source that does not
        wait does) or after 20 s (a source that waits is waiting then)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (ck / "commits" / str(batch)).exists():
            time.sleep(0.05)
        done = subprocess.run(drain_command(nodes[1], url), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    resumer = threading.Thread(target=resume)
    resumer.start()
    run(spark, url, QUEUE, str(out), str(ck), reconnectTimeout="120")
    resumer.join(150)
    expected |= send(stay, "after", range(10))
    assert stay.queue_info(QUEUE)["migrating_from"] == []  # done: closed
    if restart_target:
        stay.close()
    run(spark, url, QUEUE, str(out), str(ck))
    got = names(spark, out)
    assert [b for b, n in got.items() if n > 1] == []
    missing = set(expected) - set(got)
    assert not missing, f"{len(missing)} never read, e.g. {sorted(missing)[:3]} ({moved} moved before the kill)"
    assert got == Counter(expected)
