"""`petrel cluster up|status|down` run as real commands: real broker processes on free ports.

They check the orchestration (configs, processes, health, state file) and what the commands
show of the cluster: `cluster status` (members, bridges, backlog) and `queue stat --clustered`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import time
import tomllib
from pathlib import Path

import pytest
import stomp

from cli_process import petrel
from conftest import Listener
from petrel.client import Connection
from petrel.config import load_config
from petrel.orchestrator.local import node_ports
from petrel.testing.process import BrokerProcess, port_range, wait_for

pytestmark = pytest.mark.system


# -- helpers --------------------------------------------------------------------------------------

def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(size: int) -> int:
    """A base P (below the ephemeral range) where P, P+1, P+2, P+100, P+101 ... of `size` nodes are all free."""
    low, high = port_range()  # this test worker's share, clear of the other workers' brokers
    for _ in range(200):
        base = random.randrange(low, high - 100 * size, 3)
        if all(_free(base + 100 * i + k) for i in range(size) for k in range(3)):
            return base
    raise RuntimeError(f"no free port block for {size} nodes")


def running(pid: int) -> bool:
    """The process exists and is not a zombie (nothing may reap a detached broker's corpse)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def table(out: str) -> list[dict[str, str]]:
    """The rows of the ASCII table in `out`, keyed by header."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in out.splitlines() if line.startswith("|") and not line.startswith("|-")]
    assert rows, f"no table in:\n{out}"
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def stomp_roundtrip(port: int, queue: str) -> bytes:
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect("guest", "guest", wait=True)
    try:
        conn.send(f"/queue/{queue}", f"to {queue}", headers={"receipt": "r1"})
        assert listener.receipts.get(timeout=10) == "r1"
        conn.subscribe(f"/queue/{queue}", id="s1", ack="auto")
        body = listener.get().body
        return body.encode() if isinstance(body, str) else body
    finally:
        conn.disconnect()


def core_roundtrip(url: str, queue: str) -> bytes:
    with Connection(url) as conn:
        session = conn.session()
        session.producer(f"queue://{queue}").send(f"to {queue}".encode(), wait=True)
        message = session.consumer(f"queue://{queue}").receive(10)
        assert message is not None, f"nothing received from {url}"
        return message.body


class Cluster:
    """`petrel cluster` on one data root; whatever it started is stopped at the end of the test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pids: set[int] = set()

    def run(self, *args: str):
        out = petrel("cluster", *args, "--data-root", str(self.root), timeout=120)
        state = self.state()
        if state:
            self.pids.update(n["pid"] for n in state["nodes"])
        self.pids.update(started_pids(out.stderr))  # even those of a failed `up`
        return out

    def state(self) -> dict | None:
        path = self.root / "cluster.json"
        return json.loads(path.read_text()) if path.exists() else None

    def cleanup(self) -> None:
        if self.state() is not None:
            petrel("cluster", "down", "--data-root", str(self.root), "--timeout", "10", timeout=60)
        for pid in self.pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "cluster")
    try:
        yield c
    finally:
        c.cleanup()


def started_pids(stderr: str) -> list[int]:
    """The pids of `up`'s progress lines: "started node-1 (pid 123), log ..."."""
    return [int(line.split("(pid ")[1].split(")")[0]) for line in stderr.splitlines() if line.startswith("started ")]


def explain(out) -> str:
    return f"exit {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"


# -- tests ----------------------------------------------------------------------------------------

def test_node_ports_follow_the_broker_defaults_or_the_base_port():
    assert node_ports(1) == (61616, 61613, 8161)
    assert node_ports(3) == (61816, 61813, 8361)
    assert node_ports(1, 30000) == (30000, 30001, 30002)
    assert node_ports(2, 30000) == (30100, 30101, 30102)


def test_node_labels_are_names_unless_unknown_or_shared():
    from petrel.cli.queue import _node_labels

    members = [{"node_id": f"{c * 8}-rest"} for c in "abcd"]
    results = {"aaaaaaaa-rest": {"name": "node-1"}, "bbbbbbbb-rest": {"name": "petrel"},
               "cccccccc-rest": {"name": "petrel"}, "dddddddd-rest": "connection refused"}
    assert _node_labels(members, results) == {"aaaaaaaa-rest": "node-1", "bbbbbbbb-rest": "bbbbbbbb",
                                              "cccccccc-rest": "cccccccc", "dddddddd-rest": "dddddddd"}


