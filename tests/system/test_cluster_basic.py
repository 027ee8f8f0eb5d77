"""Two and three real nodes: joining, remote bindings, ON_DEMAND forwarding, multicast."""

from __future__ import annotations

import pytest
from cluster_harness import cluster_view, make_cluster, start_all, wait_bindings, wait_connected

from petrel.client import Connection

pytestmark = pytest.mark.system



def drain(consumer, idle=1.0):
    out = []
    while (m := consumer.receive(idle)) is not None:
        out.append(m.body)
    return out


def test_on_demand_forwards_to_the_node_with_the_consumer(tmp_path, stop_nodes) -> None:
    a, b = make_cluster(tmp_path, 2)
    stop_nodes([a, b])
    start_all([a, b])
    wait_connected([a, b])
    with Connection(f"tcp://127.0.0.1:{b.port}") as cb, Connection(f"tcp://127.0.0.1:{a.port}") as ca:
        consumer = cb.session().consumer("queue://orders")
        wait_bindings(a, "orders", consumers=1)
        session = ca.session()
        producer = session.producer("queue://orders")
        for i in range(200):
            producer.send(b"%d" % i, durable=True)
        session.flush()
        got = drain(consumer)
    assert sorted(got) == sorted(b"%d" % i for i in range(200))
    view = cluster_view(a)
    assert view["messages_forwarded"] >= 200
    assert [m["node_id"] for m in view["members"] if not m["self"]] == [cluster_view(b)["node_id"]]


def test_multicast_reaches_every_subscription_in_the_cluster_once(tmp_path, stop_nodes) -> None:
    nodes = make_cluster(tmp_path, 3)
    stop_nodes(nodes)
    start_all(nodes)
    wait_connected(nodes)
    conns = [Connection(f"tcp://127.0.0.1:{n.port}") for n in nodes]
    try:
        subs = [c.session().consumer("topic://news") for c in conns]
        subs.append(conns[2].session().consumer("topic://news"))
        for node in nodes:
            wait_for_subscriptions(node, expected=len(subs) - (2 if node is nodes[2] else 1))
        session = conns[0].session()
        producer = session.producer("topic://news")
        for i in range(50):
            producer.send(b"%d" % i, durable=True)
        session.flush()
        for sub in subs:
            assert drain(sub) == [b"%d" % i for i in range(50)]
    finally:
        for c in conns:
            c.close()


def wait_for_subscriptions(node, expected: int) -> None:
    from petrel.testing.process import wait_for

    def ready():
        bindings = cluster_view(node)["remote_bindings"]
        return len([b for b in bindings if b["address"] == "news"]) >= expected

    wait_for(ready, 30, 0.05, "subscriptions not advertised")


def test_queue_creation_consumers_filters_and_deletion_reach_the_other_node(tmp_path, stop_nodes) -> None:
    from petrel.testing.process import wait_for

    a, b = make_cluster(tmp_path, 2)
    stop_nodes([a, b])
    start_all([a, b])
    wait_connected([a, b])

    def binding():
        found = [x for x in cluster_view(a)["remote_bindings"] if x["name"] == "audit"]
        return found[0] if found else None

    with Connection(f"tcp://127.0.0.1:{b.port}") as cb:
        cb.create_queue("audit", "events", routing_type="MULTICAST", filter="level = 'high'")
        seen = wait_for(binding, 30, 0.05, "the queue created on b is not known on a")
        assert (seen["address"], seen["routing_type"], seen["filter"], seen["consumer_count"]) == (
            "events", "MULTICAST", "level = 'high'", 0)
        consumer = cb.session().consumer("audit", filter="source = 'web'")
        wait_for(lambda: (binding() or {}).get("consumer_count") == 1, 30, 0.05, "the consumer is not counted on a")
        consumer.close()
        wait_for(lambda: (binding() or {}).get("consumer_count") == 0, 30, 0.05, "the closed consumer still counts")
        cb.delete_queue("audit")
        wait_for(lambda: binding() is None, 30, 0.05, "the deleted queue is still bound on a")
