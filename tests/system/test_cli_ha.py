"""`petrel ha status` against real brokers: a replicating pair (live, backup, after a handover),
a live-only broker, and URLs that do not lead to one."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cli_process import petrel
from petrel.testing.ha import ha_view, make_pair, wait_in_sync
from petrel.testing.process import BrokerProcess, free_port, wait_for

pytestmark = pytest.mark.system


def explain(out) -> str:
    return f"exit {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"


def tables(out: str) -> list[list[dict[str, str]]]:
    """Each ASCII table in `out` (between a top and a bottom "+---" border), as rows keyed by header."""
    found: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in out.splitlines():
        if line.startswith("+"):
            if current is None:
                current = []
            else:
                found.append(current)
                current = None
        elif current is not None and line.startswith("|") and not line.startswith("|-"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
    return [[dict(zip(t[0], r)) for r in t[1:]] for t in found if t]


def properties(out: str) -> dict[str, str]:
    return {r["PROPERTY"]: r["VALUE"] for r in tables(out)[0]}


def ha_status(node: BrokerProcess, *args: str):
    return petrel("ha", "status", "--url", f"http://127.0.0.1:{node.http_port}", *args)


def test_ha_status_of_a_replicating_live_its_backup_and_after_a_handover(tmp_path):
    p, b = make_pair(tmp_path, primary="failover_on_shutdown = true\ngroup_name = \"orders\"\n",
                     backup="group_name = \"orders\"\n")
    try:
        p.start()
        b.start(wait=False)
        wait_in_sync(b)
        live_id = ha_view(p)["node_id"]

        out = ha_status(b)
        assert out.returncode == 0, explain(out)
        props = properties(out.stdout)
        assert {k: props[k] for k in ("name", "health", "policy", "role", "state", "failovers", "group",
                                      "lock manager", "allow failback")} == {
            "name": "pair-backup", "health": "backup", "policy": "replication", "role": "backup", "state": "backup",
            "failovers": "0", "group": "orders", "lock manager": "none", "allow failback": "true"}
        (link,) = tables(out.stdout)[1]
        assert (link["LINK"], link["PEER_NODE_ID"], link["CONNECTOR"], link["STATE"], link["LAG"]) == (
            "from live", live_id, f"127.0.0.1:{p.port}", "in-sync", "0")
        assert link["OPERATIONS"] == link["APPLIED"] and int(link["BYTES"]) > 0
        assert out.stdout.rstrip().splitlines()[-1] == (
            f"pair-backup: backup in orders (replication), waiting as a backup; its copy of the live at "
            f"127.0.0.1:{p.port} is in-sync, lag 0 operations")

        out = ha_status(b, "--json")
        assert out.returncode == 0, explain(out)
        view = json.loads(out.stdout)
        assert (view["role"], view["state"], view["replication"]["live"]["state"]) == ("backup", "backup", "in-sync")

        out = ha_status(p)
        assert out.returncode == 0, explain(out)
        props = properties(out.stdout)
        assert (props["name"], props["health"], props["role"], props["state"], props["failover on shutdown"]) == (
            "pair-primary", "ok", "primary", "live", "true")
        (link,) = tables(out.stdout)[1]
        assert (link["LINK"], link["CONNECTOR"], link["STATE"], link["APPLIED"]) == (
            "to backup", f"127.0.0.1:{b.port}", "in-sync", "-")
        assert link["SYNCED_AT"] != "-"

        # the primary hands over on SIGTERM (failover_on_shutdown); the backup then serves its node id
        assert p.stop() == 0
        assert b.wait_state("ok", timeout=30) == "ok"
        out = wait_for(lambda: (o := ha_status(b)).returncode == 0 and "state" in o.stdout
                       and properties(o.stdout)["state"] == "live" and o, 30, 0.2, "the backup never showed live")
        props = properties(out.stdout)
        assert (props["role"], props["failovers"], props["node id"], props["health"]) == ("backup", "1", live_id, "ok")
        assert out.stdout.rstrip().splitlines()[-1] == (
            f"pair-backup: backup in orders (replication), serving (it took over node {live_id}); "
            "no backup holds a copy of its data")

        # the stopped primary's URL: exit 1, and what to check
        out = ha_status(p)
        assert out.returncode == 1, explain(out)
        assert out.stderr.startswith(f"petrel: error: cannot reach the broker at http://127.0.0.1:{p.http_port}")
        assert "Check --url" in out.stderr and out.stderr.count("\n") == 1 and not out.stdout
    finally:
        for node in (p, b):
            if node.proc is not None and node.proc.poll() is None:
                node.kill9()


def test_ha_status_of_a_live_only_broker(tmp_path):
    with BrokerProcess(tmp_path / "solo", name="solo", http=True) as solo:
        out = ha_status(solo)
        assert out.returncode == 0, explain(out)
        props = properties(out.stdout)
        assert (props["policy"], props["role"], props["state"], props["health"]) == ("live_only", "live", "live", "ok")
        assert "group" not in props and len(tables(out.stdout)) == 1  # no replication, no link table
        assert out.stdout.rstrip().splitlines()[-1] == "solo: live-only (no backup), serving"


class _NotPetrel(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_ha_status_urls_that_lead_to_no_broker():
    out = petrel("ha", "status", "--url", "tcp://127.0.0.1:61616")
    assert out.returncode == 2, explain(out)
    assert "--url must be an http:// URL" in out.stderr

    port = free_port()
    out = petrel("ha", "status", "--url", f"http://127.0.0.1:{port}")
    assert out.returncode == 1, explain(out)
    assert "connection refused" in out.stderr and "Check --url: the broker's management URL" in out.stderr

    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotPetrel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = petrel("ha", "status", "--url", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 1, explain(out)
    assert "has no /api/v1/ha: is it a Petrel broker's management URL" in out.stderr