def test_up_status_kill_down(cluster):
    base = free_base_port(2)
    out = cluster.run("up", "--size", "2", "--base-port", str(base))
    assert out.returncode == 0, explain(out)

    # the table: both nodes with their URLs and pids
    rows = table(out.stdout)
    assert [r["NODE"] for r in rows] == ["node-1", "node-2"]
    assert [r["URL"] for r in rows] == [f"tcp://127.0.0.1:{base}", f"tcp://127.0.0.1:{base + 100}"]
    assert [r["STOMP"] for r in rows] == [f"127.0.0.1:{base + 1}", f"127.0.0.1:{base + 101}"]
    assert [r["CONSOLE"] for r in rows] == [f"http://127.0.0.1:{base + 2}/console",
                                           f"http://127.0.0.1:{base + 102}/console"]
    state = cluster.state()
    pids = [n["pid"] for n in state["nodes"]]
    assert [r["PID"] for r in rows] == [str(p) for p in pids]
    assert all(running(p) for p in pids)
    assert state["name"] == "petrel-cluster"
    assert [(n["index"], n["port"], n["stomp_port"], n["http_port"]) for n in state["nodes"]] == [
        (1, base, base + 1, base + 2), (2, base + 100, base + 101, base + 102)]

    # each node's broker.toml: its own ports, the other node as a static connector, one shared secret
    configs = [load_config(n["config"], env={}) for n in state["nodes"]]
    for i, (node, config) in enumerate(zip(state["nodes"], configs)):
        other = state["nodes"][1 - i]
        assert config.name == node["name"]
        assert config.data_dir == Path(node["data_dir"]) == cluster.root.absolute() / node["name"] / "data"
        assert (config.port, config.stomp_port, config.http_port) == (node["port"], node["stomp_port"], node["http_port"])
        assert config.cluster_user == "petrel-cluster"
        (cc,) = config.cluster_connections
        assert cc.name == "petrel-cluster"
        assert cc.connector == f"tcp://127.0.0.1:{node['port']}"
        assert cc.static_connectors == [f"tcp://127.0.0.1:{other['port']}"]
        assert cc.message_load_balancing == "ON_DEMAND" and cc.max_hops == 1
        assert config.address_settings["#"].redistribution_delay == 0
        assert Path(node["log"]).read_text()  # the broker logs there
    assert configs[0].cluster_password == configs[1].cluster_password
    assert len(configs[0].cluster_password) >= 16 and configs[0].cluster_password != "CHANGE ME!!"

    # both brokers serve CORE (on the URL shown) and STOMP
    for node in state["nodes"]:
        assert core_roundtrip(f"tcp://127.0.0.1:{node['port']}", f"orch.core.{node['name']}") == \
            f"to orch.core.{node['name']}".encode()
        assert stomp_roundtrip(node["stomp_port"], f"orch.stomp.{node['name']}") == \
            f"to orch.stomp.{node['name']}".encode()

    # a second `up` on the same root is refused while the nodes run
    again = cluster.run("up", "--size", "2", "--base-port", str(free_base_port(2)))
    assert again.returncode == 2, explain(again)
    assert "petrel cluster down" in again.stderr and again.stderr.count("\n") == 1
    assert [n["pid"] for n in cluster.state()["nodes"]] == pids

    out = cluster.run("status")
    assert out.returncode == 0, explain(out)
    rows = table(out.stdout)
    assert [(r["NODE"], r["PID"], r["STATE"]) for r in rows] == [
        ("node-1", str(pids[0]), "running"), ("node-2", str(pids[1]), "running")]
    assert rows[0]["URL"] == f"tcp://127.0.0.1:{base}"

    # the nodes see each other: both members connected, the bridge up, nothing waiting to be forwarded
    def seen(members: str, bridges: str, nodes: int = 2):
        out = cluster.run("status")
        rows = table(out.stdout)
        want = [(members, bridges, "0")] * nodes
        return rows if [(r["MEMBERS"], r["BRIDGES"], r["BACKLOG"]) for r in rows[:nodes]] == want else None

    wait_for(lambda: seen("2", "1/1"), 30, 0.1, "the two nodes did not see each other")

    # `queue stat --clustered` on node-1 shows the queues of both nodes, among them one created on node-2
    url1, url2 = (f"http://127.0.0.1:{n['http_port']}" for n in state["nodes"])
    out = petrel("queue", "create", "--name", "orch.on.node2", "--url", url2)
    assert out.returncode == 0, explain(out)
    out = petrel("queue", "stat", "--clustered", "--url", url1)
    assert out.returncode == 0, explain(out)
    rows = table(out.stdout)
    assert list(rows[0]) == ["NODE", "NAME", "ADDRESS", "CONSUMER_COUNT", "MESSAGE_COUNT", "MESSAGES_ADDED",
                             "DELIVERING_COUNT", "MESSAGES_ACKED", "SCHEDULED_COUNT", "ROUTING_TYPE"]
    # sorted by queue, then node; the round-trip queues above were auto-deleted; no internal queue
    assert [(r["NAME"], r["NODE"]) for r in rows] == [
        ("DLQ", "node-1"), ("DLQ", "node-2"), ("ExpiryQueue", "node-1"), ("ExpiryQueue", "node-2"),
        ("orch.on.node2", "node-2")]
    (on2,) = [r for r in rows if r["NAME"] == "orch.on.node2"]
    assert (on2["ADDRESS"], on2["MESSAGE_COUNT"], on2["ROUTING_TYPE"]) == ("orch.on.node2", "0", "ANYCAST")
    out = petrel("queue", "stat", "--clustered", "--internal", "--url", url1)
    assert out.returncode == 0, explain(out)
    internal = {r["NODE"] for r in table(out.stdout) if r["NAME"].startswith("$.petrel.sf.")}
    assert internal == {"node-1", "node-2"}  # each node's store-and-forward queue for the other
    out = petrel("queue", "stat", "--url", url1)  # without --clustered: this node's queues, as ever
    assert out.returncode == 0, explain(out)
    assert "NODE" not in out.stdout and "orch.on.node2" not in out.stdout and "$.petrel.sf." in out.stdout

    os.kill(pids[1], signal.SIGKILL)
    wait_for(lambda: not running(pids[1]), 10, message="node-2 survived kill -9")
    out = cluster.run("status")
    assert out.returncode == 1, explain(out)
    assert [(r["NODE"], r["STATE"]) for r in table(out.stdout)] == [("node-1", "running"), ("node-2", "stopped")]
    assert table(out.stdout)[1]["MEMBERS"] == "-"
    wait_for(lambda: seen("1", "0/1", nodes=1), 30, 0.1, "node-1 did not notice node-2's end")

    # a member that does not answer: one line on stderr, the rest of the table, exit 1
    out = petrel("queue", "stat", "--clustered", "--url", url1)
    assert out.returncode == 1, explain(out)
    assert len(out.stderr.strip().splitlines()) == 1 and f":{state['nodes'][1]['http_port']}" in out.stderr
    assert [(r["NAME"], r["NODE"]) for r in table(out.stdout)] == [("DLQ", "node-1"), ("ExpiryQueue", "node-1")]

    out = cluster.run("down")
    assert out.returncode == 0, explain(out)
    assert not any(running(p) for p in pids)
    assert cluster.state() is None
    assert (cluster.root / "node-1" / "broker.toml").exists()  # kept without --purge
    assert "killing" not in out.stderr  # node-1 stopped on SIGTERM, before the deadline


