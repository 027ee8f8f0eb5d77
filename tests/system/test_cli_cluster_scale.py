"""`petrel cluster scale|apply` as real commands on a cluster of real brokers, draining with the
real `petrel drain`: persistent messages on every node, scale 3 -> 1, every message consumed
exactly once from the node that stays, the leaving nodes' directories deleted only after their
drains exited 0; a crash beyond the size drained too; scale back up on empty directories; a
failing drain retried while `cluster status` shows it; nodes restarted by hand tracked by
`status` and stopped by `down`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cli_process import environment, petrel
from petrel.client import Connection
from petrel.config import load_config
from petrel.testing.process import wait_for
from test_cli_cluster import Cluster, explain, free_base_port, running, table

pytestmark = pytest.mark.system

QUEUE = "orders"


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "cluster")
    try:
        yield c
    finally:
        c.cleanup()


def send(url: str, tag: str, count: int) -> list[str]:
    """``count`` persistent messages to QUEUE on one node, each confirmed."""
    bodies = [f"{tag}-{i}" for i in range(count)]
    with Connection(url) as conn:
        producer = conn.session().producer(f"queue://{QUEUE}")
        for body in bodies:
            producer.send(body.encode(), wait=True)
    return bodies


def consume_all(url: str, expected: int) -> list[str]:
    """Everything QUEUE holds on one node: ``expected`` messages, then nothing more for 2 s."""
    got = []
    with Connection(url) as conn:
        consumer = conn.session().consumer(f"queue://{QUEUE}")
        while len(got) < expected:
            message = consumer.receive(15)
            assert message is not None, f"only {len(got)} of {expected} messages came"
            got.append(message.body.decode())
        extra = consumer.receive(2)
        assert extra is None, f"one more than the {expected} sent: {extra.body!r}"
    return got


def drain_events(root: Path, node: str) -> list[dict]:
    lines = []
    for path in sorted((root / "drains").glob(f"{node}.attempt-*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def test_scale_3_to_1_moves_every_message_exactly_once_then_deletes(cluster):
    base = free_base_port(3)
    out = cluster.run("up", "--size", "3", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    nodes = cluster.state()["nodes"]
    sent = []
    for node in nodes:
        sent += send(f"tcp://127.0.0.1:{node['port']}", node["name"], 40)

    out = cluster.run("scale", "--size", "1", "--timeout", "100")
    assert out.returncode == 0, explain(out)
    lines = out.stderr.splitlines()

    # nodes 3 then 2 stopped, drained onto node-1, and deleted only after their drain succeeded
    for name in ("node-3", "node-2"):
        succeeded = next(i for i, line in enumerate(lines) if line.startswith(f"drain of {name} succeeded"))
        deleted = next(i for i, line in enumerate(lines) if line.startswith(f"deleted {cluster.root.absolute() / name}"))
        assert succeeded < deleted, out.stderr
        assert not (cluster.root / name).exists()
        events = drain_events(cluster.root, name)
        assert events[-1]["event"] == "done" and events[-1]["messages_moved"] == 40, events
        assert any(e["event"] == "progress" for e in events) or events[-1]["messages_moved"] == 40
    stops = [line for line in lines if line.startswith("stopping node-")]
    assert stops[:2] == [line for line in stops if "node-3" in line][:1] + [line for line in stops if "node-2" in line][:1]
    assert (cluster.root / "node-1" / "data").exists()

    state = cluster.state()
    assert [n["name"] for n in state["nodes"]] == ["node-1"] and state["spec"]["size"] == 1
    (cc,) = load_config(state["nodes"][0]["config"], env={}).cluster_connections
    assert cc.static_connectors == [], "node-1's next start forgets the nodes that left"
    assert {d["node"]: d["phase"] for d in state["drains"]} == {"node-2": "deleted", "node-3": "deleted"}

    status = petrel("cluster", "status", "--data-root", str(cluster.root))
    assert status.returncode == 0, explain(status)
    drains = [r for r in table(status.stdout.split("cluster petrel-cluster: 1 of 1 nodes running")[1]) if "DRAIN" in r]
    assert {r["DRAIN"]: (r["STATE"], r["MOVED"]) for r in drains} == {
        "node-2": ("succeeded, directory deleted", "40"), "node-3": ("succeeded, directory deleted", "40")}

    got = consume_all(f"tcp://127.0.0.1:{nodes[0]['port']}", len(sent))
    assert sorted(got) == sorted(sent), "every message exactly once"
    for node in nodes:  # order kept per origin
        mine = [b for b in got if b.startswith(node["name"] + "-")]
        assert mine == [f"{node['name']}-{i}" for i in range(40)]


def test_a_crash_beyond_the_size_is_drained_and_scale_up_starts_empty(cluster):
    base = free_base_port(3)
    out = cluster.run("up", "--size", "3", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    nodes = cluster.state()["nodes"]
    sent = send(f"tcp://127.0.0.1:{nodes[2]['port']}", "n3", 25) + send(f"tcp://127.0.0.1:{nodes[1]['port']}", "n2", 5)
    os.kill(nodes[2]["pid"], signal.SIGKILL)
    wait_for(lambda: not running(nodes[2]["pid"]), 10, message="node-3 still running after kill -9")

    spec = cluster.root.parent / "spec.toml"
    spec.write_text("size = 2\npersistence_enabled = true\nmessage_migration = true\n")
    out = cluster.run("apply", str(spec), "--timeout", "100")
    assert out.returncode == 0, explain(out)
    assert "drain of node-3 succeeded" in out.stderr and not (cluster.root / "node-3").exists()
    assert "stopping node-2" not in out.stderr

    out = cluster.run("scale", "--size", "3", "--timeout", "120")
    assert out.returncode == 0, explain(out)
    assert "started node-3" in out.stderr and "on an empty data directory" in out.stderr
    state = cluster.state()
    assert [n["name"] for n in state["nodes"]] == ["node-1", "node-2", "node-3"]
    assert all(running(n["pid"]) for n in state["nodes"])
    # one consumer on node-1 draws the whole cluster's (redistribution): each message once, and
    # nothing stale from the new node-3
    got = consume_all(f"tcp://127.0.0.1:{nodes[0]['port']}", len(sent))
    assert sorted(got) == sorted(sent)


def test_a_failing_drain_is_retried_and_shown_then_succeeds(cluster):
    """The target refuses node-2's drainer (a wrong cluster password): each attempt fails with the
    reason, the directory is kept, `scale` times out saying why, `status` shows the drain failed;
    once the cause is fixed, a rerun drains and deletes."""
    base = free_base_port(2)
    out = cluster.run("up", "--size", "2", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    nodes = cluster.state()["nodes"]
    sent = send(f"tcp://127.0.0.1:{nodes[1]['port']}", "n2", 10)
    # the drainer's target refuses it: a wrong cluster password in node-2's config
    config = Path(nodes[1]["config"])
    good = config.read_text()
    config.write_text("\n".join("cluster_password = \"wrong\"" if line.startswith("cluster_password") else line
                                for line in good.splitlines()) + "\n")
    out = cluster.run("scale", "--size", "1", "--timeout", "8")
    assert out.returncode == 1, explain(out)
    assert "drain of node-2 failed (attempt 1)" in out.stderr and "its data directory is kept" in out.stderr
    assert "not converged within 8 s" in out.stderr and "run this again to carry on" in out.stderr
    assert (cluster.root / "node-2" / "data").exists()

    status = petrel("cluster", "status", "--data-root", str(cluster.root))
    assert status.returncode == 1, explain(status)
    (row,) = [r for r in table(status.stdout.split("nodes running")[1]) if "DRAIN" in r]
    # failed, or already retrying (the next attempt starts after its backoff): the error is shown
    assert row["DRAIN"] == "node-2" and row["STATE"] in ("failed", "running") and row["LAST_ERROR"] != "-", row

    config.write_text(good)
    out = cluster.run("scale", "--size", "1", "--timeout", "120")
    assert out.returncode == 0, explain(out)
    assert "drain of node-2 succeeded" in out.stderr and not (cluster.root / "node-2").exists()
    assert sorted(consume_all(f"tcp://127.0.0.1:{nodes[0]['port']}", 10)) == sorted(sent)


def test_a_node_restarted_by_hand_is_tracked_and_stopped_by_down(cluster):
    base = free_base_port(2)
    out = cluster.run("up", "--size", "2", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    node = cluster.state()["nodes"][1]
    os.kill(node["pid"], signal.SIGKILL)
    wait_for(lambda: not running(node["pid"]), 10, message="node-2 still running after kill -9")
    with open(node["log"], "ab") as log:  # the operator starts it again, by hand
        proc = subprocess.Popen([sys.executable, "-m", "petrel", "run", "--config", node["config"]], stdout=log,
                                stderr=subprocess.STDOUT, env=environment(), start_new_session=True)
    cluster.pids.add(proc.pid)
    try:
        said = []

        def serving():
            out = petrel("cluster", "status", "--data-root", str(cluster.root))
            said.append(out.stderr)
            return out if out.returncode == 0 else None
        status = wait_for(serving, 60, interval=0.5, message="node-2 not seen running again")
        rows = {r["NODE"]: r for r in table(status.stdout)}
        assert rows["node-2"]["PID"] == str(proc.pid) and rows["node-2"]["STATE"] == "running"
        assert f"node-2 runs again (pid {proc.pid}, found by its --config); tracking it" in "".join(said)
        assert cluster.state()["nodes"][1]["pid"] == proc.pid

        out = petrel("cluster", "down", "--data-root", str(cluster.root), "--timeout", "20")
        assert out.returncode == 0, explain(out)
        assert f"stopping node-2 (pid {proc.pid})" in out.stderr
        assert proc.wait(timeout=30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("args", "words"), [
    (["scale"], "give --size N or --spec FILE"),
    (["scale", "--size", "0"], "0 is not in the range"),
])
def test_scale_usage_errors(cluster, args, words):
    out = petrel("cluster", *args, "--data-root", str(cluster.root))
    assert out.returncode == 2 and words in out.stderr, explain(out)


@pytest.mark.parametrize(("text", "words"), [
    ("size = 2\nreplicas = 3\n", "unknown key 'replicas'"),
    ("size = \"two\"\n", "size must be an integer"),
    ("persistence_enabled = true\n", "size (at least 1) is required"),
    ("size = [", "is not TOML"),
])
def test_apply_refuses_a_bad_spec(tmp_path, text, words):
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    out = petrel("cluster", "apply", str(spec), "--data-root", str(tmp_path / "none"))
    assert out.returncode == 2 and words in out.stderr, explain(out)


def test_scale_3_to_1_under_load_over_stomp_and_core(cluster):
    """Messages left on nodes 2 (CORE) and 3 (STOMP), and producers on node-1 over both protocols
    while the scale runs: every confirmed message consumed exactly once from node-1, none of the
    unconfirmed twice, each producer's messages in order."""
    import threading
    from collections import Counter

    import stomp

    from conftest import Listener

    base = free_base_port(3)
    out = cluster.run("up", "--size", "3", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    nodes = cluster.state()["nodes"]
    confirmed: dict[str, list[str]] = {"core-n2": [], "stomp-n3": [], "core-n1": [], "stomp-n1": []}
    attempted: dict[str, list[str]] = {k: [] for k in confirmed}
    confirmed["core-n2"] = send(f"tcp://127.0.0.1:{nodes[1]['port']}", "core-n2", 150)
    attempted["core-n2"] = list(confirmed["core-n2"])

    def stomp_producer(port: int, name: str, stop: threading.Event | None, count: int | None) -> None:
        conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
        listener = Listener()
        conn.set_listener("l", listener)
        conn.connect("guest", "guest", wait=True)
        try:
            i = 0
            while (stop is None or not stop.is_set()) and (count is None or i < count):
                body = f"{name}-{i}"
                attempted[name].append(body)
                conn.send(f"/queue/{QUEUE}", body, headers={"receipt": body, "persistent": "true"})
                assert listener.receipts.get(timeout=20) == body
                confirmed[name].append(body)
                i += 1
        finally:
            conn.disconnect()

    def core_producer(url: str, name: str, stop: threading.Event) -> None:
        with Connection(url) as conn:
            producer = conn.session().producer(f"queue://{QUEUE}")
            i = 0
            while not stop.is_set():
                body = f"{name}-{i}"
                attempted[name].append(body)
                producer.send(body.encode(), wait=True)
                confirmed[name].append(body)
                i += 1

    stomp_producer(nodes[2]["stomp_port"], "stomp-n3", None, 150)
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(stomp_producer, nodes[0]["stomp_port"], "stomp-n1", stop, None)),
               threading.Thread(target=guarded, args=(core_producer, f"tcp://127.0.0.1:{nodes[0]['port']}", "core-n1",
                                                      stop))]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(confirmed["stomp-n1"]) > 5 and len(confirmed["core-n1"]) > 5, 30,
                 message="the producers on node-1 did not start")
        out = cluster.run("scale", "--size", "1", "--timeout", "100")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert out.returncode == 0, explain(out)
    assert not errors, errors
    assert not (cluster.root / "node-2").exists() and not (cluster.root / "node-3").exists()

    total_confirmed = sum(len(v) for v in confirmed.values())
    got = consume_all(f"tcp://127.0.0.1:{nodes[0]['port']}", total_confirmed)
    counts = Counter(got)
    assert [b for b, n in counts.items() if n > 1] == [], "nothing twice"
    for name, bodies in confirmed.items():
        assert set(bodies) <= counts.keys(), f"{name}: lost {sorted(set(bodies) - counts.keys())[:5]}"
        mine = [b for b in got if b.rsplit("-", 1)[0] == name]
        assert mine == sorted(mine, key=lambda b: int(b.rsplit("-", 1)[1])), f"{name}: out of order"
    assert len(confirmed["core-n1"]) > 5 and len(confirmed["stomp-n1"]) > 5


