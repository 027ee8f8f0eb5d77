"""`petrel producer`: send messages like `artemis producer`, over CORE (default) or STOMP.

This module also holds what the messaging tools (producer, consumer, browser, perf) share:
the connection options, opening a CORE or STOMP client with the same API, Artemis-style
destination labels, worker threads, the progress bar and the one-line errors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click

from petrel.client.errors import ClientError, ConnectionFailed
from petrel.client.message import Message
from petrel.errors import PetrelError, UsageError

__all__ = [
    "producer",
    "ToolError",
    "ClientSettings",
    "client_options",
    "settings_from",
    "open_client",
    "tool_error",
    "close_quietly",
    "normalize_destination",
    "destination_label",
    "parse_properties",
    "run_workers",
    "run_clients",
    "ToolProgress",
    "make_body",
    "elapsed_lines",
]

DEFAULT_URL = "tcp://127.0.0.1:61616"
PROTOCOLS = ("core", "stomp")
GROUP_ID = "JMSXGroupID"


class ToolError(PetrelError):
    """A messaging tool failed (exit code 1); the message is the one line printed."""


# -- connecting --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ClientSettings:
    url: str
    user: str | None
    password: str | None
    protocol: str
    destination: str


def client_options(fn: Callable) -> Callable:
    """--url, --user, --password, --protocol and --destination, as on `artemis producer`."""
    options = [
        click.option("--destination", default="queue://TEST", show_default=True, metavar="queue://X|topic://X",
                     help="Where to send or consume (a bare name means a queue)."),
        click.option("--protocol", type=click.Choice(PROTOCOLS, case_sensitive=False), default="core",
                     show_default=True, help="Wire protocol of the client."),
        click.option("--password", envvar="PETREL_PASSWORD", default=None, help="Password (env PETREL_PASSWORD)."),
        click.option("--user", envvar="PETREL_USER", default=None, help="User name (env PETREL_USER)."),
        click.option("--url", envvar="PETREL_URL", default=DEFAULT_URL, show_default=True, metavar="URL",
                     help="Broker URL: tcp://host:port (CORE also takes failover:(...)) (env PETREL_URL)."),
    ]
    for option in options:
        fn = option(fn)
    return fn


def settings_from(url: str, user: str | None, password: str | None, protocol: str,
                  destination: str) -> ClientSettings:
    return ClientSettings(url, user, password, protocol.lower(), normalize_destination(destination))


def normalize_destination(destination: str) -> str:
    """``queue://X`` and ``topic://X`` as given; a bare ``X`` is ``queue://X`` (as in Artemis)."""
    destination = destination.strip()
    for prefix in ("queue://", "topic://"):
        if destination.startswith(prefix):
            if not destination[len(prefix):]:
                raise UsageError(f"--destination {destination!r} names no queue or topic")
            return destination
    if "://" in destination:
        raise UsageError(f"--destination must be queue://NAME or topic://NAME, not {destination!r}")
    if not destination:
        raise UsageError("--destination is empty")
    return "queue://" + destination


def destination_label(destination: str) -> str:
    """The Artemis way of naming a destination in tool output: ``ActiveMQQueue[X]``."""
    if destination.startswith("topic://"):
        return f"ActiveMQTopic[{destination[8:]}]"
    return f"ActiveMQQueue[{destination.removeprefix('queue://')}]"


def open_client(settings: ClientSettings, *, client_id: str | None = None, window: int | None = None,
                low_latency: bool = False) -> Any:
    """A connected `petrel.client.Connection` (CORE) or `StompClient`; both have ``session()``
    and ``close()``. ``window``: STOMP prefetch and receipt window in messages."""
    try:
        if settings.protocol == "stomp":
            from petrel.cli.stompclient import DEFAULT_WINDOW, StompClient

            return StompClient(settings.url, user=settings.user, password=settings.password, client_id=client_id,
                               window=window or DEFAULT_WINDOW, coalesce=0 if low_latency else 64 * 1024)
        from petrel.client import Connection

        return Connection(settings.url, user=settings.user, password=settings.password, client_id=client_id)
    except ValueError as exc:
        raise UsageError(f"--url {settings.url!r}: {exc}") from None
    except ClientError as exc:
        raise tool_error(exc, settings.url) from None
    except OSError as exc:
        raise ToolError(f"cannot connect to {settings.url} ({exc.strerror or exc})") from None


