"""Message load balancing on real 3-node clusters (STRICT, ON_DEMAND, OFF,
OFF_WITH_REDISTRIBUTION) and a 4-node chain. Every message body is unique, and each test
checks that every message sent is consumed exactly once across the cluster, with nothing
left in any queue or store-and-forward queue."""

from __future__ import annotations

from collections import Counter

import pytest
from cluster_harness import (
    backlog,
    cluster_view,
    make_cluster,
    queue_count,
    start_all,
    stop_all,
    wait_bindings,
    wait_connected,
)

from petrel.client import Connection
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system

DEADLINE = 30
N = 30


@pytest.fixture
def cluster(tmp_path):
    """make(n, **options) -> (nodes, connections): a started, connected cluster with one CORE
    connection per node; stopped after the test."""
    nodes, conns = [], []

    def make(n: int = 3, **options):
        nodes.extend(make_cluster(tmp_path, n, **options))
        start_all(nodes)
        if options.get("chain"):
            wait_connected(nodes[:-1], peers=1, timeout=DEADLINE)
        else:
            wait_connected(nodes, timeout=DEADLINE)
        conns.extend(Connection(f"tcp://127.0.0.1:{node.port}") for node in nodes)
        return nodes, conns

    yield make
    for conn in conns:
        conn.close()
    stop_all(nodes)


def send(conn, queue: str, tag: str, n: int = N) -> list[bytes]:
    """`n` durable messages with unique bodies, confirmed by the broker."""
    bodies = [f"{tag}-{i}".encode() for i in range(n)]
    session = conn.session()
    producer = session.producer(f"queue://{queue}")
    for body in bodies:
        producer.send(body, durable=True)
    session.flush()
    session.close()
    return bodies


def collect(consumers, expected: list[bytes]) -> list[list[bytes]]:
    """Receive from every consumer until `expected` arrived in all; then check each message
    came exactly once and nothing more comes. Returns the bodies each consumer got."""
    got: list[list[bytes]] = [[] for _ in consumers]

    def everything():
        for i, consumer in enumerate(consumers):
            while (m := consumer.receive_no_wait()) is not None:
                got[i].append(m.body)
        return sum(map(len, got)) >= len(expected)

    wait_for(everything, DEADLINE, 0.02, f"{len(expected)} messages not consumed across the cluster")
    for i, consumer in enumerate(consumers):
        while (m := consumer.receive(0.1)) is not None:
            got[i].append(m.body)
    everyone = Counter(b for bodies in got for b in bodies)
    assert [b for b, n in everyone.items() if n > 1] == [], "messages consumed more than once"
    assert set(everyone) == set(expected)
    return got


def settled(nodes, queue: str) -> None:
    """Nothing left of `queue` anywhere: no message in it and none on its way in a bridge."""
    def empty():
        return all(not queue_count(n, queue) and backlog(n) == 0 for n in nodes)

    wait_for(empty, DEADLINE, 0.05, f"messages for {queue} are left in the cluster")


def counts(nodes, queue: str) -> list[int | None]:
    return [queue_count(n, queue) for n in nodes]


def create_everywhere(conns, queue: str) -> None:
    for conn in conns:
        conn.create_queue(queue, exists_ok=True)


