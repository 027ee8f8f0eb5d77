"""Clustered message grouping with real nodes: one LOCAL handler, REMOTE handlers elsewhere."""

from __future__ import annotations

import socket
import threading
from collections import defaultdict

import pytest
from cluster_harness import cluster_view, make_cluster, start_all, wait_bindings, wait_connected

from petrel.client import Connection, Message, SendFailed
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system

GROUPS = [f"g{i}" for i in range(8)]
PER_GROUP = 25


def grouping(kind: str, timeout: int = 1500) -> str:
    return f'[grouping_handler]\ntype = "{kind}"\ntimeout = {timeout}\n'


@pytest.fixture
def nodes(tmp_path):
    nodes = make_cluster(tmp_path, 3)
    for i, node in enumerate(nodes):
        with open(node.config_path, "a") as f:
            f.write(grouping("LOCAL" if i == 0 else "REMOTE"))
    start_all(nodes)
    yield nodes
    for node in nodes:
        node.stop()


def test_every_message_of_a_group_reaches_one_consumer_in_order(nodes) -> None:
    wait_connected(nodes)
    conns = [Connection(f"tcp://127.0.0.1:{n.port}") for n in nodes]
    received: dict[int, list[Message]] = defaultdict(list)
    stop = threading.Event()
    try:
        consumers = [c.session().consumer("queue://orders") for c in conns]
        for node in nodes:
            wait_bindings(node, "orders", count=2, consumers=1)

        def drain(i: int) -> None:
            while not stop.is_set():
                m = consumers[i].receive(0.2)
                if m is not None:
                    received[i].append(m)

        threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        for p, conn in enumerate(conns):  # a producer on every node, every group from each
            session = conn.session()
            producer = session.producer("queue://orders")
            for seq in range(PER_GROUP):
                for group in GROUPS:
                    producer.send(Message(f"{p}:{group}:{seq}".encode(),
                                          {"JMSXGroupID": group, "producer": p, "seq": seq}, durable=True))
            session.flush()
        total = 3 * len(GROUPS) * PER_GROUP
        wait_for(lambda: sum(len(v) for v in received.values()) >= total, 60, 0.1,
                 "not every grouped message arrived")
        stop.set()
        for t in threads:
            t.join(5)
    finally:
        stop.set()
        for c in conns:
            c.close()
    owner: dict[str, set[int]] = defaultdict(set)
    bodies = []
    for node, messages in received.items():
        order: dict[tuple[int, str], list[int]] = defaultdict(list)
        for m in messages:
            group = m.properties["JMSXGroupID"]
            owner[group].add(node)
            order[(m.properties["producer"], group)].append(m.properties["seq"])
            bodies.append(m.body)
        for key, seqs in order.items():
            assert seqs == sorted(seqs), f"group {key} out of order on node {node}"
    assert len(bodies) == len(set(bodies)) == 3 * len(GROUPS) * PER_GROUP
    assert all(len(nodes_) == 1 for nodes_ in owner.values()), dict(owner)
    assert len({next(iter(n)) for n in owner.values()}) > 1  # groups were spread, not all on one node
    assert cluster_view(nodes[0])["grouping"]["groups"] == len(GROUPS)


def test_a_send_fails_clearly_without_the_local_handler(nodes) -> None:
    wait_connected(nodes)
    with Connection(f"tcp://127.0.0.1:{nodes[1].port}") as c1, Connection(f"tcp://127.0.0.1:{nodes[2].port}") as c2:
        c2.session().consumer("queue://orders")
        wait_bindings(nodes[1], "orders", consumers=1)
        local_id = cluster_view(nodes[0])["node_id"]
        nodes[0].kill9()

        def local_gone():
            return not any(b["connected"] for b in cluster_view(nodes[1])["bridges"] if b["node_id"] == local_id)

        wait_for(local_gone, 30, 0.05, "node 1 still sees the LOCAL node")
        producer = c1.session().producer("queue://orders")
        with pytest.raises(SendFailed, match="grouping"):
            producer.send(Message(b"x", {"JMSXGroupID": "new-group"}, durable=True), wait=True)
        # over STOMP: an ERROR frame that says why
        with socket.create_connection(("127.0.0.1", nodes[1].stomp_port), timeout=10) as s:
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"
                      b"SEND\ndestination:/queue/orders\nJMSXGroupID:stomp-group\nreceipt:1\n\nx\x00")
            data = b""
            while b"ERROR" not in data or not data.endswith(b"\x00"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        assert b"ERROR" in data and b"grouping" in data, data


def test_unused_groups_are_forgotten_after_group_timeout(tmp_path) -> None:
    nodes = make_cluster(tmp_path, 2)
    with open(nodes[0].config_path, "a") as f:
        f.write('[grouping_handler]\ntype = "LOCAL"\ngroup_timeout = 600\nreaper_period = 200\n')
    with open(nodes[1].config_path, "a") as f:
        f.write('[grouping_handler]\ntype = "REMOTE"\ngroup_timeout = 600\nreaper_period = 200\n')
    start_all(nodes)
    try:
        wait_connected(nodes)
        with Connection(f"tcp://127.0.0.1:{nodes[0].port}") as c0, \
                Connection(f"tcp://127.0.0.1:{nodes[1].port}") as c1:
            c0.session().consumer("queue://orders")
            wait_bindings(nodes[1], "orders", consumers=1)
            c1.session().producer("queue://orders").send(Message(b"x", {"JMSXGroupID": "g"}, durable=True), wait=True)
            assert cluster_view(nodes[0])["grouping"]["groups"] == 1
            assert cluster_view(nodes[1])["grouping"]["groups"] == 1
            wait_for(lambda: all(cluster_view(n)["grouping"]["groups"] == 0 for n in nodes), 10, 0.05,
                     "the unused group was not forgotten on both nodes")
    finally:
        for node in nodes:
            node.stop()
