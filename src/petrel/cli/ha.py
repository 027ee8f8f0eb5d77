"""``petrel ha status``: one broker's part in its live-backup pair, from ``GET /api/v1/ha``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import click

from petrel.cli.queue import client_options, make_client
from petrel.cli.tables import print_table
from petrel.management.client import ManagementError

__all__ = ["ha"]

#: The replication links of /api/v1/ha: its key, how the table names it, the peer's node id key and connector key.
_LINKS = (("backup", "to backup", "backup_node_id", "backup_connector"),
          ("live", "from live", "live_node_id", "live_connector"))
_LINK_COLUMNS = ["LINK", "PEER_NODE_ID", "CONNECTOR", "STATE", "LAG", "OPERATIONS", "APPLIED", "BYTES", "WAITING",
                 "SYNCED_AT"]


@click.group("ha", help="High availability: how a broker pairs with its backup.")
def ha() -> None:
    pass


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _health(url: str, timeout: float = 5.0) -> dict[str, Any]:
    """The broker's /health body, a 503's included (a waiting backup answers 503); {} when none."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read()
    except (urllib.error.URLError, OSError):
        return {}
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _link_rows(repl: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key, label, node_key, connector_key in _LINKS:
        side = repl.get(key)
        if not isinstance(side, dict):
            continue
        sent = key == "backup"
        rows.append([label, _text(side.get(node_key)), _text(side.get(connector_key)), _text(side.get("state")),
                     _text(side.get("lag_operations")),
                     _text(side.get("operations_sent") if sent else side.get("received_seq")),
                     _text(None if sent else side.get("applied_seq")),
                     _text(side.get("bytes_sent") if sent else side.get("bytes_received")),
                     _text(side.get("waiting_confirmations") if sent else None),
                     _text(side.get("synced_at") if sent else None)])
    return rows


_STATES = {"live": "serving", "backup": "waiting as a backup", "syncing": "copying the live's data",
           "failing-back": "handing back to its primary", "starting": "starting", "stopped": "stopped"}


def summary(view: dict[str, Any], name: str | None = None) -> str:
    """One line: what this broker is now, and how its copy stands."""
    who = name or (view.get("node_id") or "this broker")[:8]
    policy, role, state = view.get("policy"), view.get("role"), view.get("state")
    doing = _STATES.get(state, state)
    if policy == "live_only":
        return f"{who}: live-only (no backup), {doing}"
    repl = view.get("replication") if isinstance(view.get("replication"), dict) else None
    group = repl.get("group_name") if repl else None
    text = f"{who}: {role} " + (f"in {group} ({policy.replace('_', ' ')})" if group else
                                f"of a {policy.replace('_', ' ')} pair") + f", {doing}"
    if state == "live" and role == "backup":
        text += f" (it took over node {view.get('node_id')})"
    if repl:
        backup, live = repl.get("backup"), repl.get("live")
        if isinstance(live, dict):
            text += (f"; its copy of the live at {live.get('live_connector')} is {live.get('state')}, "
                     f"lag {live.get('lag_operations')} operations")
        elif isinstance(backup, dict):
            text += (f"; its backup at {backup.get('backup_connector')} is {backup.get('state')}, "
                     f"lag {backup.get('lag_operations')} operations")
        elif state == "live":
            text += "; no backup holds a copy of its data"
    return text


@ha.command("status", help="The broker's HA policy, role, state (live, backup, syncing, failing-back, stopped), "
                            "failovers and, with replication, its copy: to its backup (on a live) or from its "
                            "live (on a backup), state and lag in operations.")
@client_options
@click.option("--json", "as_json", is_flag=True, help="Print /api/v1/ha as JSON instead of tables.")
def status(url: str | None, port_offset: int, as_json: bool) -> None:
    client = make_client(url, port_offset)
    try:
        view = client.get("/api/v1/ha")
    except ManagementError as exc:
        if exc.status == 404:
            raise ManagementError(f"{client.url} has no /api/v1/ha: is it a Petrel broker's management URL, "
                                  "of a version with HA?", exc.status) from None
        if exc.status is None:
            raise ManagementError(f"{exc} Check --url: the broker's management URL (http://host:http_port, "
                                  "8161 by default), not its tcp:// port") from None
        raise
    if as_json:
        click.echo(json.dumps(view, indent=2))
        return
    health = _health(client.url)
    name = health.get("name")
    repl = view.get("replication") if isinstance(view.get("replication"), dict) else {}
    lock = repl.get("lock_manager") if repl else None
    rows = [
        ["name", _text(name)],
        ["health", _text(health.get("status")) if health else "no answer from /health"],
        ["node id", _text(view.get("node_id"))],
        ["policy", _text(view.get("policy"))],
        ["role", _text(view.get("role"))],
        ["state", _text(view.get("state"))],
        ["since", _text(view.get("since"))],
        ["failovers", _text(view.get("failovers"))],
        ["failover on shutdown", _text(view.get("failover_on_shutdown"))],
        ["allow failback", _text(view.get("allow_failback"))],
    ]
    if repl:
        rows += [["group", _text(repl.get("group_name"))], ["lock manager", lock or "none"]]
    print_table(["PROPERTY", "VALUE"], rows)
    links = _link_rows(repl) if repl else []
    if links:
        print_table(_LINK_COLUMNS, links, right={"LAG", "OPERATIONS", "APPLIED", "BYTES", "WAITING"})
    click.echo(summary(view, name))
