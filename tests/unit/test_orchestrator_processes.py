"""The local backend's process seams: finding a broker restarted by hand (by its --config, by its
port, never a drainer that names the same file), and a drain attempt's outcome read back from
its files by whoever looks later (exit code, "failed" event, killed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from petrel.orchestrator import drains
from petrel.config import load_config
from petrel.orchestrator.processes import child_environment, find_broker_process, pid_listening_on
from petrel.orchestrator.state import Node
from petrel.orchestrator.tracking import track_nodes
from petrel.orchestrator.state import ClusterState
from petrel.testing.process import wait_for

LISTEN = ("import socket, sys, time\n"
          "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
          "print(s.getsockname()[1], flush=True)\n"
          "time.sleep(120)\n")


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []

    def start(*args: str) -> tuple[subprocess.Popen, int]:
        proc = subprocess.Popen([sys.executable, "-c", LISTEN, *args], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        return proc, int(proc.stdout.readline())

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def node(tmp_path: Path, port: int, pid: int = 0) -> Node:
    d = tmp_path / "node-2"
    return Node(2, "node-2", pid, port, port + 1, port + 2, str(d), str(d / "data"), str(d / "broker.toml"),
                str(d / "broker.log"))


def test_a_broker_is_found_by_its_config_but_a_drainer_naming_it_is_not(tmp_path, processes):
    config = str(tmp_path / "node-2" / "broker.toml")
    processes("drain", "--data-dir", "x", "--config", config)
    assert find_broker_process(config) is None
    broker, port = processes("run", "--config", config)
    assert find_broker_process(config) == broker.pid
    assert pid_listening_on(port) == broker.pid


def test_track_nodes_adopts_a_restarted_broker_and_only_a_broker_on_its_port(tmp_path, processes):
    other, port = processes("serve-something-else")
    state = ClusterState("c", str(tmp_path), (node(tmp_path, port, pid=999_999_999),))
    assert track_nodes(state).nodes[0].pid == 999_999_999, "a program that took the port is not adopted"
    said = []
    broker, _ = processes("petrel", "run", "--config", state.nodes[0].config)
    tracked = track_nodes(state, said.append).nodes[0]
    assert (tracked.pid, tracked.found_by) == (broker.pid, "config")
    assert said == [f"node-2 runs again (pid {broker.pid}, found by its --config); tracking it"]


def _attempt(tmp_path, monkeypatch, script: str):
    monkeypatch.setattr(drains, "drain_command", lambda n, t: ["sh", "-c", script])
    target = node(tmp_path, 1)
    record = drains.spawn_drain(tmp_path, node(tmp_path, 2), target, attempt=1, now=time.time())
    return wait_for(lambda: (r := drains.poll_drain(record, time.time())).phase != "running" and r, 30,
                    message="the drain attempt did not end")


def test_a_drain_that_exits_0_succeeded(tmp_path, monkeypatch):
    done = json.dumps({"event": "done", "messages_moved": 7})
    record = _attempt(tmp_path, monkeypatch, f"echo '{done}'")
    assert record.phase == "succeeded" and record.reason is None
    assert drains.last_progress(record) == {"event": "done", "messages_moved": 7}
    assert Path(record.rc_file).read_text().strip() == "0"


def test_a_drain_that_fails_gives_its_reason(tmp_path, monkeypatch):
    failed = json.dumps({"event": "failed", "reason": "target refuses: address full"})
    record = _attempt(tmp_path, monkeypatch, f"echo '{failed}'; exit 1")
    assert (record.phase, record.reason) == ("failed", "target refuses: address full")
    record = _attempt(tmp_path, monkeypatch, "echo 'petrel: error: disk error' >&2; exit 1")
    assert record.reason == "petrel: error: disk error"


def test_a_killed_drain_is_failed_even_for_a_later_observer(tmp_path, monkeypatch):
    monkeypatch.setattr(drains, "drain_command", lambda n, t: ["sleep", "60"])
    record = drains.spawn_drain(tmp_path, node(tmp_path, 2), node(tmp_path, 1), attempt=2, now=time.time())
    assert drains.poll_drain(record, time.time()).phase == "running"
    drains.stop_drain(record, timeout=5)
    ended = drains.poll_drain(record, time.time())
    assert (ended.phase, ended.reason) == ("failed", "the drainer was killed (no exit code)")
    assert ended.attempts == 2 and Path(record.progress).name == "node-2.attempt-2.jsonl"


def test_one_scale_at_a_time_per_data_root(tmp_path):
    from petrel.errors import UsageError
    from petrel.orchestrator.local import LocalCluster
    from petrel.orchestrator.scaling import _exclusive, scale
    from petrel.orchestrator.state import DesiredSpec

    local = LocalCluster(tmp_path)
    local._save(ClusterState("c", str(tmp_path), ()))
    with _exclusive(local):
        with pytest.raises(UsageError, match=re.escape("another `petrel cluster scale|apply` is running")):
            scale(local, DesiredSpec(1), timeout=1)


def test_messages_left_for_a_node_that_left_are_reported(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from petrel.orchestrator.scaling import stranded

    view = {"members": [], "bridges": [
        {"node_id": "aaaa", "connector": "tcp://127.0.0.1:100", "backlog": 12, "connected": False},
        {"node_id": "bbbb", "connector": "tcp://127.0.0.1:200", "backlog": 0, "connected": False},
        {"node_id": "cccc", "connector": "tcp://127.0.0.1:300", "backlog": 5, "connected": True}]}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            data = json.dumps(view).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        http = server.server_address[1]
        member = Node(1, "node-1", 1, 300, 301, http, "/n", "/n/data", "/n/broker.toml", "/n/log")
        state = ClusterState("pc", str(tmp_path), (member,))
        known = {"tcp://127.0.0.1:100": "node-2", "tcp://127.0.0.1:200": "node-3", "tcp://127.0.0.1:300": "node-1"}
        (line,) = stranded(state, known)
        assert line.startswith("node-1 holds 12 message(s) in $.petrel.sf.pc.aaaa, its store-and-forward queue "
                               "for node-2 which left the cluster")
        assert f"petrel queue stat --url http://127.0.0.1:{http}" in line
        assert stranded(state, {"tcp://127.0.0.1:300": "node-1"}) == []  # nobody left: nothing asked
    finally:
        server.shutdown()


def test_a_node_gets_the_shared_settings_of_the_environment_not_its_own_nor_a_clients(monkeypatch) -> None:
    for var in [v for v in os.environ if v.startswith("PETREL_")]:
        monkeypatch.delenv(var)
    given = {"PETREL_MAX_DISK_USAGE": "95", "PETREL_JOURNAL_FILE_SIZE": "1048576",  # every node's alike
             "PETREL_PORT": "5000", "PETREL_DATA_DIR": "/x", "PETREL_NAME": "n", "PETREL_PORT_OFFSET": "1",  # each its own
             "PETREL_URL": "tcp://h:1", "PETREL_USER": "u",  # a client's, no broker setting
             "PETREL_LOG_LEVEL": "DEBUG", "PETREL_TEST_DEADLINE": "1", "OTHER": "kept"}
    for var, value in given.items():
        monkeypatch.setenv(var, value)
    env = child_environment()
    assert {k: v for k, v in env.items() if k in given} == {
        "PETREL_MAX_DISK_USAGE": "95", "PETREL_JOURNAL_FILE_SIZE": "1048576", "PETREL_LOG_LEVEL": "DEBUG",
        "PETREL_TEST_DEADLINE": "1", "OTHER": "kept"}
    assert load_config(None, env=env).max_disk_usage == 95  # what passes is a setting the broker takes