def test_up_with_options_then_down_purge(cluster):
    base = free_base_port(1)
    out = cluster.run("up", "--size", "1", "--base-port", str(base), "--name", "orders",
                      "--load-balancing", "strict", "--redistribution-delay", "500")
    assert out.returncode == 0, explain(out)
    (node,) = cluster.state()["nodes"]
    with open(node["config"], "rb") as f:
        raw = tomllib.load(f)
    assert raw["cluster_connections"] == [{
        "name": "orders", "connector": f"tcp://127.0.0.1:{base}", "static_connectors": [],
        "message_load_balancing": "STRICT", "max_hops": 1}]
    assert raw["address_settings"] == {"#": {"redistribution_delay": 500}}
    out = cluster.run("down", "--purge")
    assert out.returncode == 0, explain(out)
    assert not running(node["pid"])
    assert not Path(node["node_dir"]).exists()
    assert cluster.state() is None


def test_up_refuses_a_busy_port_and_starts_nothing(cluster):
    base = free_base_port(2)
    with socket.create_server(("127.0.0.1", base + 101)):  # node-2's STOMP port
        out = cluster.run("up", "--size", "2", "--base-port", str(base))
    assert out.returncode == 2, explain(out)
    assert f"port {base + 101}" in out.stderr
    assert cluster.state() is None
    assert not (cluster.root / "node-1").exists()


def test_a_node_that_cannot_start_fails_up_and_the_others_are_stopped(cluster):
    base = free_base_port(2)
    (cluster.root / "node-2").mkdir(parents=True)
    (cluster.root / "node-2" / "data").write_text("a file where the data directory should be")
    started = time.monotonic()
    out = cluster.run("up", "--size", "2", "--base-port", str(base), "--timeout", "60")
    assert out.returncode == 1, explain(out)
    assert time.monotonic() - started < 50, "the failed node should be noticed at once, not at the deadline"
    assert "node-2 exited" in out.stderr and "broker.log" in out.stderr
    assert cluster.state() is None
    pids = started_pids(out.stderr)
    assert len(pids) == 2
    assert not any(running(p) for p in pids), "node-1 should be stopped when node-2 fails"
    assert _free(base) and _free(base + 2)


def test_status_and_down_without_a_cluster(cluster):
    out = cluster.run("status")
    assert out.returncode == 1, explain(out)
    assert "no cluster" in out.stderr and "petrel cluster up" in out.stderr
    out = cluster.run("down")
    assert out.returncode == 0, explain(out)
    assert "nothing to stop" in out.stdout


def test_queue_stat_clustered_needs_a_clustered_broker(tmp_path):
    with BrokerProcess(tmp_path / "solo", http=True) as solo:
        url = f"http://127.0.0.1:{solo.http_port}"
        out = petrel("queue", "stat", "--clustered", "--url", url)
        assert out.returncode == 1, explain(out)
        assert out.stderr.startswith("petrel: error: --clustered: this broker is not in a cluster")
        assert out.stderr.count("\n") == 1 and not out.stdout
        out = petrel("queue", "stat", "--internal", "--url", url)
        assert out.returncode == 2, explain(out)
        assert "--internal goes with --clustered" in out.stderr
