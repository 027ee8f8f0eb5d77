"""Cluster membership on real processes: joining through one seed, UDP discovery (and a
node dropped when it falls silent), a peer with the wrong cluster password refused, and the
CORE topology pushed to clients."""

from __future__ import annotations

import pytest
from cluster_harness import (
    Discovery,
    cluster_view,
    make_cluster,
    queue_count,
    start_all,
    wait_bindings,
    wait_connected,
)

from petrel.client import Connection
from petrel.testing.process import wait_for
from petrel.testing.udp import udp_port

pytestmark = pytest.mark.system

DEADLINE = 30



def members(node) -> dict[str, bool]:
    """node id -> connected, as the node's /api/v1/cluster lists its members."""
    return {m["node_id"]: m["connected"] for m in cluster_view(node)["members"]}


def bridged(node) -> set[str]:
    return {b["node_id"] for b in cluster_view(node)["bridges"] if b["connected"]}


def receive(consumer, n: int) -> list[bytes]:
    """`n` message bodies (failing after DEADLINE), then nothing more."""
    got = []

    def arrived():
        while (m := consumer.receive_no_wait()) is not None:
            got.append(m.body)
        return len(got) >= n

    wait_for(arrived, DEADLINE, 0.02, f"the consumer got {len(got)} of {n} messages")
    assert consumer.receive(0.2) is None
    return got


def test_a_node_joining_through_one_seed_learns_every_member(tmp_path, stop_nodes) -> None:
    # node0 seeds node1; node1 and node2 seed node0 only: node1 and node2 must find each other.
    nodes = make_cluster(tmp_path, 3, seeds="first")
    stop_nodes(nodes)
    start_all(nodes)
    wait_connected(nodes, timeout=DEADLINE)
    ids = [cluster_view(n)["node_id"] for n in nodes]
    assert len(set(ids)) == 3
    for i, node in enumerate(nodes):
        assert bridged(node) == set(ids) - {ids[i]}
        assert members(node) == dict.fromkeys(ids, True)
        view = cluster_view(node)
        assert [m["node_id"] for m in view["members"] if m["self"]] == [ids[i]]
        assert {m["connector"] for m in view["members"]} == {f"127.0.0.1:{n.port}" for n in nodes}
        assert {p["node_id"] for p in view["peers"]} == set(ids) - {ids[i]}


def test_udp_discovery_finds_every_node_and_drops_a_silent_one(tmp_path, stop_nodes) -> None:
    nodes = make_cluster(tmp_path, 3, seeds="none", discovery=Discovery(udp_port()), connection_ttl=1000)
    stop_nodes(nodes)
    start_all(nodes)
    wait_connected(nodes, timeout=DEADLINE)
    ids = [cluster_view(n)["node_id"] for n in nodes]
    with Connection(f"tcp://127.0.0.1:{nodes[2].port}") as c2:
        c2.create_queue("udp.orders")  # durable: node2 has it again after its restart
    wait_bindings(nodes[0], "udp.orders", timeout=DEADLINE)
    for i, node in enumerate(nodes):
        others = set(ids) - {ids[i]}
        assert bridged(node) == others
        wait_for(lambda node=node, others=others: set(cluster_view(node)["discovered"]) == others, DEADLINE, 0.05,
                 f"node{i} did not discover {others} (it has {cluster_view(node)['discovered']})")
    for node in nodes:
        assert "static_connectors = []" in node.config_path.read_text()

    nodes[2].kill9()
    survivors = nodes[:2]

    def forgotten():
        views = [cluster_view(n) for n in survivors]
        return all(ids[2] not in v["discovered"]
                   and not any(b["node_id"] == ids[2] for b in v["bridges"])
                   and {m["node_id"]: m["connected"] for m in v["members"]}.get(ids[2]) is False
                   for v in views)

    wait_for(forgotten, DEADLINE, 0.05, "the killed node is still discovered, bridged or shown connected")
    for i, node in enumerate(survivors):
        assert bridged(node) == {ids[1 - i]}
        assert members(node)[ids[1 - i]] is True

    # Back on the air (same data directory, same node id): found again and bridged both ways.
    nodes[2].start()
    wait_connected(nodes, timeout=DEADLINE)
    assert cluster_view(nodes[2])["node_id"] == ids[2]
    for i, node in enumerate(nodes):
        assert members(node) == dict.fromkeys(ids, True)
        assert len(cluster_view(node)["bridges"]) == 2

    # ...and a consumer there draws messages from node0 again (ON_DEMAND).
    with Connection(f"tcp://127.0.0.1:{nodes[2].port}") as c2, Connection(f"tcp://127.0.0.1:{nodes[0].port}") as c0:
        consumer = c2.session().consumer("queue://udp.orders")
        (binding,) = wait_bindings(nodes[0], "udp.orders", consumers=1, timeout=DEADLINE)
        assert binding["node_id"] == binding["via"] == ids[2]
        session = c0.session()
        producer = session.producer("queue://udp.orders")
        bodies = [b"udp-%d" % i for i in range(20)]
        for body in bodies:
            producer.send(body, durable=True)
        session.flush()
        assert sorted(receive(consumer, 20)) == sorted(bodies)


