"""`petrel address show|create|delete`: addresses through the management API, like `artemis address`."""

from __future__ import annotations

import json

import click

from petrel.cli.queue import client_options, make_client, quote

__all__ = ["address"]


@click.group("address", help="Inspect and manage addresses through the broker's management API.")
def address() -> None:
    pass


@address.command("show", help="List the addresses, or show one with --name.")
@client_options
@click.option("--name", default=None, help="Show only this address, with its queues.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(url: str | None, port_offset: int, name: str | None, as_json: bool) -> None:
    client = make_client(url, port_offset)
    if name is None:
        addresses = client.get("/api/v1/addresses")["addresses"]
        if as_json:
            click.echo(json.dumps(addresses, indent=2))
            return
        for a in addresses:
            click.echo(a["name"])
        return
    a = client.get(f"/api/v1/addresses/{quote(name)}")
    if as_json:
        click.echo(json.dumps(a, indent=2))
        return
    click.echo(f"Address {a['name']}")
    click.echo(f"  routing types: {', '.join(a['routing_types'])}")
    click.echo(f"  auto-created:  {str(a['auto_created']).lower()}")
    click.echo(f"  messages:      {a['message_count']}")
    if not a["queues"]:
        click.echo("  queues:        (none)")
    for q in a["queues"]:
        click.echo(f"  queue {q['name']} ({q['routing_type']}, {q['message_count']} messages)")


@address.command("create", help="Create an address.")
@client_options
@click.option("--name", required=True, help="Address name.")
@click.option("--anycast", is_flag=True, help="Point-to-point routing (the default when neither is given).")
@click.option("--multicast", is_flag=True, help="Publish-subscribe routing.")
def create(url: str | None, port_offset: int, name: str, anycast: bool, multicast: bool) -> None:
    client = make_client(url, port_offset)
    kinds = [k for k, on in (("ANYCAST", anycast), ("MULTICAST", multicast)) if on] or ["ANYCAST"]
    a = client.post("/api/v1/addresses", {"name": name, "routing_types": kinds})
    click.echo(f"Address {a['name']} created: routing-types={','.join(a['routing_types'])}")


@address.command("delete", help="Delete an address (with --force, its queues and their messages too).")
@client_options
@click.option("--name", required=True, help="Address name.")
@click.option("--force", is_flag=True, help="Delete the address's queues as well.")
def delete(url: str | None, port_offset: int, name: str, force: bool) -> None:
    client = make_client(url, port_offset)
    result = client.delete(f"/api/v1/addresses/{quote(name)}", force=force or None)
    queues = result["queues_deleted"]
    suffix = f" with its queues {', '.join(queues)}" if queues else ""
    click.echo(f"Address {result['deleted']} deleted{suffix}")