def _freeze_when_draining(cluster, target: int) -> None:
    """SIGSTOP the target as soon as the state file records a drain (the drainer is then still
    starting: its recovery alone takes longer than this poll)."""
    wait_for(lambda: cluster.state().get("drains"), 30, interval=0.005, message="no drain was recorded")
    os.kill(target, signal.SIGSTOP)


def _thaw_when_gone(cluster, target: int) -> None:
    """SIGCONT the frozen target once no drain is running (so `down` can then stop it)."""
    def drains_gone() -> bool:
        return not any(running(d["pid"]) for d in cluster.state().get("drains", []))
    try:
        wait_for(drains_gone, 60, message="the drain is still running")
    finally:
        os.kill(target, signal.SIGCONT)


def test_down_stops_a_running_drain_and_keeps_its_directory(cluster):
    base = free_base_port(2)
    out = cluster.run("up", "--size", "2", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    nodes = cluster.state()["nodes"]
    out = petrel("producer", "--url", f"tcp://127.0.0.1:{nodes[1]['port']}", "--destination", f"queue://{QUEUE}",
                 "--message-count", "100000", "--message-size", "1024", timeout=120)
    assert out.returncode == 0, explain(out)
    # the target is frozen (SIGSTOP) from the moment the drain is recorded until it is gone, so
    # the drain cannot finish before `down` comes to it however fast it moves 100,000 messages
    target = nodes[0]["pid"]
    freeze = threading.Thread(target=_freeze_when_draining, args=(cluster, target), daemon=True)
    thaw = threading.Thread(target=_thaw_when_gone, args=(cluster, target), daemon=True)
    freeze.start()
    try:
        out = cluster.run("scale", "--size", "1", "--timeout", "1")
        freeze.join(30)
        assert out.returncode == 1 and "not converged within 1 s" in out.stderr, explain(out)
        (record,) = cluster.state()["drains"]
        assert record["phase"] == "running" and running(record["pid"]), "the drain goes on after `scale` gave up waiting"
        thaw.start()
        out = petrel("cluster", "down", "--data-root", str(cluster.root), "--timeout", "20")
    finally:
        os.kill(target, signal.SIGCONT)
    assert out.returncode == 0, explain(out)
    assert f"stopping the drain of node-2 (pid {record['pid']}); its data directory is kept" in out.stderr
    assert not running(record["pid"])
    assert (cluster.root / "node-2" / "data").exists()


def test_without_message_migration_a_leaving_node_keeps_its_data_for_its_return(cluster):
    base = free_base_port(2)
    out = cluster.run("up", "--size", "2", "--base-port", str(base))
    assert out.returncode == 0, explain(out)
    nodes = cluster.state()["nodes"]
    sent = send(f"tcp://127.0.0.1:{nodes[1]['port']}", "n2", 10)
    out = cluster.run("scale", "--size", "1", "--no-message-migration", "--timeout", "60")
    assert out.returncode == 0, explain(out)
    assert "kept retired data of node-2 (message migration off)" in out.stdout
    assert "draining" not in out.stderr and (cluster.root / "node-2" / "data").exists()
    status = petrel("cluster", "status", "--data-root", str(cluster.root))
    assert status.returncode == 0, explain(status)
    assert {r["NODE"]: r["STATE"] for r in table(status.stdout)} == {"node-1": "running", "node-2": "retired"}

    out = cluster.run("scale", "--size", "2", "--timeout", "60")
    assert out.returncode == 0, explain(out)
    assert "node-2 comes back before any drain touched its data directory: it keeps it" in out.stderr
    state = cluster.state()
    assert state["spec"] == {"size": 2, "persistence_enabled": True, "message_migration": False}
    assert sorted(consume_all(f"tcp://127.0.0.1:{state['nodes'][1]['port']}", 10)) == sorted(sent)