def test_a_peer_with_the_wrong_cluster_password_is_refused(tmp_path, stop_nodes) -> None:
    nodes = make_cluster(tmp_path, 3, passwords={2: "not-the-cluster-secret"})
    stop_nodes(nodes)
    start_all(nodes)
    good, intruder = nodes[:2], nodes[2]
    wait_connected(good, peers=1, timeout=DEADLINE)
    refusal = "wrong cluster_user or cluster_password"
    wait_for(lambda: all(refusal in n.log_path.read_text() for n in nodes), DEADLINE, 0.05,
             "the refusal is not in every node's log")
    for node in good:  # as the acceptor (the wait above may have matched its own refused join)
        wait_for(lambda node=node: "refused cluster peer" in node.log_path.read_text(), DEADLINE, 0.05,
                 "a good node did not log refusing the intruder")
    assert "refused this node's cluster join" in intruder.log_path.read_text()

    intruder_id = cluster_view(intruder)["node_id"]
    for node in good:
        view = cluster_view(node)
        assert intruder_id not in {p["node_id"] for p in view["peers"]}
        assert intruder_id not in {m["node_id"] for m in view["members"]}
        assert sum(b["connected"] for b in view["bridges"]) == 1
    view = cluster_view(intruder)
    assert view["peers"] == [] and len(view["bridges"]) == 2
    for b in view["bridges"]:  # refused every time it tries again
        assert not b["connected"] and b["state"] in ("refused", "connecting", "joining")
    # the last error is the refusal (a retry that could not connect at all, on a busy machine, is
    # followed by another that is refused again)
    wait_for(lambda: all(refusal in b["last_error"] for b in cluster_view(intruder)["bridges"]), DEADLINE, 0.05,
             "the intruder's bridges do not say they were refused")
    for node in good:  # and it refuses the good nodes' bridges in turn (a first try made before the
        # intruder listened fails to connect at all; the next one is refused)
        def to_intruder(node=node) -> dict:
            (bridge,) = [b for b in cluster_view(node)["bridges"] if b["connector"] == f"127.0.0.1:{intruder.port}"]
            return bridge

        wait_for(lambda node=node: refusal in to_intruder(node)["last_error"], DEADLINE, 0.05,
                 "a good node's bridge to the intruder does not say it was refused")
        assert not to_intruder(node)["connected"]

    # A consumer on the intruder does not draw messages from the cluster.
    with Connection(f"tcp://127.0.0.1:{intruder.port}") as ci, Connection(f"tcp://127.0.0.1:{good[0].port}") as c0, \
            Connection(f"tcp://127.0.0.1:{good[1].port}") as c1:
        c0.create_queue("secret.orders", exists_ok=True)
        consumer = ci.session().consumer("queue://secret.orders")
        c1.session().consumer("queue://other")  # a consumer the good nodes must see advertised...
        wait_bindings(good[0], "other", consumers=1, timeout=DEADLINE)  # ...so advertising works
        session = c0.session()
        producer = session.producer("queue://secret.orders")
        for i in range(20):
            producer.send(b"secret-%d" % i, durable=True)
        session.flush()
        assert queue_count(good[0], "secret.orders") == 20
        assert cluster_view(good[0])["messages_forwarded"] == 0
        assert consumer.receive(0.3) is None
    assert not [b for b in cluster_view(good[0])["remote_bindings"] if b["node_id"] == intruder_id]


