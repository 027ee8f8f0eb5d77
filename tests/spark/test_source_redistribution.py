"""readStream.format("petrel") over a cluster that moves messages between nodes without a
scale-down, each message read once:

- redistribution (ON_DEMAND, redistribution_delay 0): a consumer that attaches on the other
  node does not make the node the query reads move the messages the query has read, or has
  still to read, so none is read twice at a new sequence number there. The query's cursor
  holds them: a queue read by cursors is never redistributed (core/redistribution.py), while
  a fresh send still goes to the remote consumer at once;
- the cluster bridge: a message routed to the other node waits in the sending node's
  store-and-forward queue (``$.petrel.sf.*``) until the bridge delivers it; a query whose
  ``queues`` is ``#`` does not read it there (the broker's own queues are never read), only
  where it arrives."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from petrel.client import Connection
from petrel.testing.cluster import make_cluster, start_all, wait_bindings, wait_connected
from petrel.testing.process import free_port, wait_for
from petrel.testing.proxy import TcpProxy

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cluster_queue  # noqa: E402
from cluster_queue import bodies, two_nodes  # noqa: E402
from source_job import run  # noqa: E402

QUEUE = "rd.q"


def send(conn: Connection, prefix: str, numbers: range) -> set[str]:
    return cluster_queue.send(conn, QUEUE, prefix, numbers)


@pytest.fixture
def cluster(tmp_path):
    yield from two_nodes(tmp_path, QUEUE, balancing="ON_DEMAND", redistribution_delay=0)


def test_a_consumer_on_another_node_does_not_make_the_read_node_redistribute(spark, tmp_path, cluster):
    nodes, (a, b) = cluster
    url = f"tcp://127.0.0.1:{nodes[0].port}"
    out, ck = tmp_path / "out", tmp_path / "ck"
    expected = send(a, "read", range(60))
    run(spark, url, QUEUE, str(out), str(ck))  # read and committed (the cursor one batch late)
    assert bodies(spark, out) == Counter(expected)
    expected |= send(a, "unread", range(40))
    assert a.queue_info(QUEUE)["message_count"] == 100  # what was read is still held, and the rest
    with b.session() as session:
        consumer = session.consumer(f"queue://{QUEUE}")
        wait_bindings(nodes[0], QUEUE, consumers=1)  # A knows B's consumer
        send(a, "routed", range(1))  # a fresh send to A goes to it (A's queue has none)
        got = consumer.receive(30)
        assert got is not None and got.body == b"routed-0", got
        got.ack()
        # A redistributes at once (delay 0) when it may; it holds all 100 for the query's cursor
        assert a.queue_info(QUEUE)["message_count"] == 100
        assert consumer.receive_no_wait() is None
    run(spark, url, QUEUE, str(out), str(ck))
    counts = bodies(spark, out)
    assert [m for m, n in counts.items() if n > 1] == []
    assert counts == Counter(expected)  # "routed-0" was taken by the consumer: absent, as on any read
    rows = spark.read.parquet(str(out)).select("node").collect()
    assert {r.node for r in rows} == {a.node_id}


def test_a_message_waiting_in_the_bridge_is_read_once_where_it_arrives(spark, tmp_path):
    """A's bridge to B goes through a proxy that is frozen: the sends STRICT routes to B wait in
    A's store-and-forward queue while a query reading every queue (``#``) runs; once the
    bridge delivers them, the query reads them on B, and only there."""
    listen = free_port()
    nodes = make_cluster(tmp_path / "cluster", 2, balancing="STRICT", connection_ttl=60000,
                         via={(0, 1): listen})
    proxy = TcpProxy("127.0.0.1", nodes[1].port, listen_port=listen).start()
    conns: list[Connection] = []
    try:
        start_all(nodes)
        wait_connected(nodes)
        conns = [Connection(f"tcp://127.0.0.1:{n.port}") for n in nodes]
        a, b = conns
        for c in conns:
            c.create_queue(QUEUE)
        wait_bindings(nodes[0], QUEUE)  # A routes to B's queue
        proxy.freeze()
        expected = send(a, "m", range(40))  # STRICT: every other one to B, stuck in A's bridge
        sf = [n for n in a.queue_names("#") if n.startswith("$.petrel.sf.")]
        assert sf and sum(a.queue_info(n)["message_count"] for n in sf) > 0
        url = f"tcp://127.0.0.1:{nodes[0].port}"
        out, ck = tmp_path / "out", tmp_path / "ck"
        run(spark, url, "#", str(out), str(ck), reconnectTimeout="10")
        proxy.heal()
        wait_for(lambda: sum(a.queue_info(n)["message_count"] for n in sf) == 0, 30)
        assert b.queue_info(QUEUE)["message_count"] > 0
        run(spark, url, "#", str(out), str(ck), reconnectTimeout="10")
        counts = bodies(spark, out)
        assert [m for m, n in counts.items() if n > 1] == []
        assert counts == Counter(expected)
        queues = {r.queue for r in spark.read.parquet(str(out)).select("queue").collect()}
        assert queues == {QUEUE}
    finally:
        for c in conns:
            c.close()
        proxy.stop()
        for n in nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.kill9()
