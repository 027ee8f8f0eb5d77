"""`petrel queue stat|create|delete|purge`: queues through the management API, like `artemis queue`."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import click

from petrel.cli.tables import print_table

from petrel.management.client import ManagementClient, ManagementError, default_url

__all__ = ["queue", "client_options", "make_client", "quote"]

# The `artemis queue stat` columns, in its order, and the API keys behind them.
STAT_COLUMNS = (
    ("NAME", "name"),
    ("ADDRESS", "address"),
    ("CONSUMER_COUNT", "consumer_count"),
    ("MESSAGE_COUNT", "message_count"),
    ("MESSAGES_ADDED", "messages_added"),
    ("DELIVERING_COUNT", "delivering_count"),
    ("MESSAGES_ACKED", "messages_acked"),
    ("SCHEDULED_COUNT", "scheduled_count"),
    ("ROUTING_TYPE", "routing_type"),
)
_KEYS = dict(STAT_COLUMNS)
_TEXT_KEYS = ("node", "name", "address", "routing_type")
#: `queue stat --clustered`: which node each row comes from, then the usual columns.
CLUSTER_COLUMNS = (("NODE", "node"), *STAT_COLUMNS)
#: Queues of the broker's own machinery (store-and-forward queues), left out of --clustered.
INTERNAL_PREFIX = "$.petrel."
OPERATIONS = ("CONTAINS", "NOT_CONTAINS", "EQUALS", "GREATER_THAN", "LESS_THAN")


def _remember(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    ctx.meta[f"petrel.management.{param.name}"] = value
    return value


def client_options(fn: Callable) -> Callable:
    """--url, --port-offset, --user and --password, shared by the commands that talk to the
    management API (the credentials reach `make_client` through the click context)."""
    fn = click.option("--password", envvar="PETREL_PASSWORD", default=None, expose_value=False, callback=_remember,
                      help="Password of --user (env PETREL_PASSWORD).")(fn)
    fn = click.option("--user", envvar="PETREL_USER", default=None, expose_value=False, callback=_remember,
                      help="User for the management API, HTTP basic authentication (env PETREL_USER); "
                           "reads need the view permission, changes manage.")(fn)
    fn = click.option("--port-offset", type=click.IntRange(0, 65535), default=0, show_default=True,
                      help="Added to the default URL's port (8161), as for `petrel run --port-offset`.")(fn)
    fn = click.option("--url", envvar="PETREL_MANAGEMENT_URL", default=None, metavar="URL",
                      help="Management API of the broker [default: http://127.0.0.1:8161] "
                           "(env PETREL_MANAGEMENT_URL).")(fn)
    return fn


def make_client(url: str | None, port_offset: int) -> ManagementClient:
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    return ManagementClient(url or default_url(port_offset), user=meta.get("petrel.management.user"),
                            password=meta.get("petrel.management.password"))


def quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


@click.group("queue", help="Inspect and manage queues through the broker's management API.")
def queue() -> None:
    pass


# -- stat -----------------------------------------------------------------------------------

def _matches(q: dict[str, Any], field: str, operation: str, value: str) -> bool:
    actual = q.get(_KEYS[field])
    if operation in ("GREATER_THAN", "LESS_THAN"):
        try:
            a, b = float(actual), float(value)
        except (TypeError, ValueError):
            return False
        return a > b if operation == "GREATER_THAN" else a < b
    text = str(actual)
    if operation == "EQUALS":
        return text == value
    if operation == "CONTAINS":
        return value in text
    return value not in text


def _print_table(rows: list[dict[str, Any]], total: int, columns: tuple[tuple[str, str], ...]) -> None:
    print_table([h for h, _ in columns], [[str(q.get(key, "")) for _, key in columns] for q in rows],
                right={h for h, key in columns if key not in _TEXT_KEYS},
                caption=f"{len(rows)} of {total} queues" if len(rows) < total else None)


@queue.command("stat", help="The queue table of `artemis queue stat`: counts per queue.")
@client_options
@click.option("--queue-name", "queue_name", default="", metavar="TEXT",
              help="Only queues whose name contains TEXT.")
@click.option("--field", type=click.Choice([h for h, _ in STAT_COLUMNS], case_sensitive=False),
              help="Filter on this column (with --operation and --value).")
@click.option("--operation", type=click.Choice(OPERATIONS, case_sensitive=False), help="How --field is compared.")
@click.option("--value", help="What --field is compared with.")
@click.option("--max-rows", type=click.IntRange(1), default=50, show_default=True, help="Show at most this many queues.")
@click.option("--json", "as_json", is_flag=True, help="Print the queues as JSON instead of a table.")
@click.option("--loop", is_flag=True, help="Print again every --sleep milliseconds until interrupted.")
@click.option("--sleep", type=click.IntRange(1), default=60000, show_default=True, help="Milliseconds between rounds.")
@click.option("--iterations", type=click.IntRange(0), default=0, show_default=True,
              help="With --loop, stop after this many rounds (0 = until interrupted).")
@click.option("--clustered", is_flag=True,
              help="The queues of every member of the broker's cluster, in one table with a NODE column "
                   "(exit 1 when a member does not answer).")
@click.option("--internal", is_flag=True,
              help=f"With --clustered, also show the broker's own queues ({INTERNAL_PREFIX}*).")
@click.pass_context
def stat(ctx: click.Context, url: str | None, port_offset: int, queue_name: str, field: str | None,
         operation: str | None, value: str | None, max_rows: int, as_json: bool, loop: bool, sleep: int,
         iterations: int, clustered: bool, internal: bool) -> None:
    if (field, operation, value).count(None) not in (0, 3):
        raise click.UsageError("--field, --operation and --value go together")
    if internal and not clustered:
        raise click.UsageError("--internal goes with --clustered")
    client = make_client(url, port_offset)
    field, operation = field and field.upper(), operation and operation.upper()
    rounds = 0
    complete = True
    try:
        while True:
            if clustered:
                complete = _clustered_once(client, queue_name, field, operation, value, max_rows, as_json,
                                           internal) and complete
            else:
                _stat_once(client, queue_name, field, operation, value, max_rows, as_json)
            rounds += 1
            if not loop or (iterations and rounds >= iterations):
                break
            time.sleep(sleep / 1000)
    except KeyboardInterrupt:
        if not loop:
            raise
    if not complete:
        ctx.exit(1)


def _select(queues: list[dict[str, Any]], field: str | None, operation: str | None,
            value: str | None) -> list[dict[str, Any]]:
    if field is None:
        return queues
    return [q for q in queues if _matches(q, field, operation, value)]


def _show(queues: list[dict[str, Any]], max_rows: int, as_json: bool,
          columns: tuple[tuple[str, str], ...]) -> None:
    shown = queues[:max_rows]
    if as_json:
        click.echo(json.dumps(shown, indent=2))
    else:
        _print_table(shown, len(queues), columns)


def _stat_once(client: ManagementClient, contains: str, field: str | None, operation: str | None,
               value: str | None, max_rows: int, as_json: bool) -> None:
    queues = _select(client.get("/api/v1/queues", name=contains or None)["queues"], field, operation, value)
    queues.sort(key=lambda q: q["name"])
    _show(queues, max_rows, as_json, STAT_COLUMNS)


# -- stat --clustered ---------------------------------------------------------------------------

#: Seconds to wait for each member's API (they are asked at once, so this is the whole wait).
MEMBER_TIMEOUT = 10.0


def _clustered_once(client: ManagementClient, contains: str, field: str | None, operation: str | None,
                    value: str | None, max_rows: int, as_json: bool, internal: bool) -> bool:
    """One table of every member's queues; False when a member's queues are missing from it."""
    try:
        members = client.get("/api/v1/cluster")["members"]
    except ManagementError as exc:
        if exc.status in (404, 503):  # a backup has no cluster (or serves nothing) until it takes over
            note = _backup_note(client)
            if note is not None:
                if as_json:
                    click.echo("[]")
                click.echo(note, err=as_json)
                return True
        if exc.status == 404:
            raise ManagementError(f"--clustered: {exc}", exc.status) from None
        raise
    results = _fetch_members(client, members, contains)
    labels = _node_labels(members, results)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    complete = True
    for member in members:
        got = results[member["node_id"]]
        if isinstance(got, str):
            click.echo(f"petrel: warning: node {labels[member['node_id']]}: {got} (its queues are missing below)",
                       err=True)
            complete = False
            continue
        for q in got["queues"]:
            if internal or not q["name"].startswith(INTERNAL_PREFIX):
                rows.append({"node": labels[member["node_id"]], **q})
        backup = ((got.get("ha") or {}).get("replication") or {}).get("backup")
        if isinstance(backup, dict) and backup.get("state") in ("syncing", "in-sync"):
            notes.append(f"backup of {labels[member['node_id']]}: {backup.get('backup_connector')} "
                         f"({backup.get('state')}; a backup serves no queues until it takes over)")
    rows = _select(rows, field, operation, value)
    rows.sort(key=lambda q: (q["name"], q["node"]))
    _show(rows, max_rows, as_json, CLUSTER_COLUMNS)
    for note in sorted(notes):
        click.echo(note, err=as_json)
    return complete


def _backup_note(client: ManagementClient) -> str | None:
    """When the broker asked is a waiting backup: a line saying so and whose; else None."""
    try:
        view = client.get("/api/v1/ha")
    except ManagementError:
        return None
    if view.get("state") not in ("backup", "syncing"):
        return None
    live = ((view.get("replication") or {}).get("live")) or {}
    of = f"node {live['live_node_id'][:8]} at {live.get('live_connector')}" if live.get("live_node_id") else \
        f"node {str(view.get('node_id'))[:8]}"
    policy = str(view.get("policy", "")).replace("_", " ")
    return (f"{client.url} is a {policy} backup of {of} ({view.get('state')}): a backup serves no queues until "
            "it takes over; for the cluster's queues ask a live broker (`petrel ha status --url URL` tells which "
            "it is)")


def _fetch_members(client: ManagementClient, members: list[dict[str, Any]],
                   contains: str) -> dict[str, dict[str, Any] | str]:
    """Each member's ``/health`` and queue list, asked of all members at once; a string says why not."""
    from concurrent.futures import ThreadPoolExecutor

    def fetch(member: dict[str, Any]) -> dict[str, Any] | str:
        if member.get("self"):
            api = client  # the URL the operator gave reaches it; the advertised one may not from here
        elif not member.get("http"):
            return f"no management URL known (is its http_port off?) for node {member['node_id']}"
        else:
            api = client.at(member["http"], timeout=MEMBER_TIMEOUT)  # with the same credentials
        try:
            health = api.get("/health")
            return {"name": health.get("name"), "queues": api.get("/api/v1/queues", name=contains or None)["queues"],
                    "ha": _ha_or_none(api)}
        except ManagementError as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(members)))) as pool:
        answers = list(pool.map(fetch, members))
    return {m["node_id"]: a for m, a in zip(members, answers)}