def test_strict_round_robins_over_every_queue_without_consumers(cluster) -> None:
    nodes, conns = cluster(balancing="STRICT")
    create_everywhere(conns, "strict.q")
    wait_bindings(nodes[0], "strict.q", count=2, timeout=DEADLINE)
    bodies = send(conns[0], "strict.q", "strict")
    wait_for(lambda: counts(nodes, "strict.q") == [N // 3] * 3, DEADLINE, 0.05,
             f"STRICT did not spread {N} messages evenly: {counts(nodes, 'strict.q')}")
    assert backlog(nodes[0]) == 0
    assert cluster_view(nodes[0])["messages_forwarded"] == 2 * N // 3
    consumers = [c.session().consumer("queue://strict.q") for c in conns]
    got = collect(consumers, bodies)
    assert [len(g) for g in got] == [N // 3] * 3
    settled(nodes, "strict.q")


def test_on_demand_forwards_only_to_nodes_with_consumers(cluster) -> None:
    nodes, conns = cluster(balancing="ON_DEMAND")
    node0 = nodes[0]

    # No consumer anywhere: everything stays where it was sent.
    create_everywhere(conns, "od.none")
    wait_bindings(node0, "od.none", count=2, timeout=DEADLINE)
    bodies = send(conns[0], "od.none", "none")
    assert counts(nodes, "od.none") == [N, 0, 0]
    assert cluster_view(node0)["messages_forwarded"] == 0
    collect([conns[0].session().consumer("queue://od.none")], bodies)
    settled(nodes, "od.none")

    # A consumer on node1 only: everything goes to node1.
    create_everywhere(conns, "od.one")
    consumer1 = conns[1].session().consumer("queue://od.one")
    wait_bindings(node0, "od.one", count=2, timeout=DEADLINE)
    wait_bindings(node0, "od.one", consumers=1, timeout=DEADLINE)
    bodies = send(conns[0], "od.one", "one")
    others = [conns[i].session().consumer("queue://od.one") for i in (0, 2)]
    got = collect([consumer1], bodies)
    assert len(got[0]) == N
    assert all(c.receive_no_wait() is None for c in others)
    settled(nodes, "od.one")

    # When the consumers leave, node0 hears of it and keeps what is sent next.
    for c in (consumer1, *others):
        c.close()

    def no_remote_consumers():
        return [b["consumer_count"] for b in cluster_view(node0)["remote_bindings"] if b["name"] == "od.one"] == [0, 0]

    wait_for(no_remote_consumers, DEADLINE, 0.05, "node0 still sees consumers of od.one on other nodes")
    forwarded = cluster_view(node0)["messages_forwarded"]
    bodies = send(conns[0], "od.one", "one-after")
    assert counts(nodes, "od.one") == [N, 0, 0]
    assert cluster_view(node0)["messages_forwarded"] == forwarded
    collect([conns[0].session().consumer("queue://od.one")], bodies)
    settled(nodes, "od.one")

    # Consumers on nodes 1 and 2: an even split between them, none left on node0.
    create_everywhere(conns, "od.two")
    two = [conns[i].session().consumer("queue://od.two") for i in (1, 2)]
    wait_bindings(node0, "od.two", count=2, consumers=1, timeout=DEADLINE)
    bodies = send(conns[0], "od.two", "two")
    assert queue_count(node0, "od.two") == 0
    got = collect(two, bodies)
    assert [len(g) for g in got] == [N // 2, N // 2]
    settled(nodes, "od.two")

    # And node0 with a consumer of its own: three ways.
    create_everywhere(conns, "od.three")
    three = [c.session().consumer("queue://od.three") for c in conns]
    wait_bindings(node0, "od.three", count=2, consumers=1, timeout=DEADLINE)
    bodies = send(conns[0], "od.three", "three")
    got = collect(three, bodies)
    assert [len(g) for g in got] == [N // 3] * 3
    settled(nodes, "od.three")
    assert cluster_view(node0)["messages_redistributed"] == 0


def test_off_keeps_messages_local_even_with_remote_consumers(cluster) -> None:
    nodes, conns = cluster(balancing="OFF")
    create_everywhere(conns, "off.q")
    remote = [conns[i].session().consumer("queue://off.q") for i in (1, 2)]
    wait_bindings(nodes[0], "off.q", count=2, consumers=1, timeout=DEADLINE)
    bodies = send(conns[0], "off.q", "off")
    assert counts(nodes, "off.q") == [N, 0, 0]
    assert cluster_view(nodes[0])["messages_forwarded"] == 0
    assert all(c.receive(0.2) is None for c in remote)
    got = collect([conns[0].session().consumer("queue://off.q"), *remote], bodies)
    assert [len(g) for g in got] == [N, 0, 0]
    settled(nodes, "off.q")


def test_off_with_redistribution_keeps_local_then_moves_to_a_consumer(cluster) -> None:
    nodes, conns = cluster(balancing="OFF_WITH_REDISTRIBUTION", redistribution_delay=0)
    node0 = nodes[0]
    create_everywhere(conns, "owr.q")
    wait_bindings(node0, "owr.q", count=2, timeout=DEADLINE)

    # No consumer anywhere: they stay on node0.
    first = send(conns[0], "owr.q", "first", N // 2)
    assert counts(nodes, "owr.q") == [N // 2, 0, 0]
    assert cluster_view(node0)["messages_forwarded"] == 0

    # A consumer appears on node1: node0's idle queue hands its messages over.
    consumer1 = conns[1].session().consumer("queue://owr.q")
    collect([consumer1], first)

    # Sent while node1 has its consumer: routed locally, then redistributed (never forwarded at send time).
    second = send(conns[0], "owr.q", "second", N // 2)
    collect([consumer1], second)
    settled(nodes, "owr.q")
    view = cluster_view(node0)
    assert view["messages_redistributed"] == N
    assert view["messages_forwarded"] == N  # every copy that left node0 was a redistribution


def test_a_four_node_chain_delivers_from_the_first_node_to_the_last(cluster) -> None:
    nodes, conns = cluster(4, chain=True, max_hops=3)
    a, d = nodes[0], nodes[3]
    consumer = conns[3].session().consumer("queue://chain.q")
    (binding,) = wait_bindings(a, "chain.q", consumers=1, timeout=DEADLINE)
    assert binding["distance"] == 3
    assert binding["node_id"] == cluster_view(d)["node_id"]
    assert binding["via"] == cluster_view(nodes[1])["node_id"]
    bodies = send(conns[0], "chain.q", "chain")
    collect([consumer], bodies)
    settled(nodes, "chain.q")
    for node in nodes[:3]:
        assert cluster_view(node)["messages_forwarded"] == N
    assert cluster_view(d)["duplicates_dropped"] == 0


def test_a_redistributed_message_keeps_its_delivery_count(cluster) -> None:
    """A message delivered on one node and never acknowledged there (its consumer left) is
    redelivered, not new, on the node redistribution moves it to: JMSRedelivered, the MQTT DUP
    flag and max-delivery-attempts all read that count."""
    nodes, conns = cluster(2, balancing="OFF_WITH_REDISTRIBUTION", redistribution_delay=0)
    create_everywhere(conns, "rd.q")
    wait_bindings(nodes[0], "rd.q", count=1, timeout=DEADLINE)
    bodies = send(conns[0], "rd.q", "rd", 5)

    session0 = conns[0].session()
    consumer0 = session0.consumer("queue://rd.q", ack="client")
    first = [consumer0.receive(DEADLINE) for _ in bodies]
    assert [m.body for m in first if m is not None] == bodies
    assert [m.delivery_count for m in first] == [0] * 5
    session0.close()  # never acknowledged: back in node0's queue, delivered once

    consumer1 = conns[1].session().consumer("queue://rd.q", ack="client")
    moved = [consumer1.receive(DEADLINE) for _ in bodies]
    assert sorted(m.body for m in moved if m is not None) == sorted(bodies)
    assert [m.delivery_count for m in moved] == [1] * 5, "redistribution forgot the delivery count"
    for m in moved:
        m.ack()
    settled(nodes, "rd.q")
