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
import urllib.request
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

    def run(self, *args: str, as_shipped: bool = False):
        out = petrel("cluster", *args, "--data-root", str(self.root), timeout=120, as_shipped=as_shipped)
        state = self.state()
        if state:
            self.pids.update(n["pid"] for n in state["nodes"])
            if state.get("zookeeper"):
                self.pids.add(state["zookeeper"]["pid"])
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


def test_a_secured_cluster_has_one_admin_for_every_node_and_purge_forgets_it(cluster):
    """Security as shipped: `up` makes one users file for all nodes and tells the admin's password
    once; the admin logs in on every node, an anonymous client on none; `down --purge` deletes it."""
    out = cluster.run("up", "--size", "2", "--base-port", str(free_base_port(2)), as_shipped=True)
    assert out.returncode == 0, explain(out)
    users = cluster.root.resolve() / "users.toml"
    line = next(line for line in out.stderr.splitlines() if "created the users file" in line)
    assert str(users) in line and "for every node" in line
    password = line.split('password "')[1].split('"')[0]
    nodes = cluster.state()["nodes"]
    for node in nodes:
        with open(node["config"], "rb") as f:
            assert tomllib.load(f)["security"] == {"users_file": str(users)}
        url = f"tcp://127.0.0.1:{node['port']}"
        with Connection(url, user="admin", password=password) as conn:
            assert conn.node_id
        with pytest.raises(Exception, match="(?i)login|user|password|anonymous"):
            Connection(url).close()
    assert not any((Path(n["data_dir"]) / "users.toml").exists() for n in nodes)  # no admin per node
    out = cluster.run("down", "--purge", as_shipped=True)
    assert out.returncode == 0, explain(out)
    assert not users.exists()


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


# -- live-backup pairs (--ha) ---------------------------------------------------------------------
#
# `cluster up --ha` runs node-i (primary) and node-i-backup (ports +50) per pair pair-i, all in one
# cluster. Two pairs without a lock manager: when a live dies its backup asks the other live for a
# vote, and with a cluster of 2 lives one "gone" (its own view) is a majority (Artemis: floor(n/2)
# votes for n <= 2), so the backup takes over at once; a lone pair would stay a backup
# (test_ha_replication.py), which `--lock-manager zookeeper` fixes.

def free_pair_base_port(size: int) -> int:
    """A base P where every port of `size` pairs is free: P+100i+{0,1,2} and P+100i+50+{0,1,2}."""
    low, high = port_range()
    for _ in range(200):
        base = random.randrange(low, high - 100 * size, 3)
        if all(_free(base + 100 * i + off + k) for i in range(size) for off in (0, 50) for k in range(3)):
            return base
    raise RuntimeError(f"no free port block for {size} pairs")


def ha_view(node: dict) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node['http_port']}/api/v1/ha", timeout=2) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return {}


