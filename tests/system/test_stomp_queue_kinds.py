"""Message groups, exclusive, last-value and ring queues, and diverts, through STOMP on a real broker."""

from __future__ import annotations

import pytest

from petrel.testing.process import wait_for

from conftest import connect

pytestmark = pytest.mark.system

SETTINGS = """
[[queues]]
name = "prices"
last_value_key = "symbol"

[[queues]]
name = "exclusive.jobs"
exclusive = true

[[queues]]
name = "orders"

[[queues]]
name = "orders.audit"

[[queues]]
name = "orders.big"

[[diverts]]
name = "audit-all"
address = "orders"
forwarding_address = "orders.audit"

[[diverts]]
name = "big-orders"
address = "orders"
forwarding_address = "orders.big"
exclusive = true
filter = "amount > 1000"

[[queues]]
name = "Consumer.A.VirtualTopic.News"
address = "VirtualTopic.News"
routing_type = "MULTICAST"

[[queues]]
name = "Consumer.B.VirtualTopic.News"
address = "VirtualTopic.News"
routing_type = "MULTICAST"
"""


def send_all(conn, listener, dest, items):
    for i, (body, headers) in enumerate(items):
        conn.send(dest, body, headers={"persistent": "true", "receipt": f"{dest}-{i}", **headers})
    for _ in items:
        listener.receipts.get(timeout=10)


def test_group_order_kept_when_consumer_closes_mid_group(broker):
    conn, listener = connect(broker)
    c1, l1 = connect(broker)
    c1.subscribe("/queue/grp", id="1", ack="client-individual")
    c2, l2 = connect(broker)
    c2.subscribe("/queue/grp", id="1", ack="client-individual")
    send_all(conn, listener, "/queue/grp", [(f"G{i}", {"JMSXGroupID": "G"}) for i in range(6)])
    # all of group G went to one consumer (the receipts can come before it has them); it acks two and leaves
    wait_for(lambda: not (l1.messages.empty() and l2.messages.empty()), 10, 0.01, "group G reached no consumer")
    first = l1 if not l1.messages.empty() else l2
    owner = c1 if first is l1 else c2
    other_listener = l2 if first is l1 else l1
    got = [first.get() for _ in range(6)]
    assert [f.body for f in got] == [f"G{i}" for i in range(6)]
    owner.ack(got[0].headers["ack"])
    owner.ack(got[1].headers["ack"])
    owner.disconnect()
    moved = [other_listener.get().body for _ in range(4)]
    assert moved == ["G2", "G3", "G4", "G5"]
    for c in (conn, c1, c2):
        if c is not owner:
            c.disconnect()


def test_last_value_queue_across_restart(broker_factory):
    b = broker_factory(SETTINGS).start()
    conn, listener = connect(b)
    send_all(conn, listener, "/queue/prices", [
        ("ACME 1", {"symbol": "ACME"}), ("INIT 1", {"symbol": "INIT"}), ("ACME 2", {"symbol": "ACME"}),
    ])
    conn.disconnect()
    b.kill9()
    b.start()
    conn, listener = connect(b)
    send_all(conn, listener, "/queue/prices", [("INIT 2", {"symbol": "INIT"})])
    conn.subscribe("/queue/prices", id="1")
    got = sorted(listener.get().body for _ in range(2))
    assert got == ["ACME 2", "INIT 2"]
    assert listener.nothing_within(0.3)
    conn.disconnect()


def test_divert_with_filter_and_composite_copy(broker_factory):
    b = broker_factory(SETTINGS).start()
    conn, listener = connect(b)
    send_all(conn, listener, "/queue/orders", [("small", {"amount": "10"}), ("big", {"amount": "5000"})])
    conn.subscribe("/queue/orders", id="1")
    assert listener.get().body == "small"
    assert listener.nothing_within(0.3)
    conn.subscribe("/queue/orders.big", id="2")
    assert listener.get().body == "big"
    conn.subscribe("/queue/orders.audit", id="3")
    assert sorted(listener.get().body for _ in range(2)) == ["big", "small"]
    conn.disconnect()


def test_exclusive_queue_and_virtual_topic(broker_factory):
    b = broker_factory(SETTINGS).start()
    c1, l1 = connect(b)
    c1.subscribe("/queue/exclusive.jobs", id="1")
    c2, l2 = connect(b)
    c2.subscribe("/queue/exclusive.jobs", id="1")
    p, lp = connect(b)
    send_all(p, lp, "/queue/exclusive.jobs", [(f"j{i}", {}) for i in range(3)])
    assert [l1.get().body for _ in range(3)] == ["j0", "j1", "j2"]
    assert l2.nothing_within(0.3)
    # virtual topic: a topic send reaches each consumer group's queue once
    send_all(p, lp, "/topic/VirtualTopic.News", [("headline", {})])
    c1.subscribe("/queue/Consumer.A.VirtualTopic.News", id="2")
    c2.subscribe("/queue/Consumer.B.VirtualTopic.News", id="2")
    assert l1.get().body == "headline"
    assert l2.get().body == "headline"
    for c in (c1, c2, p):
        c.disconnect()
