"""`petrel consumer`: receive messages like `artemis consumer`, over CORE (default) or STOMP."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import click

from petrel.cli.producer import (
    ToolProgress,
    client_options,
    destination_label,
    elapsed_lines,
    open_client,
    run_clients,
    settings_from,
)
from petrel.client.message import Message
from petrel.errors import UsageError

__all__ = ["consumer", "ConsumerPlan", "consume", "preview"]

PREVIEW = 80
STOMP_MAX_PREFETCH = 1000


@dataclass(frozen=True, slots=True)
class ConsumerPlan:
    destination: str
    count: int  # 0: until --break-on-null stops it (or forever)
    receive_timeout: float  # seconds
    break_on_null: bool
    filter: str | None
    subscription: str | None  # a durable subscription's name
    commit_interval: int
    verbose: bool


def preview(message: Message, limit: int = PREVIEW) -> str:
    """The body as text, shortened to ``limit`` characters."""
    text = message.body[: limit + 1].decode("utf-8", errors="replace")
    if len(text) > limit or len(message.body) > limit + 1:
        return text[:limit] + f"... ({len(message.body)} bytes)"
    return text


def commit(session: Any, receiver: Any) -> None:
    """Commit what this thread took."""
    session.commit()


def consume(client: Any, plan: ConsumerPlan, index: int, progress: ToolProgress) -> int:
    """Receive up to ``plan.count`` messages on one connection; returns how many arrived."""
    prefix = f"Consumer {destination_label(plan.destination)}, thread={index}"
    transacted = plan.commit_interval > 0
    session = client.session(transacted=transacted)
    receiver = session.consumer(plan.destination, filter=plan.filter, subscription=plan.subscription)
    wanted = plan.count
    progress.echo(f"{prefix} wait until {wanted or 'any number of'} messages are consumed")
    timeout, interval, verbose = plan.receive_timeout, plan.commit_interval, plan.verbose
    step = max(1, min(wanted // 100, 1000)) if wanted else 100
    received = 0
    started = last = None
    while not wanted or received < wanted:
        message = receiver.receive(timeout)
        if message is None:
            if plan.break_on_null:
                break
            continue
        last = time.monotonic()
        if started is None:
            started = last
        received += 1
        if verbose:
            progress.echo(f"{prefix} Received {preview(message)}")
        if transacted and received % interval == 0:
            commit(session, receiver)
        if received % step == 0:
            progress.advance(index, step)
    if transacted and received % interval:
        commit(session, receiver)
    elapsed = last - started if started is not None else 0.0
    receiver.close()
    session.close()
    progress.advance(index, received % step)
    progress.echo(f"{prefix} Consumed: {received} messages")
    for line in elapsed_lines(prefix, elapsed):
        progress.echo(line)
    progress.echo(f"{prefix} Consumer thread finished")
    return received


@click.command("consumer", help="Receive messages from a queue or topic, like `artemis consumer`.")
@client_options
@click.option("--message-count", type=click.IntRange(0), default=1000, show_default=True,
              help="Messages each thread receives (0: no limit).")
@click.option("--receive-timeout", type=click.IntRange(1), default=3000, show_default=True,
              help="Milliseconds one receive waits.")
@click.option("--break-on-null", is_flag=True, help="Stop when a receive times out.")
@click.option("--filter", "filter_", default=None, metavar="SELECTOR", help="Only messages matching this selector.")
@click.option("--durable", is_flag=True, help="A durable subscription (topics; with --clientID).")
@click.option("--clientID", "--client-id", "client_id", default=None, help="Client id of the connection.")
@click.option("--subscription", default=None, help="Name of the durable subscription [default: subscription].")
@click.option("--threads", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Consumer threads, each with its own connection.")
@click.option("--commit-interval", "--tx-batch-size", "commit_interval", type=click.IntRange(0), default=0,
              show_default=True, help="Receive in transactions committed every N messages (0: no transactions).")
@click.option("--verbose", is_flag=True, help="Print every message received.")
def consumer(url: str, user: str | None, password: str | None, protocol: str, destination: str,
             message_count: int, receive_timeout: int, break_on_null: bool, filter_: str | None, durable: bool,
             client_id: str | None, subscription: str | None, threads: int, commit_interval: int,
             verbose: bool) -> None:
    settings = settings_from(url, user, password, protocol, destination)
    if durable or subscription:
        if not settings.destination.startswith("topic://"):
            raise UsageError("--durable and --subscription need a topic:// destination")
        if not client_id:
            raise UsageError("a durable subscription needs --clientID")
        if threads > 1:
            raise UsageError("a durable subscription has one consumer: use --threads 1")
        subscription = subscription or "subscription"
    plan = ConsumerPlan(settings.destination, message_count, receive_timeout / 1000, break_on_null, filter_,
                        subscription, commit_interval, verbose)
    click.echo(f"Connection brokerURL = {url} ({settings.protocol.upper()})")
    click.echo(f"Consumer:: filter = {filter_ or 'null'}")
    window = min(message_count, STOMP_MAX_PREFETCH) if message_count else STOMP_MAX_PREFETCH

    def connect(i: int) -> Any:
        cid = client_id if threads == 1 or not client_id else f"{client_id}-{i}"
        return open_client(settings, client_id=cid, window=window)

    run_clients("Consumer", consume, plan, url, threads, message_count, connect=connect)
