"""A durable topic subscription on a node that is down or cut off (issue 9, "Trust").

A producer on node A publishes persistent messages to a topic, receipted, while the node that
holds a durable subscription's queue is killed (kill -9 or SIGTERM) or its cluster link from A
is cut. Every receipted message must reach that subscription exactly once when its node is
back: A keeps the peer's durable bindings while its bridge reconnects, so their copies wait in
A's store-and-forward queue (as Artemis does).
"""

from __future__ import annotations

import pytest
from cluster_harness import cluster_view, make_cluster, queue_count, start_all, wait_bindings, wait_connected
from conftest import Listener
from test_cluster_exactly_once import assert_once, collect, send_receipted
from test_cluster_faults import bridge_to, wait_bridge

import stomp
from petrel.testing.process import free_port, wait_for
from petrel.testing.proxy import TcpProxy

pytestmark = pytest.mark.system

N = 500
CLIENT, SUB = "audit-app", "audit"
QUEUE = f"{CLIENT}.{SUB}"


def subscribe(node) -> tuple[stomp.Connection12, Listener]:
    conn = stomp.Connection12([("127.0.0.1", node.stomp_port)], heartbeats=(0, 0))
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect("guest", "guest", wait=True, headers={"client-id": CLIENT})
    conn.subscribe("/topic/events", id="1", ack="client-individual",
                   headers={"durable-subscription-name": SUB})
    return conn, listener


def receive_all(node, sent: list[str]) -> None:
    conn, listener = subscribe(node)
    try:
        got = []
        for frame in _frames(listener, len(sent)):
            got.append(frame.body)
            conn.ack(frame.headers["ack"], receipt=f"a{len(got)}")
            listener.receipts.get(timeout=30)
    finally:
        conn.disconnect()
    assert_once(got, sent)


def _frames(listener: Listener, expected: int, timeout: float = 120):
    import queue
    import time

    deadline = time.monotonic() + timeout
    count = 0
    while time.monotonic() < deadline:
        try:
            frame = listener.messages.get(timeout=1.5 if count >= expected else 0.5)
        except queue.Empty:
            if count >= expected:
                return
            continue
        count += 1
        yield frame


@pytest.mark.parametrize(("fault", "balancing"), [("kill9", "ON_DEMAND"), ("sigterm", "ON_DEMAND"),
                                                   ("kill9", "STRICT")])
def test_a_durable_subscription_on_a_node_that_is_down_gets_every_receipted_message(
        tmp_path, stop_nodes, fault, balancing) -> None:
    nodes = make_cluster(tmp_path, 3, balancing=balancing)
    stop_nodes(nodes)
    start_all(nodes)
    wait_connected(nodes)
    a, c = nodes[0], nodes[2]
    c_id = cluster_view(c)["node_id"]
    conn, _ = subscribe(c)
    conn.disconnect()  # the subscription stays, with no consumer
    wait_bindings(a, QUEUE)
    c.kill9() if fault == "kill9" else c.stop()
    wait_bridge(a, c_id, up=False)
    sent = send_receipted(a, "/topic/events", N)
    assert bridge_to(a, c_id)["backlog"] == N  # waiting for C in A's store-and-forward queue
    c.start()
    wait_for(lambda: bridge_to(a, c_id)["backlog"] == 0, 60, 0.1, "A's store-and-forward queue did not empty")
    receive_all(c, sent)
    assert queue_count(c, QUEUE) == 0


def test_a_durable_subscription_behind_a_cut_link_gets_every_receipted_message(tmp_path, teardown) -> None:
    listen = free_port()
    a, c = make_cluster(tmp_path, 2, via={(0, 1): listen}, connection_ttl=1000)
    proxy = TcpProxy("127.0.0.1", c.port, listen_port=listen).start()
    teardown(proxy)
    teardown(a)
    teardown(c)
    start_all([a, c])
    wait_connected([a, c])
    c_id = cluster_view(c)["node_id"]
    conn, _ = subscribe(c)
    conn.disconnect()
    wait_bindings(a, QUEUE)
    proxy.cut()
    wait_bridge(a, c_id, up=False)
    sent = send_receipted(a, "/topic/events", N)
    assert bridge_to(a, c_id)["backlog"] == N
    proxy.heal()
    wait_bridge(a, c_id, up=True)
    wait_for(lambda: bridge_to(a, c_id)["backlog"] == 0, 60, 0.1, "A's store-and-forward queue did not empty")
    receive_all(c, sent)
    assert queue_count(c, QUEUE) == 0


def test_a_restarted_node_routes_to_a_durable_subscription_of_a_node_it_cannot_reach_yet(
        tmp_path, teardown) -> None:
    # chaos seed 29: the producers' node restarted while its link to the subscriber's node was
    # frozen; it knew no remote binding until its bridge joined again, and 27 receipted messages
    # published meanwhile never reached the durable subscription.
    listen = free_port()
    a, c = make_cluster(tmp_path, 2, via={(0, 1): listen}, connection_ttl=1000)
    proxy = TcpProxy("127.0.0.1", c.port, listen_port=listen).start()
    teardown(proxy)
    teardown(a)
    teardown(c)
    start_all([a, c])
    wait_connected([a, c])
    c_id = cluster_view(c)["node_id"]
    conn, _ = subscribe(c)
    conn.disconnect()
    wait_bindings(a, QUEUE)
    proxy.cut()
    a.stop()
    a.start()  # its bridge to C cannot join: it knows C's subscription from before the restart only
    assert [b["via"] for b in cluster_view(a)["remote_bindings"] if b["name"] == QUEUE] == [c_id]
    sent = send_receipted(a, "/topic/events", N)
    proxy.heal()
    wait_bridge(a, c_id, up=True)
    wait_for(lambda: bridge_to(a, c_id)["backlog"] == 0, 60, 0.1, "A's store-and-forward queue did not empty")
    receive_all(c, sent)
    assert queue_count(c, QUEUE) == 0