def tool_error(exc: BaseException, url: str) -> PetrelError:
    """The one-line error for a client failure."""
    if isinstance(exc, PetrelError):
        return exc
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, ConnectionFailed):
        lowered = text.lower()
        if "refused" in lowered and "connection" in lowered and "refused the connection" not in lowered:
            reason = "connection refused"
        elif "timed out" in lowered or "timeout" in lowered:
            reason = "timed out"
        elif "name or service not known" in lowered or "nodename nor servname" in lowered:
            reason = "unknown host"
        else:
            reason = text
        return ToolError(f"cannot connect to {url} ({reason}); is the broker running?")
    if isinstance(exc, ClientError):
        return ToolError(text)
    if isinstance(exc, OSError):
        return ToolError(f"connection to {url} failed: {exc.strerror or text}")
    return ToolError(f"{type(exc).__name__}: {text}")


def close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception:  # closing after a failure: the first error is the one reported
        pass


# -- workers -------------------------------------------------------------------------------------

def run_workers(targets: Sequence[Callable[[], None]], url: str, *, names: str = "worker") -> None:
    """Run each target in a thread of its own; re-raise the first failure as a one-line error."""
    errors: list[BaseException] = []
    lock = threading.Lock()

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by the main thread
                with lock:
                    errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(t), name=f"{names}-{i}", daemon=True) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)  # short joins keep Ctrl-C working
            if errors:
                break
        if errors:
            break
    if errors:
        raise tool_error(errors[0], url)


def run_clients(name: str, work: Callable[[Any, Any, int, ToolProgress], int], plan: Any, url: str, threads: int,
                message_count: int, connect: Callable[[int], Any]) -> None:
    """Open ``threads`` clients with ``connect(i)`` and run ``work(client, plan, i, progress)`` for each
    in a thread of its own under one progress display; every client opened is closed at the end."""
    clients = []
    try:
        for i in range(threads):
            clients.append(connect(i))
        with ToolProgress(name, [message_count] * threads) as progress:
            run_workers([lambda i=i, c=c: work(c, plan, i, progress) for i, c in enumerate(clients)], url,
                        names=name.lower())
    finally:
        for client in clients:
            close_quietly(client)


class ToolProgress:
    """A rich progress bar (one line per thread) when stdout is a terminal; nothing otherwise.

    Workers print through `echo`, so their lines appear above a live bar."""

    def __init__(self, description: str, totals: Sequence[int], *, enabled: bool | None = None) -> None:
        from rich.console import Console

        self._console = Console(highlight=False)
        self.enabled = self._console.is_terminal if enabled is None else enabled
        self._progress = None
        self._tasks: list[Any] = []
        self._description = description
        self._totals = list(totals)

    def __enter__(self) -> ToolProgress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=self._console, transient=True)
            self._progress.start()
            for i, total in enumerate(self._totals):
                self._tasks.append(self._progress.add_task(f"{self._description} thread={i}", total=total or None))
        return self

    def echo(self, line: str) -> None:
        progress = self._progress
        if progress is not None:
            progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            click.echo(line)

    def advance(self, index: int, count: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._tasks[index], count)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


# -- message contents -------------------------------------------------------------------------------

def parse_properties(values: Sequence[str]) -> dict[str, Any]:
    """``k=v`` pairs; a value that reads as an integer is sent as one."""
    properties: dict[str, Any] = {}
    for item in values:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--property takes KEY=VALUE, not {item!r}")
        try:
            properties[key] = int(value)
        except ValueError:
            properties[key] = value
    return properties