def metrics(node: dict) -> dict[str, dict[tuple, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{node['http_port']}/metrics", timeout=5) as r:
        text = r.read().decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def send(url: str, queue: str, body: bytes) -> None:
    with Connection(url) as conn:
        conn.session().producer(f"queue://{queue}").send(body, wait=True)


def receive(url: str, queue: str) -> bytes | None:
    with Connection(url) as conn:
        message = conn.session().consumer(f"queue://{queue}").receive(10)
        return None if message is None else message.body


def by_name(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {r["NODE"]: r for r in rows}


def test_replication_pairs_up_status_kill9_of_a_live_down(cluster):
    base = free_pair_base_port(2)
    out = cluster.run("up", "--size", "2", "--ha", "replication", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    rows = table(out.stdout)
    assert [(r["NODE"], r["PAIR"], r["ROLE"]) for r in rows] == [
        ("node-1", "pair-1", "primary"), ("node-2", "pair-2", "primary"),
        ("node-1-backup", "pair-1", "backup"), ("node-2-backup", "pair-2", "backup")]
    assert [r["URL"] for r in rows] == [f"tcp://127.0.0.1:{base + p}" for p in (0, 100, 50, 150)]
    assert "2 pairs" in out.stdout and "in sync" in out.stdout
    # the backups started once the lives saw each other, and `up` returned with them in sync
    stderr = out.stderr
    assert stderr.index("node-1 in the cluster") < stderr.index("started node-1-backup")
    assert "node-1-backup in sync" in stderr and "node-2-backup in sync" in stderr

    state = cluster.state()
    assert state["ha"] == "replication" and state["zookeeper"] is None
    nodes = {n["name"]: n for n in state["nodes"]}
    assert all(running(n["pid"]) for n in nodes.values())
    for name, node in nodes.items():
        config = load_config(node["config"], env={})
        pair = node["pair"]
        assert config.ha_policy.replication == node["role"] and config.ha_policy.group_name == pair
        assert config.ha_policy.lock_manager is None
        assert config.data_dir == Path(node["data_dir"]) == cluster.root.absolute() / name / "data"
        (cc,) = config.cluster_connections
        others = [n for n in nodes.values() if n["name"] != name]
        assert sorted(cc.static_connectors) == sorted(f"tcp://127.0.0.1:{n['port']}" for n in others)
        partner = [n for n in others if n["pair"] == pair]
        assert cc.static_connectors[0] == f"tcp://127.0.0.1:{partner[0]['port']}"  # its own pair first

    out = cluster.run("status")
    assert out.returncode == 0, explain(out)
    rows = by_name(table(out.stdout))
    for name in ("node-1", "node-2"):
        assert (rows[name]["HA_STATE"], rows[name]["SYNC"], rows[name]["LAG"], rows[name]["STATE"]) == \
            ("live", "in-sync", "0", "running")
    for name in ("node-1-backup", "node-2-backup"):
        assert (rows[name]["HA_STATE"], rows[name]["SYNC"], rows[name]["LAG"], rows[name]["STATE"]) == \
            ("backup", "in-sync", "0", "standby")
        assert rows[name]["MEMBERS"] == "-"
    assert "2 of 2 pairs served, 2 backups waiting; 4 of 4 brokers up" in out.stdout

    # HA metrics: a live and its in-sync backup
    live, backup = metrics(nodes["node-1"]), metrics(nodes["node-1-backup"])
    assert live["petrel_ha_live"] == {(): 1.0} and live["petrel_ha_failovers_total"] == {(): 0.0}
    assert live["petrel_ha_replica_in_sync"] == {(("peer", "backup"),): 1.0}
    assert live["petrel_ha_replication_lag_operations"] == {(("peer", "backup"),): 0.0}
    assert backup["petrel_ha_live"] == {(): 0.0} and backup["petrel_ha_failovers_total"] == {(): 0.0}
    assert backup["petrel_ha_replica_in_sync"] == {(("peer", "live"),): 1.0}
    assert backup["petrel_ha_replication_lag_operations"] == {(("peer", "live"),): 0.0}
    assert "petrel_queue_count" not in backup  # a backup serves no queues

    # `queue stat --clustered`: the lives' queues, and each live's backup noted; asked of a backup, a note
    url1, backup_url1 = (f"http://127.0.0.1:{nodes[n]['http_port']}" for n in ("node-1", "node-1-backup"))
    out = petrel("queue", "stat", "--clustered", "--url", url1)
    assert out.returncode == 0, explain(out)
    assert {r["NODE"] for r in table(out.stdout)} == {"node-1", "node-2"}
    assert f"backup of node-1: 127.0.0.1:{base + 50} (in-sync;" in out.stdout
    assert f"backup of node-2: 127.0.0.1:{base + 150} (in-sync;" in out.stdout
    out = petrel("queue", "stat", "--clustered", "--url", backup_url1)
    assert out.returncode == 0, explain(out)
    assert f"{backup_url1} is a replication backup of node {ha_view(nodes['node-1'])['node_id'][:8]} " \
           f"at 127.0.0.1:{base} (backup)" in out.stdout
    assert "serves no queues" in out.stdout and not out.stderr

    # a persistent message on node-1, replicated before the send is confirmed; then kill -9 node-1
    send(f"tcp://127.0.0.1:{base}", "ha.orch", b"kept")
    node1_id = ha_view(nodes["node-1"])["node_id"]
    os.kill(nodes["node-1"]["pid"], signal.SIGKILL)
    wait_for(lambda: not running(nodes["node-1"]["pid"]), 10, message="node-1 survived kill -9")
    # two pairs: the other live votes, one vote is enough, node-1-backup takes over node-1's node id
    view = wait_for(lambda: (v := ha_view(nodes["node-1-backup"])).get("state") == "live" and v, 30, 0.1,
                    "node-1-backup did not take over")
    assert view["node_id"] == node1_id and view["failovers"] == 1
    assert any("quorum" in line and "[event=ha.failover]" in line  # by a vote, not a handover
               for line in Path(nodes["node-1-backup"]["log"]).read_text().splitlines())
    assert receive(f"tcp://127.0.0.1:{base + 50}", "ha.orch") == b"kept"

    out = cluster.run("status")
    assert out.returncode == 1, explain(out)
    rows = by_name(table(out.stdout))
    assert (rows["node-1"]["STATE"], rows["node-1"]["HA_STATE"]) == ("stopped", "-")
    assert (rows["node-1-backup"]["ROLE"], rows["node-1-backup"]["HA_STATE"], rows["node-1-backup"]["SYNC"],
            rows["node-1-backup"]["STATE"]) == ("backup", "live", "none", "running")
    assert (rows["node-2"]["HA_STATE"], rows["node-2-backup"]["HA_STATE"]) == ("live", "backup")
    assert "2 of 2 pairs served, 1 backup waiting; 3 of 4 brokers up" in out.stdout
    took_over = metrics(nodes["node-1-backup"])
    assert took_over["petrel_ha_live"] == {(): 1.0} and took_over["petrel_ha_failovers_total"] == {(): 1.0}
    assert took_over["petrel_ha_replica_in_sync"] == {(("peer", "backup"),): 0.0}  # nothing copies it now
    assert "petrel_ha_replication_lag_operations" not in took_over

    out = cluster.run("down")
    assert out.returncode == 0, explain(out)
    assert "4 nodes stopped" in out.stdout
    assert not any(running(n["pid"]) for n in nodes.values())
    assert cluster.state() is None
    assert all(_free(n[k]) for n in nodes.values() for k in ("port", "stomp_port", "http_port"))


def test_shared_store_pairs_up_status_kill9_of_a_live_down(cluster):
    base = free_pair_base_port(2)
    out = cluster.run("up", "--size", "2", "--ha", "shared-store", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    assert "node-2-backup waiting as a backup" in out.stderr
    nodes = {n["name"]: n for n in cluster.state()["nodes"]}
    for i in (1, 2):
        primary, backup = nodes[f"node-{i}"], nodes[f"node-{i}-backup"]
        assert backup["data_dir"] == primary["data_dir"]  # one data directory per pair
        assert load_config(backup["config"], env={}).ha_policy.shared_store == "backup"
        assert load_config(primary["config"], env={}).ha_policy.shared_store == "primary"

    out = cluster.run("status")
    assert out.returncode == 0, explain(out)
    rows = by_name(table(out.stdout))
    assert [(rows[n]["HA_STATE"], rows[n]["SYNC"], rows[n]["LAG"], rows[n]["STATE"]) for n in nodes] == [
        ("live", "-", "-", "running"), ("live", "-", "-", "running"),
        ("backup", "-", "-", "standby"), ("backup", "-", "-", "standby")]
    backup = metrics(nodes["node-2-backup"])
    assert backup["petrel_ha_live"] == {(): 0.0}
    assert "petrel_ha_replica_in_sync" not in backup  # nothing is replicated in a shared store

    send(f"tcp://127.0.0.1:{base + 100}", "ha.shared", b"on disk")
    os.kill(nodes["node-2"]["pid"], signal.SIGKILL)
    wait_for(lambda: ha_view(nodes["node-2-backup"]).get("state") == "live", 30, 0.1,
             "node-2-backup did not take over the shared store")
    assert receive(f"tcp://127.0.0.1:{base + 150}", "ha.shared") == b"on disk"
    out = cluster.run("status")
    assert out.returncode == 1, explain(out)
    rows = by_name(table(out.stdout))
    assert (rows["node-2"]["STATE"], rows["node-2-backup"]["HA_STATE"], rows["node-2-backup"]["STATE"]) == \
        ("stopped", "live", "running")
    assert metrics(nodes["node-2-backup"])["petrel_ha_failovers_total"] == {(): 1.0}

    out = cluster.run("down", "--purge")
    assert out.returncode == 0, explain(out)
    assert not any(running(n["pid"]) for n in nodes.values())
    assert not any(Path(n["node_dir"]).exists() for n in nodes.values())


def test_replication_with_a_zookeeper_lock_manager(cluster):
    from petrel.testing.zookeeper import four_letter_word, zookeeper_available

    missing = zookeeper_available()
    if missing:
        pytest.skip(missing)
    base = free_pair_base_port(1)
    out = cluster.run("up", "--size", "1", "--ha", "replication", "--lock-manager", "zookeeper",
                      "--lock-session-ms", "2000", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    state = cluster.state()
    zk = state["zookeeper"]
    assert running(zk["pid"]) and "Mode: standalone" in four_letter_word("127.0.0.1", zk["port"], "srvr")
    assert f"ZooKeeper on 127.0.0.1:{zk['port']}" in out.stdout
    nodes = {n["name"]: n for n in state["nodes"]}
    for node in nodes.values():
        lock = load_config(node["config"], env={}).ha_policy.lock_manager
        assert (lock.type, lock.connect_string, lock.session_ms) == ("zookeeper", f"127.0.0.1:{zk['port']}", 2000)

    out = cluster.run("status")
    assert out.returncode == 0, explain(out)
    assert f"ZooKeeper 127.0.0.1:{zk['port']} running" in out.stdout
    out = petrel("ha", "status", "--url", f"http://127.0.0.1:{nodes['node-1']['http_port']}")
    assert out.returncode == 0, explain(out)
    assert dict((r["PROPERTY"], r["VALUE"]) for r in table(out.stdout.split("\n+", 1)[0]))["lock manager"] == \
        "zookeeper"

    # a lone pair with a lock manager fails over by itself: once the dead live's session expires
    os.kill(nodes["node-1"]["pid"], signal.SIGKILL)
    started = time.monotonic()
    wait_for(lambda: ha_view(nodes["node-1-backup"]).get("state") == "live", 30, 0.1,
             "node-1-backup did not take over with the lock")
    assert time.monotonic() - started < 20

    out = cluster.run("down")
    assert out.returncode == 0, explain(out)
    assert "2 nodes and ZooKeeper stopped" in out.stdout and "stopping zookeeper" in out.stderr
    assert not running(zk["pid"]) and _free(zk["port"])
    assert not any(running(n["pid"]) for n in nodes.values())


def test_up_ha_usage_errors_start_nothing(cluster):
    out = cluster.run("up", "--size", "1", "--lock-manager", "zookeeper")
    assert out.returncode == 2, explain(out)
    assert "--lock-manager goes with --ha replication" in out.stderr
    out = cluster.run("up", "--size", "1", "--ha", "shared-store", "--lock-manager", "zookeeper")
    assert out.returncode == 2, explain(out)
    out = cluster.run("up", "--size", "1", "--ha", "mirror")
    assert out.returncode == 2, explain(out)
    assert cluster.state() is None and not cluster.root.exists()
    base = free_pair_base_port(1)
    with socket.create_server(("127.0.0.1", base + 52)):  # node-1-backup's HTTP port
        out = cluster.run("up", "--size", "1", "--ha", "replication", "--base-port", str(base))
    assert out.returncode == 2, explain(out)
    assert f"port {base + 52} (HTTP port of node-1-backup)" in out.stderr
    assert cluster.state() is None
