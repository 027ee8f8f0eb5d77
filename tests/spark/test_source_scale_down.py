"""readStream.format("petrel") over a cluster that loses a node: the node's messages move to the
node that stays (a live scale-down, or `petrel drain` of the dead node's directory) and get
new sequence numbers there, yet every message reaches the query's output exactly once. The
messages the query had read on the leaving node are skipped where they arrive; those it had
not read are read there once; a batch that read the node but was not committed is read again,
once, from where its messages went."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from petrel.client import Connection
from petrel.testing.process import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cluster_queue  # noqa: E402
from cluster_queue import bodies, two_nodes  # noqa: E402
from source_job import run  # noqa: E402

QUEUE = "sd.q"


def send(conn: Connection, prefix: str, numbers: range) -> set[str]:
    return cluster_queue.send(conn, QUEUE, prefix, numbers)


def last_batch(ck: Path) -> int:
    return max(int(p.name) for p in (ck / "commits").glob("[0-9]*"))


def without_node(conn: Connection, node_id: str) -> bool:
    return all(m.node_id != node_id for m in conn.topology)


@pytest.fixture
def cluster(tmp_path):
    yield from two_nodes(tmp_path, QUEUE, balancing="OFF")


def first_read(spark, tmp_path: Path, cluster) -> tuple[str, Path, Path, set[str]]:
    """30 messages on the staying node, 60 on the leaving one, all read by a first run of the
    query: its URL (the staying node), output, checkpoint, and the bodies sent."""
    nodes, (stay, leave) = cluster
    url = f"tcp://127.0.0.1:{nodes[0].port}"
    out, ck = tmp_path / "out", tmp_path / "ck"
    expected = send(stay, "stay", range(30)) | send(leave, "read", range(60))
    run(spark, url, QUEUE, str(out), str(ck))
    assert bodies(spark, out) == Counter(expected)
    return url, out, ck, expected


def scale_down(node, target: str) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{node.http_port}/api/v1/broker/scale-down",
                                     data=json.dumps({"target": target}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 202


def test_a_live_scale_down_after_a_committed_read_delivers_each_message_once(spark, tmp_path, cluster):
    nodes, (stay, leave) = cluster
    url, out, ck, expected = first_read(spark, tmp_path, cluster)  # the leaving node's 60 read and committed
    expected |= send(leave, "unread", range(40))  # on the leaving node, not read yet
    assert leave.queue_info(QUEUE)["message_count"] == 100  # no batch after the first: no cursor moved
    leaving = leave.node_id
    scale_down(nodes[1], url)
    assert nodes[1].proc.wait(60) == 0, nodes[1].log()
    assert stay.queue_info(QUEUE)["message_count"] == 30 + 100  # every message of the leaving node moved
    wait_for(lambda: without_node(stay, leaving), 30)
    run(spark, url, QUEUE, str(out), str(ck))
    got = bodies(spark, out)
    assert [b for b, n in got.items() if n > 1] == []
    assert got == Counter(expected)
    rows = spark.read.parquet(str(out)).where("body LIKE 'unread-%'").collect()
    assert {r.node for r in rows} == {stay.node_id}  # read once, where they moved
    assert all(json.loads(r.properties["_PETREL_ORIGIN"])[0][:2] == [leaving, QUEUE] for r in rows)


def test_a_batch_not_committed_before_the_node_died_and_was_drained_is_read_again_once(spark, tmp_path, cluster):
    nodes, (stay, leave) = cluster
    url, out, ck, expected = first_read(spark, tmp_path, cluster)
    expected |= send(leave, "uncommitted", range(40)) | send(stay, "stay-late", range(5))
    run(spark, url, QUEUE, str(out), str(ck))
    assert bodies(spark, out) == Counter(expected)
    # the last batch (the leaving node's 40, the staying node's 5) as if the query died after
    # its tasks wrote their files, before the sink and the checkpoint committed it
    batch = last_batch(ck)
    for log in (ck / "commits", out / "_spark_metadata"):
        for name in (str(batch), f".{batch}.crc"):
            (log / name).unlink(missing_ok=True)
    assert bodies(spark, out) == Counter(expected - {f"uncommitted-{i}" for i in range(40)}
                                         - {f"stay-late-{i}" for i in range(5)})
    # the cursor passed the first batch (committed one batch late): the broker removed it
    held = (stay.queue_info(QUEUE)["message_count"], leave.queue_info(QUEUE)["message_count"])
    assert held == (5, 40)
    leaving = leave.node_id
    nodes[1].kill9()
    wait_for(lambda: without_node(stay, leaving), 30)
    drained = subprocess.run([sys.executable, "-m", "petrel", "drain", "--data-dir", str(nodes[1].data_dir),
                              "--config", str(nodes[1].config_path), "--target", url, "--progress", "none"],
                             capture_output=True, text=True, timeout=120)
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert stay.queue_info(QUEUE)["message_count"] == 5 + 40
    expected |= send(stay, "after", range(10))
    run(spark, url, QUEUE, str(out), str(ck))
    got = bodies(spark, out)
    assert [b for b, n in got.items() if n > 1] == []
    assert got == Counter(expected)
    rows = spark.read.parquet(str(out)).where("body LIKE 'uncommitted-%'").collect()
    assert {r.node for r in rows} == {stay.node_id}  # the replayed batch read them where they went


def test_a_node_scaled_down_while_a_running_batch_reads_it_is_read_once_from_where_it_moved(spark, tmp_path,
                                                                                             cluster):
    """The batch is planned while the node is a member; it scales down as the batch's tasks (one
    per 100 sequence numbers) read it: the tasks that cannot reach it any more read the rest of
    their range from the staying node once the migration is over, and the query goes on."""
    nodes, (stay, leave) = cluster
    url, out, ck, expected = first_read(spark, tmp_path, cluster)
    expected |= send(leave, "inflight", range(6000)) | send(stay, "stay-late", range(10))

    def scale_down_once_planned() -> None:
        deadline = time.monotonic() + 120
        while not (ck / "offsets" / "1").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        scale_down(nodes[1], url)

    trigger = threading.Thread(target=scale_down_once_planned)
    trigger.start()
    run(spark, url, QUEUE, str(out), str(ck), messagesPerPartition="100", reconnectTimeout="120")
    trigger.join(130)
    assert nodes[1].proc.wait(60) == 0, nodes[1].log()
    got = bodies(spark, out)
    assert [b for b, n in got.items() if n > 1] == []
    assert got == Counter(expected)
    moved = spark.read.parquet(str(out)).where(f"body LIKE 'inflight-%' AND node = '{stay.node_id}'").count()
    print(f"inflight rows read on the staying node: {moved} of 6000")
    if moved == 0:
        pytest.skip("the batch had read the whole node before it scaled down: no task read from where it moved")