def make_body(size: int, *, text: bool) -> bytes:
    """A generated body of ``size`` bytes (readable ASCII, so text and bytes look alike)."""
    pattern = b"Petrel message payload 0123456789 abcdefghijklmnopqrstuvwxyz. " if text else bytes(range(33, 127))
    return (pattern * (size // len(pattern) + 1))[:size]


def body_source(message_size: int | None, txt_size: int | None, text: str | None) -> Callable[[int], bytes]:
    if sum(v is not None for v in (message_size, txt_size, text)) > 1:
        raise UsageError("use only one of --message-size, --txt-size and --text")
    if message_size is not None:
        body = make_body(message_size, text=False)
        return lambda _i: body
    if txt_size is not None:
        body = make_body(txt_size, text=True)
        return lambda _i: body
    if text is not None:
        body = text.encode()
        return lambda _i: body
    return lambda i: b"Test message %d" % i


@contextmanager
def timed() -> Iterator[list[float]]:
    """Yields a one-item list holding the elapsed seconds once the block ends."""
    result = [0.0]
    start = time.monotonic()
    try:
        yield result
    finally:
        result[0] = time.monotonic() - start


def elapsed_lines(prefix: str, seconds: float) -> list[str]:
    return [f"{prefix} Elapsed time in second : {int(seconds)} s",
            f"{prefix} Elapsed time in milli second : {int(seconds * 1000)} milli seconds"]


# -- the command ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ProducerPlan:
    destination: str
    count: int
    body: Callable[[int], bytes]
    persistent: bool
    commit_interval: int
    group: str | None
    sleep_ms: int
    properties: dict[str, Any]


def produce(client: Any, plan: ProducerPlan, index: int, progress: ToolProgress) -> int:
    """Send ``plan.count`` messages on one connection; returns how many were sent."""
    prefix = f"Producer {destination_label(plan.destination)}, thread={index}"
    transacted = plan.commit_interval > 0
    session = client.session(transacted=transacted)
    sender = session.producer(plan.destination)
    base = {**plan.properties, "ThreadSent": f"Producer thread={index}"}
    if plan.group:
        base[GROUP_ID] = plan.group
    progress.echo(f"{prefix} Started to calculate elapsed time ...")
    body, persistent, interval, pause = plan.body, plan.persistent, plan.commit_interval, plan.sleep_ms / 1000
    step = max(1, min(plan.count // 100, 1000))
    sent = 0
    with timed() as elapsed:
        for i in range(plan.count):
            sender.send(Message(body(i), {**base, "count": i}, durable=persistent))
            sent += 1
            if transacted and sent % interval == 0:
                session.commit()
            if sent % step == 0:
                progress.advance(index, step)
            if pause:
                time.sleep(pause)
        if transacted and sent % interval:
            session.commit()
        session.flush()
    progress.advance(index, sent % step)
    progress.echo(f"{prefix} Produced: {sent} messages")
    for line in elapsed_lines(prefix, elapsed[0]):
        progress.echo(line)
    session.close()
    return sent


@click.command("producer", help="Send messages to a queue or topic, like `artemis producer`.")
@client_options
@click.option("--message-count", type=click.IntRange(0), default=1000, show_default=True,
              help="Messages each thread sends.")
@click.option("--message-size", type=click.IntRange(0), default=None, help="Bytes of a generated body.")
@click.option("--txt-size", "--text-size", "txt_size", type=click.IntRange(0), default=None,
              help="Characters of a generated text body.")
@click.option("--text", default=None, help="The body of every message.")
@click.option("--persistent/--non-persistent", default=True, show_default=True,
              help="Durable sends (each confirmed by the broker once on disk) or not.")
@click.option("--threads", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Producer threads, each with its own connection.")
@click.option("--commit-interval", "--tx-batch-size", "commit_interval", type=click.IntRange(0), default=0,
              show_default=True, help="Send in transactions committed every N messages (0: no transactions).")
@click.option("--group", default=None, help="JMSXGroupID of every message.")
@click.option("--sleep", type=click.IntRange(0), default=0, show_default=True, help="Milliseconds between sends.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="A property on every message (repeatable; integers stay integers).")
def producer(url: str, user: str | None, password: str | None, protocol: str, destination: str,
             message_count: int, message_size: int | None, txt_size: int | None, text: str | None,
             persistent: bool, threads: int, commit_interval: int, group: str | None, sleep: int,
             properties: tuple[str, ...]) -> None:
    settings = settings_from(url, user, password, protocol, destination)
    plan = ProducerPlan(settings.destination, message_count, body_source(message_size, txt_size, text), persistent,
                        commit_interval, group, sleep, parse_properties(properties))
    click.echo(f"Connection brokerURL = {url} ({settings.protocol.upper()})")
    run_clients("Producer", produce, plan, url, threads, message_count,
                connect=lambda _: open_client(settings, low_latency=sleep > 0))