def test_core_clients_receive_the_topology_and_its_updates(tmp_path, stop_nodes) -> None:
    nodes = make_cluster(tmp_path, 3)
    stop_nodes(nodes)
    start_all(nodes[:2])
    wait_connected(nodes[:2], peers=1, timeout=DEADLINE)
    with Connection(f"tcp://127.0.0.1:{nodes[0].port}") as conn:
        def topology():
            return {m.node_id: m.live for m in conn.topology if not m.leaving}

        first = {cluster_view(n)["node_id"]: f"127.0.0.1:{n.port}" for n in nodes[:2]}
        wait_for(lambda: topology() == first, DEADLINE, 0.05, f"topology {topology()} is not {first}")
        assert conn.node_id == cluster_view(nodes[0])["node_id"]

        nodes[2].start()
        wait_connected(nodes, timeout=DEADLINE)
        every = {cluster_view(n)["node_id"]: f"127.0.0.1:{n.port}" for n in nodes}
        wait_for(lambda: topology() == every, DEADLINE, 0.05, f"topology {topology()} is not {every}")

        nodes[1].stop()
        del every[next(i for i, c in every.items() if c == f"127.0.0.1:{nodes[1].port}")]
        wait_for(lambda: topology() == every, DEADLINE, 0.05, f"topology {topology()} is not {every}")

    # A client connecting now gets the current topology straight away, and fails over to a
    # node it only knows from the topology when the one in its URL dies.
    with Connection(f"failover:(tcp://127.0.0.1:{nodes[0].port})?initialReconnectDelay=10&maxReconnectDelay=100"
                    "&maxReconnectAttempts=50") as conn:
        wait_for(lambda: {m.node_id: m.live for m in conn.topology} == every, DEADLINE, 0.05,
                 "a new client did not get the topology")
        (survivor,) = set(every) - {conn.node_id}
        nodes[0].kill9()
        conn.session().producer("queue://topology.failover").send(b"after failover", wait=True)
        assert conn.failovers == 1 and conn.node_id == survivor
        assert queue_count(nodes[2], "topology.failover") == 1


def test_connections_spread_over_the_cluster_with_use_topology_for_load_balancing(tmp_path, stop_nodes) -> None:
    nodes = make_cluster(tmp_path, 3)
    stop_nodes(nodes)
    start_all(nodes)
    wait_connected(nodes, timeout=DEADLINE)
    ids = {cluster_view(n)["node_id"] for n in nodes}
    seed = nodes[0].port
    balanced = [Connection(f"tcp://127.0.0.1:{seed}?useTopologyForLoadBalancing=true") for _ in range(6)]
    plain = Connection(f"tcp://127.0.0.1:{seed}")
    try:
        reached = [c.node_id for c in balanced]
        assert set(reached) == ids, reached  # round-robin: every member gets two of the six
        assert sorted(reached.count(i) for i in ids) == [2, 2, 2]
        assert plain.node_id == cluster_view(nodes[0])["node_id"]
        session = balanced[1].session()  # a moved connection works
        session.producer("queue://spread").send(b"x", wait=True)
    finally:
        for c in [*balanced, plain]:
            c.close()


def test_a_bridge_gives_up_after_its_connect_attempts_and_says_why(tmp_path, stop_nodes) -> None:
    from petrel.testing.process import free_port

    nodes = make_cluster(tmp_path, 2, via={(0, 1): free_port()}, extra_cc="initial_connect_attempts = 2\n")
    a = nodes[0]  # its only seed is a port nothing listens on
    stop_nodes([a])
    start_all([a])

    def failed():
        bridges = cluster_view(a)["bridges"]
        return bridges and bridges[0]["state"] == "failed" and bridges[0]

    bridge = wait_for(failed, DEADLINE, 0.05, "the bridge did not give up")
    assert "cannot connect" in bridge["last_error"] and not bridge["connected"]
    assert "gave up after 3 attempts" in a.log()


def test_default_cluster_credentials_are_warned_about(tmp_path, stop_nodes) -> None:
    from petrel.testing.process import BrokerProcess, free_port

    node = BrokerProcess(tmp_path / "lone", http=True, settings=(
        "[[cluster_connections]]\n"
        f'static_connectors = ["tcp://127.0.0.1:{free_port()}"]\n'))
    stop_nodes([node])
    node.start()
    wait_for(lambda: "left at their defaults" in node.log(), DEADLINE, 0.05, "no warning about default credentials")
    assert "set the same secret on every node" in node.log()


def test_a_copied_data_directory_is_reported_as_a_duplicate_node_id_and_refused(tmp_path, stop_nodes) -> None:
    import shutil

    a, b = make_cluster(tmp_path, 2)
    stop_nodes([a, b])
    a.start()
    node_id = cluster_view(a)["node_id"]
    a.stop()
    shutil.copytree(a.data_dir, b.data_dir, dirs_exist_ok=True)  # b now has a's server.lock and node id
    start_all([a, b])
    for node in (a, b):
        wait_for(lambda node=node: "duplicate node id" in node.log(), DEADLINE, 0.05,
                 "the duplicate node id is not reported")
        assert node_id in node.log()
        assert not any(br["connected"] for br in cluster_view(node)["bridges"])
