"""`petrel browser`: list the messages waiting in a queue without consuming them (CORE)."""

from __future__ import annotations

import click

from petrel.cli.consumer import preview
from petrel.cli.producer import client_options, close_quietly, destination_label, open_client, settings_from, tool_error
from petrel.client.errors import ClientError
from petrel.client.message import Message
from petrel.errors import UsageError

__all__ = ["browser", "describe"]


def describe(message: Message, body_limit: int) -> str:
    """One line: id, address, settings, properties and the (shortened) body."""
    props = ", ".join(f"{k}={v!r}" for k, v in sorted(message.properties.items()))
    return (f"Message id={message.message_id} address={message.address} durable={str(message.durable).lower()} "
            f"priority={message.priority} delivery_count={message.delivery_count} "
            f"properties={{{props}}} body={preview(message, body_limit)!r}")


@click.command("browser", help="Show the messages waiting in a queue without consuming them, like `artemis browser`.")
@client_options
@click.option("--filter", "filter_", default=None, metavar="SELECTOR", help="Only messages matching this selector.")
@click.option("--message-count", type=click.IntRange(0), default=0, show_default=True,
              help="Show at most this many messages (0: all).")
@click.option("--body-size", type=click.IntRange(0), default=80, show_default=True,
              help="Characters of each body to show.")
def browser(url: str, user: str | None, password: str | None, protocol: str, destination: str,
            filter_: str | None, message_count: int, body_size: int) -> None:
    settings = settings_from(url, user, password, protocol, destination)
    if settings.protocol != "core":
        raise UsageError("petrel browser needs --protocol core: STOMP cannot browse a queue without consuming it")
    if not settings.destination.startswith("queue://"):
        raise UsageError("petrel browser browses a queue: use queue://NAME (a subscription queue by its name)")
    prefix = f"Browser {destination_label(settings.destination)}, thread=0"
    click.echo(f"Connection brokerURL = {url} (CORE)")
    client = open_client(settings)
    shown = 0
    try:
        session = client.session()
        click.echo(f"{prefix} browsing{f' with filter {filter_}' if filter_ else ''}")
        for message in session.browser(settings.destination, filter=filter_):
            click.echo(describe(message, body_size))
            shown += 1
            if message_count and shown >= message_count:
                break
        click.echo(f"{prefix} Browsed: {shown} messages")
    except ClientError as exc:
        raise tool_error(exc, url) from None
    finally:
        close_quietly(client)