def _ha_or_none(api: ManagementClient) -> dict[str, Any] | None:
    """The member's /api/v1/ha (None from a broker without one): it names the member's backup."""
    try:
        return api.get("/api/v1/ha")
    except ManagementError:
        return None


def _node_labels(members: list[dict[str, Any]], results: dict[str, dict[str, Any] | str]) -> dict[str, str]:
    """Each member's broker name, or the first 8 characters of its node id when the name is unknown
    or shared with another member."""
    names = {}
    for m in members:
        answer = results[m["node_id"]]
        names[m["node_id"]] = answer.get("name") if isinstance(answer, dict) else None
    known = [n for n in names.values() if n]
    labels = {}
    for node_id, name in names.items():
        labels[node_id] = name if name and known.count(name) == 1 else node_id[:8]
    return labels


# -- create / delete / purge ------------------------------------------------------------------

@queue.command("create", help="Create a queue (and its address when it does not exist).")
@client_options
@click.option("--name", required=True, help="Queue name.")
@click.option("--address", default=None, help="Address to bind it to [default: the queue name].")
@click.option("--anycast/--multicast", "anycast", default=True, show_default=True, help="Routing type of the queue.")
@click.option("--durable/--no-durable", default=True, show_default=True, help="Keep the queue across restarts.")
@click.option("--filter", "filter_", default=None, metavar="SELECTOR", help="Only messages matching this selector.")
def create(url: str | None, port_offset: int, name: str, address: str | None, anycast: bool, durable: bool,
           filter_: str | None) -> None:
    client = make_client(url, port_offset)
    body = {"name": name, "address": address or name, "routing_type": "ANYCAST" if anycast else "MULTICAST",
            "durable": durable, "filter": filter_}
    q = client.post("/api/v1/queues", body)
    click.echo(
        f"Queue {q['name']} created: address={q['address']} routing-type={q['routing_type']} "
        f"durable={str(q['durable']).lower()} filter={q['filter'] or '-'}"
    )


@queue.command("delete", help="Delete a queue and the messages in it.")
@client_options
@click.option("--name", required=True, help="Queue name.")
@click.option("--remove-consumers", is_flag=True, help="Delete it even if consumers are attached.")
def delete(url: str | None, port_offset: int, name: str, remove_consumers: bool) -> None:
    client = make_client(url, port_offset)
    result = client.delete(f"/api/v1/queues/{quote(name)}", remove_consumers=remove_consumers or None)
    click.echo(f"Queue {result['deleted']} deleted ({result['messages_removed']} messages removed)")


@queue.command("purge", help="Remove the waiting messages of a queue (those matching --filter, or all).")
@client_options
@click.option("--name", required=True, help="Queue name.")
@click.option("--filter", "filter_", default=None, metavar="SELECTOR", help="Only messages matching this selector.")
def purge(url: str | None, port_offset: int, name: str, filter_: str | None) -> None:
    client = make_client(url, port_offset)
    result = client.post(f"/api/v1/queues/{quote(name)}/purge", {"filter": filter_})
    click.echo(f"Queue {result['queue']} purged: {result['removed']} messages removed")
