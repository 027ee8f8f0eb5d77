"""OpenWire failover clients in a Petrel cluster (issue 15): the broker sends a JMS client the
cluster's members (ConnectionControl connectedBrokers, as ActiveMQ's updateClusterClients), so a
`failover:` URL naming node1 only goes on with node2 when node1 is killed with -9; and the
API-gateway seed pattern (both nodes in the URL, producers on one, consumers on the other of a
load-balancing pair) loses and duplicates nothing."""

from __future__ import annotations

import re
import socket
import subprocess
from collections import Counter

import pytest

from cluster_harness import make_cluster, queue_count, start_all, stop_all, wait_bindings, wait_connected
from jms import compile_program, run
from petrel.codec.openwire import (
    NEED_DATA,
    BrokerInfo,
    ConnectionControl,
    ConnectionId,
    ConnectionInfo,
    OpenWireConnection,
    Response,
    WireFormatInfo,
)
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system

FAST = "initialReconnectDelay=50&maxReconnectDelay=500"


@pytest.fixture
def classpath(tmp_path):
    return compile_program("JmsQueueRoundTrip", tmp_path / "classes")


def got(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.match(r"GOT (\d+) message ", line))]


def drain(classpath: str, port: int, queue: str, most: int) -> list[int]:
    """What is left on one node's queue, taken by a plain (not failover) consumer."""
    return got(run(classpath, "JmsQueueRoundTrip", f"tcp://127.0.0.1:{port}", queue, str(most), "receive"))


def test_failover_client_given_one_node_learns_the_other_and_goes_on_after_a_kill9(tmp_path, classpath):
    """The URL names node1 only. After 300 of 1000 persistent sends node1 is killed with -9 and
    stays down: the client can only go on through node2, which it knows from node1's
    ConnectionControl. It sends the rest there and consumes what node2 holds; node1, restarted
    afterwards, still holds what it had confirmed. Every index is consumed, and only the one send
    in flight at the kill (on node1's disk, its response lost, resent to node2, which cannot know
    node1's duplicate IDs) may be there twice."""
    n = 1000
    node1, node2 = nodes = make_cluster(tmp_path, 2)
    start_all(nodes)
    try:
        wait_connected(nodes)
        url = f"failover:(tcp://127.0.0.1:{node1.port})?{FAST}"
        client = subprocess.Popen(["java", "-cp", classpath, "JmsQueueRoundTrip", url, "fo.cluster", str(n), "both"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        try:
            for line in client.stdout:
                lines.append(line.strip())
                if line.startswith("PROGRESS 300"):
                    node1.kill9()
                    break
            rest, _ = client.communicate(timeout=180)
        finally:
            if client.poll() is None:
                client.kill()
        lines += rest.splitlines()
        assert client.returncode == 0 and f"SENT {n}" in lines, lines[-20:]
        taken = got(lines)
        assert taken, "the client consumed nothing from node2"
        node1.start()
        left1 = drain(classpath, node1.port, "fo.cluster", n)
        left2 = drain(classpath, node2.port, "fo.cluster", n)
        counts = Counter(taken + left1 + left2)
        assert sorted(counts) == list(range(n)), f"lost: {sorted(set(range(n)) - set(counts))[:20]}"
        twice = [i for i, c in counts.items() if c > 1]
        assert len(twice) <= 1 and all(counts[i] == 2 for i in twice), twice
        assert 250 <= min(taken) <= 310 and len(left1) >= 290, (min(taken), len(left1))  # node2: after the kill
    finally:
        stop_all(nodes)


def test_api_gateway_seed_pattern_producers_on_one_node_consumers_on_the_other(tmp_path, classpath):
    """Both nodes in each failover URL (randomize off: the producer's first is node1, the
    consumer's node2); the pair balances messages on demand: the 2000 persistent messages sent on
    node1 reach the consumer on node2, each once, and nothing is left on either node."""
    n = 2000
    node1, node2 = nodes = make_cluster(tmp_path, 2)
    start_all(nodes)
    try:
        wait_connected(nodes)
        one, two = f"tcp://127.0.0.1:{node1.port}", f"tcp://127.0.0.1:{node2.port}"
        consumer = subprocess.Popen(["java", "-cp", classpath, "JmsQueueRoundTrip",
                                     f"failover:({two},{one})?randomize=false&{FAST}", "gw.orders", str(n),
                                     "receive"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_bindings(node1, "gw.orders", consumers=1, timeout=60)
            sent = run(classpath, "JmsQueueRoundTrip", f"failover:({one},{two})?randomize=false&{FAST}",
                       "gw.orders", str(n), "send")
            assert f"SENT {n}" in sent
            out, _ = consumer.communicate(timeout=240)
        finally:
            if consumer.poll() is None:
                consumer.kill()
        lines = out.splitlines()
        taken = got(lines)
        counts = Counter(taken)
        assert f"RECEIVED {n}" in lines, lines[-5:]
        assert sorted(counts) == list(range(n)) and max(counts.values()) == 1
        wait_for(lambda: queue_count(node1, "gw.orders") in (0, None) and queue_count(node2, "gw.orders") in (0, None),
                 30, 0.1, "messages left on a node")
    finally:
        stop_all(nodes)


def test_members_sent_at_connect_and_as_they_change(tmp_path):
    """By hand (the codec as a client) on node1: the BrokerInfo names node2 as a peer and the
    ConnectionControl lists both nodes' URIs, node1's first; when node2 stops, a new one lists
    node1 alone, and when node2 is back, both again (once node1's bridge to it is up)."""
    node1, node2 = nodes = make_cluster(tmp_path, 2)
    start_all(nodes)
    one, two = f"tcp://127.0.0.1:{node1.port}", f"tcp://127.0.0.1:{node2.port}"
    sock = socket.create_connection(("127.0.0.1", node1.port), timeout=30)
    codec = OpenWireConnection()

    def next_of(kind):
        while True:
            ev = codec.next_event()
            if ev is NEED_DATA:
                data = sock.recv(65536)
                assert data, "connection closed"
                codec.receive_data(data)
            elif isinstance(ev, kind):
                return ev

    try:
        wait_connected(nodes)
        sock.sendall(codec.send(WireFormatInfo(12, {})))
        sock.sendall(codec.send(ConnectionInfo(command_id=1, response_required=True,
                                               connection_id=ConnectionId("ID:raw:1"), client_id="raw")))
        info = next_of(BrokerInfo)
        assert info.broker_url == one and [p.broker_url for p in info.peer_broker_infos] == [two]
        assert next_of(Response).correlation_id == 1
        assert next_of(ConnectionControl).connected_brokers == f"{one},{two}"
        node2.stop()
        assert next_of(ConnectionControl).connected_brokers == one
        node2.start()
        seen = [next_of(ConnectionControl).connected_brokers]
        while seen[-1] != f"{one},{two}":  # (node2's join comes before node1's bridge to it is up)
            seen.append(next_of(ConnectionControl).connected_brokers)
        assert set(seen) <= {one, f"{one},{two}"}, seen
    finally:
        sock.close()
        stop_all(nodes)
