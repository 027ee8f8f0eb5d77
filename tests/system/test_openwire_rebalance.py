"""rebalance_cluster_clients (ActiveMQ's and Artemis's rebalanceClusterClients): a node that joins
the cluster gets a share of the other nodes' failover clients, moved by a ConnectionControl with
rebalanceConnection, while they send and consume; new clients that all name one node are spread
over the members; nothing is lost or stored twice."""

from __future__ import annotations

import re
import subprocess
import threading
from collections import Counter

import pytest

from cluster_harness import make_cluster, start_all, stop_all, wait_connected
from jms import compile_program
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system

FAST = "randomize=false&initialReconnectDelay=50&maxReconnectDelay=500"
CLIENTS = 6


class Program:
    """The Java program running, its lines read as they come."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def where(self) -> dict[int, int]:
        """client -> the port it is connected to, as last reported."""
        out = {}
        for line in list(self.lines):
            if m := re.match(r"(?:AT|FINAL) (\d+) (\d+)$", line):
                out[int(m.group(1))] = int(m.group(2))
        return out

    def finish(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.reader.join(10)


def run_rebalance(tmp_path, rebalance: bool, seconds: int, join: bool = True) -> tuple[Program, list, int]:
    """`join`: node2 starts once the clients work with node1; else both run from the start."""
    classpath = compile_program("JmsRebalance", tmp_path / "classes")
    extra = "rebalance_cluster_clients = true\n" if rebalance else ""
    node1, node2 = nodes = make_cluster(tmp_path, 2, extra_top=extra)
    start_all([node1] if join else nodes)
    program = None
    try:
        if not join:
            wait_connected(nodes)
        url = f"failover:(tcp://127.0.0.1:{node1.port})?{FAST}"
        program = Program(["java", "-cp", classpath, "JmsRebalance", url, "rb.q", str(CLIENTS), "50",
                           str(seconds)])
        if join:
            wait_for(lambda: len(program.where()) == CLIENTS, 60, 0.1)
            assert set(program.where().values()) == {node1.port}
            wait_for(lambda: sum(line.startswith("GOT") for line in program.lines) >= 20, 60, 0.1)
            node2.start()  # joins: node1's clients are asked to even out
            wait_connected(nodes)
        code = program.finish(240)
        assert code == 0, "\n".join(program.lines[-30:])
        return program, nodes, node2.port
    finally:
        if program is not None and program.proc.poll() is None:
            program.proc.kill()
        stop_all(nodes)


def test_a_joining_node_gets_a_share_of_the_failover_clients_and_nothing_is_lost_or_duplicated(tmp_path):
    program, nodes, port2 = run_rebalance(tmp_path, rebalance=True, seconds=90)
    lines = program.lines
    assert not [line for line in lines if "FAILED" in line], lines[-30:]
    final = {int(m.group(1)): int(m.group(2)) for line in lines if (m := re.match(r"FINAL (\d+) (\d+)$", line))}
    on2 = sum(port == port2 for port in final.values())
    print(f"clients on the new node: {on2} of {CLIENTS}; final {final}")
    assert 0 < on2 < CLIENTS, final
    # 6 clients, 2 members: 3 asked to move when node2 joined (a cluster link that drops and comes
    # back on a loaded machine is a join too, and moves more, either way)
    assert "rebalancing 3 of 6 OpenWire failover clients" in nodes[0].log_path.read_text(errors="replace")
    check_accounts(lines)


def check_accounts(lines: list[str]) -> None:
    sent = int(next(line.split()[1] for line in lines if line.startswith("SENT ")))
    got = [line.split() for line in lines if line.startswith("GOT ")]
    counts = Counter(g[1] for g in got)
    # every send stored once: each client's ids 0..n-1 all received, none twice as a new message
    # (a later copy can only be a redelivery the client is told of: its acknowledgement went to
    # the node it left)
    fresh = Counter(g[1] for g in got if g[2] == "false")
    assert [i for i, n in fresh.items() if n > 1] == [], "a message delivered twice as new"
    total = 0
    for c in range(CLIENTS):
        mine = sorted(int(i.split("-")[1]) for i in counts if i.startswith(f"{c}-"))
        assert mine == list(range(len(mine))), f"client {c}: a gap in what was received"
        total += len(mine)
    assert total == sent, f"sent {sent}, received {total} distinct"
    print(f"sent {sent}, received {total} distinct, {sum(counts.values()) - total} redelivered")


def test_without_the_setting_no_client_moves(tmp_path):
    program, _, port2 = run_rebalance(tmp_path, rebalance=False, seconds=15)
    final = {int(m.group(1)): int(m.group(2)) for line in program.lines
             if (m := re.match(r"FINAL (\d+) (\d+)$", line))}
    assert len(final) == CLIENTS and port2 not in final.values(), final


def test_new_failover_clients_that_all_name_one_node_are_spread_over_the_members(tmp_path):
    """Both nodes up; six clients connect through node1 only (randomize=false): node1 sends every
    other new one to node2 (ConnectionControl rebalanceConnection, the members rotated), and they
    send and consume there; every message once."""
    program, nodes, port2 = run_rebalance(tmp_path, rebalance=True, seconds=8, join=False)
    lines = program.lines
    assert not [line for line in lines if "FAILED" in line], lines[-30:]
    final = {int(m.group(1)): int(m.group(2)) for line in lines if (m := re.match(r"FINAL (\d+) (\d+)$", line))}
    print(f"final {final}")
    assert sum(port == port2 for port in final.values()) == CLIENTS // 2, final
    check_accounts(lines)
