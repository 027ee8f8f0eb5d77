"""Exactly once across a real 3-node cluster, as users met its failures (issue 9):

- an auto-acknowledging STOMP consumer on another node gets every forwarded and every
  redistributed message once (its ack used to delete the message inside the read that added
  it, before the add was in the journal: the link reset and node 1 dead-lettered them);
"""

from __future__ import annotations

import collections
import queue
import time

import pytest
import stomp
from cluster_harness import make_cluster, queue_count, start_all, wait_bindings, wait_connected
from conftest import Listener

from petrel.testing.process import wait_for

pytestmark = pytest.mark.system

N = 1000


def stomp_connect(node) -> tuple[stomp.Connection12, Listener]:
    conn = stomp.Connection12([("127.0.0.1", node.stomp_port)], heartbeats=(0, 0))
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect("guest", "guest", wait=True)
    return conn, listener


def send_receipted(node, destination: str, count: int) -> list[str]:
    """`count` persistent messages over STOMP, each with a receipt; returns the bodies once every
    receipt has arrived."""
    conn, listener = stomp_connect(node)
    try:
        bodies = [f"m-{i:05d}" for i in range(count)]
        for i, text in enumerate(bodies):
            conn.send(destination, text, headers={"persistent": "true", "receipt": f"r{i}"})
        receipts = set()
        deadline = time.monotonic() + 120
        while len(receipts) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"{count - len(receipts)} receipts missing"
            receipts.add(listener.receipts.get(timeout=left))
        assert listener.errors.empty(), listener.errors.get()
        return bodies
    finally:
        conn.disconnect()


def collect(listener: Listener, expected: int, timeout: float = 120) -> list[str]:
    """Bodies received until `expected` arrived (or `timeout`), then whatever follows within a
    short settle time (a duplicate would come right behind)."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        try:
            got.append(listener.messages.get(timeout=0.5).body)
        except queue.Empty:
            pass
    got += [f.body for f in listener.drain(idle=1.0)]
    return got


def dead_lettered(nodes) -> dict[str, int]:
    return {n.workdir.name: queue_count(n, "DLQ") or 0 for n in nodes}


def assert_once(got: list[str], sent: list[str]) -> None:
    twice = [b for b, n in collections.Counter(got).items() if n > 1]
    missing = set(sent) - set(got)
    assert not missing and not twice, (f"{len(set(got))} of {len(sent)} arrived; {len(missing)} missing "
                                       f"(e.g. {sorted(missing)[:3]}), {len(twice)} twice (e.g. {twice[:3]})")


@pytest.fixture
def three(tmp_path, stop_nodes):
    def make(**options):
        nodes = make_cluster(tmp_path, 3, **options)
        stop_nodes(nodes)
        start_all(nodes)
        wait_connected(nodes)
        return nodes

    return make


def test_an_auto_ack_consumer_on_another_node_gets_every_forwarded_message_once(three) -> None:
    nodes = three()
    conn, listener = stomp_connect(nodes[2])
    try:
        conn.subscribe("/queue/x", id="s1", ack="auto")
        wait_bindings(nodes[0], "x", consumers=1)
        sent = send_receipted(nodes[0], "/queue/x", N)
        got = collect(listener, N)
    finally:
        conn.disconnect()
    assert_once(got, sent)
    assert dead_lettered(nodes) == {n.workdir.name: 0 for n in nodes}
    assert "cannot delete unknown record" not in nodes[2].log()


def test_an_auto_ack_consumer_on_another_node_gets_every_redistributed_message_once(three) -> None:
    nodes = three(redistribution_delay=0)
    sent = send_receipted(nodes[0], "/queue/x", N)  # no consumer anywhere: they stay on node 1
    assert queue_count(nodes[0], "x") == N
    conn, listener = stomp_connect(nodes[2])
    try:
        conn.subscribe("/queue/x", id="s1", ack="auto")
        got = collect(listener, N)
    finally:
        conn.disconnect()
    assert_once(got, sent)
    wait_for(lambda: queue_count(nodes[0], "x") == 0, 10, 0.05, "messages left on node 1")
    assert dead_lettered(nodes) == {n.workdir.name: 0 for n in nodes}
    assert "cannot delete unknown record" not in nodes[2].log()
