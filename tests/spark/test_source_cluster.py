"""readStream.format("petrel") over a two-node cluster reached through one node: the other is
found in the topology, each node's queue is read from that node with offsets of its own
("<node>/<queue>"), and each node's cursor is created there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from petrel.client import Connection, Message
from petrel.testing.cluster import make_cluster, start_all, wait_connected

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from source_job import run  # noqa: E402


def test_every_node_of_a_cluster_is_read_from_itself_with_offsets_per_node(spark, tmp_path):
    nodes = make_cluster(tmp_path / "cluster", 2, balancing="OFF")
    try:
        start_all(nodes)
        wait_connected(nodes)
        conns = [Connection(f"tcp://127.0.0.1:{n.port}") for n in nodes]
        expected = set()
        for i, conn in enumerate(conns):
            conn.create_queue("clustered.q")
            with conn.session() as session:
                producer = session.producer("queue://clustered.q")
                for j in range(20 + 10 * i):
                    body = f"node{i}-{j}"
                    producer.send(Message(body.encode(), durable=True))
                    expected.add(body)
                session.flush()
        ids = [c.node_id for c in conns]
        counts = [c.queue_info("clustered.q")["message_count"] for c in conns]
        assert counts == [20, 30]  # nothing moved between the nodes
        out, ck = tmp_path / "out", tmp_path / "ck"
        run(spark, f"tcp://127.0.0.1:{nodes[0].port}", "clustered.q", str(out), str(ck))
        rows = spark.read.parquet(str(out)).collect()
        assert sorted(r.body.decode() for r in rows) == sorted(expected)
        assert {r.node for r in rows if r.body.startswith(b"node1-")} == {ids[1]}
        assert {r.node for r in rows if r.body.startswith(b"node0-")} == {ids[0]}
        last = json.loads(sorted((ck / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))[-1]
                          .read_text().splitlines()[-1])
        assert last == {f"{n}/clustered.q": c.queue_seqs("clustered.q").tail_seq
                        for n, c in sorted(zip(ids, conns))}
        assert all(c.cursor("clustered.q", "spark").node_id == n for n, c in zip(ids, conns))
        for c in conns:
            c.close()
    finally:
        for n in nodes:
            n.kill9()
