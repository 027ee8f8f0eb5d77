"""Cluster hardening on real `petrel run` processes (issue 13): a spoofed UDP beacon opens no
bridge, the default cluster password is refused at startup, and clients cannot write the
cluster's internal queues ($.petrel.*) or properties (_PETREL_*) over STOMP or CORE."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import stomp

from petrel.client import ClientError, Connection, Message
from petrel.cluster.beacon import Announcement, encode
from petrel.cluster.beacon_auth import BeaconKey, seal
from petrel.testing.cluster import GROUP, PASSWORD, Discovery, cluster_view, make_cluster, start_all, stop_all
from petrel.testing.process import OWN_SECURITY, BrokerProcess, free_port, wait_for
from petrel.testing.udp import MULTICAST_GROUP, udp_port

from conftest import Listener

DEADLINE = 30.0


@pytest.fixture
def stop_nodes():
    nodes: list[BrokerProcess] = []
    yield nodes.extend
    stop_all(nodes)


class FakePeer:
    """A TCP listener standing for the node an announcement names: records who connects."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", free_port()))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.settimeout(1.0)
            try:
                self.received += conn.recv(65536)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close()


def send_to_group(data: bytes, port: int) -> None:
    """One datagram to the discovery group on loopback, as any host on the network could send."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        if GROUP == MULTICAST_GROUP:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        s.sendto(data, (GROUP, port))


def test_a_spoofed_udp_beacon_opens_no_bridge_and_learns_no_secret(tmp_path, stop_nodes) -> None:
    discovery = Discovery(udp_port())
    (node,) = make_cluster(tmp_path, 1, seeds="none", discovery=discovery)
    stop_nodes([node])
    start_all([node])
    spoofed, genuine = FakePeer(), FakePeer()
    try:
        forged = Announcement("f" * 32, "spoof", "petrel-cluster", (f"127.0.0.1:{spoofed.port}",))
        wrong_key = BeaconKey.derive("petrel-test", "a guessed password")
        # an old-style (unsealed) announcement, one sealed with a guessed password, and a replay
        # of a genuine announcement's bytes under another node id are all the same to the node
        for _ in range(5):
            send_to_group(encode(forged), discovery.port)
            send_to_group(seal(wrong_key, encode(forged)), discovery.port)
            time.sleep(0.05)
        wait_for(lambda: node.log().count("dropped an announcement") >= 2, DEADLINE, 0.05,
                 "the node did not log the forged announcements")
        assert "without a MAC" in node.log() and "wrong MAC" in node.log()
        # the control: an announcement sealed with the cluster's key makes the node connect
        key = BeaconKey.derive("petrel-test", PASSWORD)
        real = Announcement("a" * 32, "genuine", "petrel-cluster", (f"127.0.0.1:{genuine.port}",))
        deadline = time.monotonic() + DEADLINE
        while genuine.connections == 0:
            assert time.monotonic() < deadline, "the node never connected to a genuine announcement"
            send_to_group(seal(key, encode(real)), discovery.port)
            time.sleep(0.1)
        assert spoofed.connections == 0 and spoofed.received == b""
        assert PASSWORD.encode() not in spoofed.received
        connectors = {b["connector"] for b in cluster_view(node)["bridges"]}
        assert f"127.0.0.1:{spoofed.port}" not in connectors
        assert f"127.0.0.1:{genuine.port}" in connectors
    finally:
        spoofed.close()
        genuine.close()


def test_the_default_cluster_password_is_refused_at_startup(tmp_path) -> None:
    cluster = ("[[cluster_connections]]\n"
               f'static_connectors = ["tcp://127.0.0.1:{free_port()}"]\n')
    node = BrokerProcess(tmp_path / "n", env=OWN_SECURITY, settings=cluster)  # security on, as shipped
    node.start(wait=False)
    assert node.proc.wait(60) == 2
    assert "cluster_password is the default" in node.log() and "PETREL_CLUSTER_PASSWORD" in node.log()
    assert not (node.data_dir / "users.toml").exists()  # refused before anything else
    # the same broker given a secret of its own (here through the environment) starts
    node.env = {**OWN_SECURITY, "PETREL_CLUSTER_PASSWORD": "a-secret-of-its-own"}
    node.start()
    try:
        assert node.proc.poll() is None
    finally:
        node.stop()


def _queue_names(node: BrokerProcess) -> list[str]:
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/api/v1/queues", timeout=5) as r:
        return [q["name"] for q in json.loads(r.read())["queues"]]


def test_clients_cannot_write_the_clusters_internal_queues_or_properties(tmp_path, stop_nodes) -> None:
    nodes = make_cluster(tmp_path, 2)
    stop_nodes(nodes)
    start_all(nodes)
    a = nodes[0]
    sf = wait_for(lambda: next((q for q in _queue_names(a) if q.startswith("$.petrel.sf.")), None), DEADLINE,
                  0.05, "no store-and-forward queue")

    def stomp_refusal(act) -> str:
        conn = stomp.Connection([("127.0.0.1", a.stomp_port)], heartbeats=(0, 0))
        listener = Listener()
        conn.set_listener("l", listener)
        conn.connect(wait=True)
        try:
            act(conn)
            frame = listener.errors.get(timeout=10)
            return frame.headers["message"]
        finally:
            if conn.is_connected():
                conn.disconnect()

    message = stomp_refusal(lambda c: c.send(f"/queue/{sf}", "forged", headers={"receipt": "r1"}))
    assert "internal to the cluster" in message and sf in message
    # the cluster's properties on a client's send are dropped (a received message may be sent on)
    conn = stomp.Connection([("127.0.0.1", a.stomp_port)], heartbeats=(0, 0))
    conn.connect(wait=True)
    conn.send("/queue/orders", "stomp-forged", headers={"_PETREL_ROUTE_TO": "orders@x", "kept": "1"}, receipt="r2")
    conn.disconnect()
    message = stomp_refusal(lambda c: c.subscribe(f"/queue/{sf}", id="s1", ack="client"))
    assert "internal to the cluster" in message

    with Connection(f"tcp://127.0.0.1:{a.port}") as conn:
        with pytest.raises(ClientError, match="internal to the cluster"):
            conn.create_queue("$.petrel.sf.petrel-cluster.forged")
        with pytest.raises(ClientError, match="internal to the cluster"):
            conn.delete_queue(sf)
        with pytest.raises(ClientError, match="internal to the cluster"):
            conn.session().consumer(f"queue://{sf}")
    with Connection(f"tcp://127.0.0.1:{a.port}") as conn:
        producer = conn.session().producer(f"queue://{sf}")
        with pytest.raises(ClientError, match="internal to the cluster"):
            producer.send(Message(b"forged"), wait=True)
    with Connection(f"tcp://127.0.0.1:{a.port}") as conn:
        producer = conn.session().producer("queue://orders")
        producer.send(Message(b"core-forged", properties={"_PETREL_INSTANCE": "x:1", "kept": 1}), wait=True)
    # an ordinary send goes through as it is, and the internal queue is untouched
    with Connection(f"tcp://127.0.0.1:{a.port}") as conn:
        conn.session().producer("queue://orders").send(Message(b"fine", properties={"petrel_ok": 1}), wait=True)
    assert sf in _queue_names(a) and "$.petrel.sf.petrel-cluster.forged" not in _queue_names(a)
    with Connection(f"tcp://127.0.0.1:{a.port}") as conn:
        consumer = conn.session().consumer("queue://orders")
        got = {}
        while len(got) < 3 and (m := consumer.receive(10)) is not None:
            got[m.body] = m.properties
    assert set(got) == {b"stomp-forged", b"core-forged", b"fine"}, got
    assert not any(k.startswith("_PETREL_") for props in got.values() for k in props), got
    assert str(got[b"stomp-forged"].get("kept")) == "1" and got[b"core-forged"].get("kept") == 1
    assert got[b"fine"].get("petrel_ok") == 1


def test_with_security_on_the_nodes_join_and_a_wrong_cluster_password_is_refused(tmp_path, stop_nodes) -> None:
    """Brokers as shipped (security on): bridges log in with the cluster credentials; a node
    with another password joins nobody; the API answers the cluster's own credentials only."""
    from petrel.testing.cluster import api_request, wait_connected

    nodes = make_cluster(tmp_path, 3, passwords={2: "not-the-cluster-secret"})
    for node in nodes:
        node.env = dict(OWN_SECURITY)
    stop_nodes(nodes)
    start_all(nodes)
    good, intruder = nodes[:2], nodes[2]
    wait_connected(good, peers=1, timeout=DEADLINE)
    wait_for(lambda: "refused this node's cluster join" in intruder.log(), DEADLINE, 0.05,
             "the intruder was not refused")
    intruder_id = cluster_view(intruder)["node_id"]  # its own credentials open its own API
    for node in good:
        view = cluster_view(node)
        assert intruder_id not in {m["node_id"] for m in view["members"]}
        assert sum(b["connected"] for b in view["bridges"]) == 1
    # another node's cluster password opens no management API
    request = api_request(intruder, "/api/v1/cluster")
    request.full_url = f"http://127.0.0.1:{good[0].http_port}/api/v1/cluster"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 401
