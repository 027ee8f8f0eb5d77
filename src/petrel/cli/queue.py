"""`petrel queue stat|create|delete|purge`: queues through the management API, like `artemis queue`."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import click

from petrel.management.client import ManagementClient, default_url

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
OPERATIONS = ("CONTAINS", "NOT_CONTAINS", "EQUALS", "GREATER_THAN", "LESS_THAN")


def client_options(fn: Callable) -> Callable:
    """--url and --port-offset, shared by the commands that talk to the management API."""
    fn = click.option("--port-offset", type=click.IntRange(0, 65535), default=0, show_default=True,
                      help="Added to the default URL's port (8161), as for `petrel run --port-offset`.")(fn)
    fn = click.option("--url", envvar="PETREL_MANAGEMENT_URL", default=None, metavar="URL",
                      help="Management API of the broker [default: http://127.0.0.1:8161] "
                           "(env PETREL_MANAGEMENT_URL).")(fn)
    return fn


def make_client(url: str | None, port_offset: int) -> ManagementClient:
    return ManagementClient(url or default_url(port_offset))


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


def _table(rows: list[dict[str, Any]], total: int):
    from rich import box
    from rich.table import Table

    table = Table(box=box.ASCII, show_edge=True, pad_edge=True, highlight=False,
                  caption=f"{len(rows)} of {total} queues" if len(rows) < total else None)
    for header, key in STAT_COLUMNS:
        numeric = key not in ("name", "address", "routing_type")
        table.add_column(header, justify="right" if numeric else "left", no_wrap=True)
    for q in rows:
        table.add_row(*(str(q.get(key, "")) for _, key in STAT_COLUMNS))
    return table


def _width(rows: list[dict[str, Any]]) -> int:
    widths = [len(h) for h, _ in STAT_COLUMNS]
    for q in rows:
        for i, (_, key) in enumerate(STAT_COLUMNS):
            widths[i] = max(widths[i], len(str(q.get(key, ""))))
    return sum(widths) + 3 * len(widths) + 1


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
def stat(url: str | None, port_offset: int, queue_name: str, field: str | None, operation: str | None,
         value: str | None, max_rows: int, as_json: bool, loop: bool, sleep: int, iterations: int) -> None:
    if (field, operation, value).count(None) not in (0, 3):
        raise click.UsageError("--field, --operation and --value go together")
    client = make_client(url, port_offset)
    rounds = 0
    try:
        while True:
            _stat_once(client, queue_name, field and field.upper(), operation and operation.upper(), value,
                       max_rows, as_json)
            rounds += 1
            if not loop or (iterations and rounds >= iterations):
                return
            time.sleep(sleep / 1000)
    except KeyboardInterrupt:
        if not loop:
            raise


def _stat_once(client: ManagementClient, contains: str, field: str | None, operation: str | None,
               value: str | None, max_rows: int, as_json: bool) -> None:
    queues = client.get("/api/v1/queues", name=contains or None)["queues"]
    if field is not None:
        queues = [q for q in queues if _matches(q, field, operation, value)]
    queues.sort(key=lambda q: q["name"])
    shown = queues[:max_rows]
    if as_json:
        click.echo(json.dumps(shown, indent=2))
        return
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=False)
    needed = _width(shown)
    if console.width < needed:
        console = Console(highlight=False, soft_wrap=False, width=needed)
    console.print(_table(shown, len(queues)))


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
