"""`petrel perf producer|consumer|client`: the built-in load generator, like `artemis perf`.

Producers stamp each message with the wall-clock send time (``perfSentNs``, nanoseconds);
consumers record ``now - perfSentNs`` in a `LatencyHistogram`, so producer and consumer
may run in different processes on one host (`perf producer` + `perf consumer`) or in one
(`perf client`). ``--rate`` paces the producers (messages per second in total, 0 = as fast
as they go); messages sent during ``--warmup`` carry ``perfWarmup`` and stay out of the
latency figures. Every ``--report-interval`` seconds a line gives the send and receive
rates and that interval's latency; a summary table ends the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from petrel.cli.producer import (
    ClientSettings,
    client_options,
    close_quietly,
    make_body,
    open_client,
    settings_from,
    tool_error,
)
from petrel.client.errors import ClientError
from petrel.client.message import Message
from petrel.errors import UsageError

__all__ = ["perf", "LatencyHistogram", "PerfPlan", "SENT_PROPERTY", "WARMUP_PROPERTY"]

SENT_PROPERTY = "perfSentNs"
WARMUP_PROPERTY = "perfWarmup"
PERCENTILES = (50.0, 90.0, 99.0, 99.9)
POLL = 0.05  # seconds a consumer waits per receive, so it notices the stop signal


class LatencyHistogram:
    """An HDR-style histogram of non-negative integers (here microseconds).

    Values below ``2**SUB_BITS`` have a bucket each; above, each power-of-two range is split
    into ``2**(SUB_BITS-1)`` buckets, so a bucket is never wider than 1/128 of its values
    (under 0.8% error). Recording is a bit_length, a shift and a list increment.
    """

    SUB_BITS = 8
    __slots__ = ("counts", "count", "total", "min", "max")

    def __init__(self) -> None:
        self.counts = [0] * 4096
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    @classmethod
    def index_of(cls, value: int) -> int:
        bits = cls.SUB_BITS
        if value < (1 << bits):
            return value
        shift = value.bit_length() - bits
        return (value >> shift) + (shift << (bits - 1))

    @classmethod
    def highest_of(cls, index: int) -> int:
        """The largest value that lands in bucket ``index``."""
        bits = cls.SUB_BITS
        if index < (1 << bits):
            return index
        shift = (index >> (bits - 1)) - 1
        top = index - (shift << (bits - 1))
        return ((top + 1) << shift) - 1

    def record(self, value: int) -> None:
        if value < 0:
            value = 0
        index = self.index_of(value)
        counts = self.counts
        if index >= len(counts):
            counts.extend([0] * (index + 1 - len(counts)))
        counts[index] += 1
        if not self.count or value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        self.count += 1
        self.total += value

    def merge(self, other: LatencyHistogram) -> None:
        if not other.count:
            return
        counts = self.counts
        if len(other.counts) > len(counts):
            counts.extend([0] * (len(other.counts) - len(counts)))
        for i, n in enumerate(other.counts):
            if n:
                counts[i] += n
        self.min = other.min if not self.count else min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.count += other.count
        self.total += other.total

    def percentile(self, p: float) -> int:
        """The value at or below which ``p`` percent of the recorded values lie (0 when empty)."""
        if not self.count:
            return 0
        if p >= 100:
            return self.max
        rank = max(1, -(-self.count * p // 100))  # ceil, at least the first value
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                return min(self.highest_of(i), self.max)
        return self.max

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


# -- workers ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PerfPlan:
    destination: str
    message_size: int
    persistent: bool
    rate: float  # messages per second for all producers together, 0 = unlimited
    duration: float  # seconds, 0 = until the message count
    message_count: int  # in total, 0 = until the duration
    warmup: float  # seconds
    commit_interval: int
    report_interval: float
    idle_timeout: float  # seconds without messages that end the consumers


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class ProducerWorker:
    def __init__(self, client: Any, plan: PerfPlan, quota: int, rate: float, stop: threading.Event) -> None:
        self.client = client
        self.plan = plan
        self.quota = quota  # 0: until stopped
        self.rate = rate
        self.stop = stop
        self.sent = 0
        self.finished_at = 0.0

    def run(self) -> None:
        plan, stop = self.plan, self.stop
        transacted = plan.commit_interval > 0
        session = self.client.session(transacted=transacted)
        sender = session.producer(plan.destination)
        body = make_body(plan.message_size, text=False)
        durable, quota, interval = plan.persistent, self.quota, plan.commit_interval
        gap = 1e9 / self.rate if self.rate > 0 else 0.0
        start = time.monotonic_ns()
        warm_until = start + int(plan.warmup * 1e9)
        due = float(start)
        try:
            while not stop.is_set() and (not quota or self.sent < quota):
                now = time.monotonic_ns()
                if gap:
                    if now < due:
                        time.sleep((due - now) / 1e9)
                        now = time.monotonic_ns()
                    due += gap
                props: dict[str, Any] = {SENT_PROPERTY: time.time_ns()}
                if now < warm_until:
                    props[WARMUP_PROPERTY] = 1
                sender.send(Message(body, props, durable=durable))
                self.sent += 1
                if transacted and self.sent % interval == 0:
                    session.commit()
            if transacted and self.sent % interval:
                session.commit()
            session.flush()
        finally:
            self.finished_at = time.monotonic()


class ConsumerWorker:
    def __init__(self, client: Any, plan: PerfPlan, quota: int, stop: threading.Event) -> None:
        self.plan = plan
        self.quota = quota  # 0: until stopped
        self.stop = stop
        self.received = 0
        self.last = 0.0  # monotonic time of the last message
        self.latency = LatencyHistogram()
        self.interval = LatencyHistogram()  # swapped out by the reporter
        self.session = client.session()
        # subscribe now, in the caller's thread, so a topic subscription exists before producers start
        self.receiver = self.session.consumer(plan.destination)

    def run(self) -> None:
        receiver, stop, quota = self.receiver, self.stop, self.quota
        latency = self.latency
        try:
            while not stop.is_set() and (not quota or self.received < quota):
                message = receiver.receive(POLL)
                if message is None:
                    continue
                now_ns = time.time_ns()
                self.received += 1
                self.last = time.monotonic()
                props = message.properties
                stamp = props.get(SENT_PROPERTY)
                if stamp is None or WARMUP_PROPERTY in props:
                    continue
                try:
                    micros = (now_ns - int(stamp)) // 1000
                except (TypeError, ValueError):
                    continue
                latency.record(micros)
                self.interval.record(micros)
        finally:
            receiver.close()

    def take_interval(self) -> LatencyHistogram:
        taken, self.interval = self.interval, LatencyHistogram()
        return taken


# -- the run ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PerfResult:
    seconds: float
    sent: int
    received: int
    latency: LatencyHistogram


def _ms(micros: float) -> str:
    return f"{micros / 1000:.3f}"


def run_perf(settings: ClientSettings, plan: PerfPlan, producers: int, consumers: int) -> PerfResult:
    """Open the connections, run the workers, print a line per interval; returns the totals."""
    clients: list[Any] = []
    producer_stop, consumer_stop = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    topic = plan.destination.startswith("topic://")
    try:
        consumer_quotas = _shares(plan.message_count, consumers) if plan.message_count and not producers else \
            [0] * consumers
        readers = []
        for quota in consumer_quotas:
            client = open_client(settings)
            clients.append(client)
            readers.append(ConsumerWorker(client, plan, quota, consumer_stop))
        writers = []
        for quota in (_shares(plan.message_count, producers) if plan.message_count else [0] * producers):
            client = open_client(settings, low_latency=plan.rate > 0)
            clients.append(client)
            writers.append(ProducerWorker(client, plan, quota, plan.rate / producers if producers else 0,
                                          producer_stop))

        def guarded(target: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                try:
                    target()
                except BaseException as exc:  # reported by the main thread
                    errors.append(exc)
                    producer_stop.set()
                    consumer_stop.set()

            return run

        reader_threads = [threading.Thread(target=guarded(w.run), name=f"perf-consumer-{i}", daemon=True)
                          for i, w in enumerate(readers)]
        writer_threads = [threading.Thread(target=guarded(w.run), name=f"perf-producer-{i}", daemon=True)
                          for i, w in enumerate(writers)]
        start = time.monotonic()
        for thread in reader_threads + writer_threads:
            thread.start()
        reporter = _Reporter(writers, readers, start)
        interrupted = False
        try:
            while not errors:
                consumer_stop.wait(0.02)
                now = time.monotonic()
                if plan.duration and now - start >= plan.duration:
                    producer_stop.set()
                reporter.tick(now, plan.report_interval)
                writing = any(t.is_alive() for t in writer_threads)
                if not readers:
                    if not writing:
                        break
                    continue
                if not any(t.is_alive() for t in reader_threads):
                    break
                if writing:
                    continue
                received = sum(r.received for r in readers)
                if writers:
                    sent = sum(w.sent for w in writers)
                    if received >= sent * (consumers if topic else 1):
                        break
                    quiet_since = max([r.last for r in readers] + [w.finished_at for w in writers])
                elif plan.duration and now - start >= plan.duration:
                    break
                else:
                    quiet_since = max(r.last for r in readers)
                if quiet_since and now - quiet_since >= plan.idle_timeout:
                    break
        except KeyboardInterrupt:
            interrupted = True
        producer_stop.set()
        consumer_stop.set()
        for thread in writer_threads + reader_threads:
            thread.join(30)
        if errors:
            raise tool_error(errors[0], settings.url)
        end = time.monotonic()
        if any(r.last for r in readers):  # the run ends with its last message
            end = max([r.last for r in readers] + [w.finished_at for w in writers])
        latency = LatencyHistogram()
        for r in readers:
            latency.merge(r.latency)
        result = PerfResult(max(end - start, 1e-9), sum(w.sent for w in writers), sum(r.received for r in readers),
                            latency)
        if interrupted:
            click.echo("interrupted: summary of the run so far")
        return result
    except ClientError as exc:
        raise tool_error(exc, settings.url) from None
    finally:
        for client in clients:
            close_quietly(client)


class _Reporter:
    """Prints one line per interval: rates and the interval's latency percentiles."""

    def __init__(self, writers: Sequence[ProducerWorker], readers: Sequence[ConsumerWorker], start: float) -> None:
        self.writers = writers
        self.readers = readers
        self.start = start
        self.last_time = start
        self.last_sent = 0
        self.last_received = 0

    def tick(self, now: float, every: float) -> None:
        if every <= 0 or now - self.last_time < every:
            return
        span = now - self.last_time
        parts = [f"[{now - self.start:7.1f}s]"]
        if self.writers:
            sent = sum(w.sent for w in self.writers)
            parts.append(f"sent {(sent - self.last_sent) / span:9.0f} msg/s")
            self.last_sent = sent
        if self.readers:
            received = sum(r.received for r in self.readers)
            parts.append(f"received {(received - self.last_received) / span:9.0f} msg/s")
            self.last_received = received
            window = LatencyHistogram()
            for r in self.readers:
                window.merge(r.take_interval())
            if window.count:
                parts.append(f"latency p50 {_ms(window.percentile(50))} ms  p99 {_ms(window.percentile(99))} ms"
                             f"  max {_ms(window.max)} ms")
        self.last_time = now
        click.echo("  ".join(parts))


def print_summary(settings: ClientSettings, result: PerfResult, *, producers: int, consumers: int) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=False, width=100)
    rows = [("protocol", settings.protocol.upper()), ("destination", settings.destination),
            ("duration", f"{result.seconds:.2f} s")]
    if producers:
        rows += [("messages sent", str(result.sent)), ("send rate", f"{result.sent / result.seconds:.0f} msg/s")]
    if consumers:
        rows += [("messages received", str(result.received)),
                 ("receive rate", f"{result.received / result.seconds:.0f} msg/s")]
    summary = Table("METRIC", "VALUE", title="petrel perf summary", box=box.ASCII, title_justify="left")
    for name, value in rows:
        summary.add_row(name, value)
    console.print(summary)
    if not consumers:
        return
    latency = result.latency
    if not latency.count:
        console.print("no latency samples (no received message carried a perf timestamp outside the warm-up)")
        return
    table = Table("PERCENTILE", "LATENCY_MS", title="end-to-end latency", box=box.ASCII, title_justify="left")
    for p in PERCENTILES:
        table.add_row(f"p{p:g}", _ms(latency.percentile(p)))
    table.add_row("max", _ms(latency.max))
    table.add_row("mean", _ms(latency.mean))
    console.print(table)
    console.print(f"{latency.count} latency samples in HDR-style buckets (under 1% error)")


# -- commands ----------------------------------------------------------------------------------------

def perf_options(fn: Callable) -> Callable:
    options = [
        click.option("--report-interval", type=click.FloatRange(0), default=1.0, show_default=True,
                     help="Seconds between progress lines (0: none)."),
        click.option("--warmup", type=click.FloatRange(0), default=0.0, show_default=True,
                     help="Seconds at the start whose messages are left out of the latency figures."),
        click.option("--message-count", type=click.IntRange(0), default=0, show_default=True,
                     help="Messages in total (0: run for --duration)."),
        click.option("--duration", type=click.FloatRange(0), default=None,
                     help="Seconds to run [default: 10 unless --message-count is given]."),
    ]
    for option in options:
        fn = option(fn)
    return client_options(fn)


def producer_options(fn: Callable) -> Callable:
    options = [
        click.option("--commit-interval", type=click.IntRange(0), default=0, show_default=True,
                     help="Send in transactions committed every N messages (0: no transactions)."),
        click.option("--persistent/--non-persistent", default=False, show_default=True,
                     help="Durable sends (confirmed once on disk), as `artemis perf --persistent`."),
        click.option("--message-size", type=click.IntRange(0), default=100, show_default=True,
                     help="Body bytes of each message."),
        click.option("--rate", type=click.FloatRange(0), default=0.0, show_default=True,
                     help="Messages per second for all producers together (0: as fast as possible)."),
    ]
    for option in options:
        fn = option(fn)
    return fn


def idle_option(fn: Callable) -> Callable:
    return click.option("--receive-timeout", type=click.IntRange(1), default=3000, show_default=True,
                        help="Consumers stop after this many milliseconds without a message "
                             "(once producers are done or, alone, once messages have come).")(fn)


def _plan(destination: str, *, message_size: int = 0, persistent: bool = False, rate: float = 0.0,
          duration: float | None, message_count: int, warmup: float, commit_interval: int = 0,
          report_interval: float, receive_timeout: int = 3000, default_duration: float = 10.0) -> PerfPlan:
    if duration is None:
        duration = 0.0 if message_count else default_duration
    return PerfPlan(destination, message_size, persistent, rate, duration, message_count, warmup, commit_interval,
                    report_interval, receive_timeout / 1000)


def _start_line(settings: ClientSettings, what: str, plan: PerfPlan) -> None:
    limit = f"{plan.message_count} messages" if plan.message_count else f"{plan.duration:g} s"
    if not plan.message_count and not plan.duration:
        limit = "until idle"
    rate = "" if what == "consumer" else (f", {plan.rate:g} msg/s" if plan.rate else ", unlimited rate")
    click.echo(f"petrel perf {what}: {settings.protocol.upper()} {settings.url} {settings.destination}, "
               f"{limit}{rate}")


@click.group("perf", help="Measure throughput and latency, like `artemis perf`.")
def perf() -> None:
    pass


@perf.command("producer", help="Send timestamped messages at a controlled rate.")
@perf_options
@producer_options
@click.option("--threads", type=click.IntRange(1, 1000), default=1, show_default=True, help="Producer connections.")
def perf_producer(url: str, user: str | None, password: str | None, protocol: str, destination: str,
                  duration: float | None, message_count: int, warmup: float, report_interval: float, rate: float,
                  message_size: int, persistent: bool, commit_interval: int, threads: int) -> None:
    settings = settings_from(url, user, password, protocol, destination)
    plan = _plan(settings.destination, message_size=message_size, persistent=persistent, rate=rate,
                 duration=duration, message_count=message_count, warmup=warmup, commit_interval=commit_interval,
                 report_interval=report_interval)
    _start_line(settings, "producer", plan)
    result = run_perf(settings, plan, threads, 0)
    print_summary(settings, result, producers=threads, consumers=0)


@perf.command("consumer", help="Receive messages and report their latency (from the producer's timestamp).")
@perf_options
@idle_option
@click.option("--threads", type=click.IntRange(1, 1000), default=1, show_default=True, help="Consumer connections.")
def perf_consumer(url: str, user: str | None, password: str | None, protocol: str, destination: str,
                  duration: float | None, message_count: int, warmup: float, report_interval: float,
                  receive_timeout: int, threads: int) -> None:
    settings = settings_from(url, user, password, protocol, destination)
    plan = _plan(settings.destination, duration=duration, message_count=message_count, warmup=warmup,
                 report_interval=report_interval, receive_timeout=receive_timeout, default_duration=0.0)
    _start_line(settings, "consumer", plan)
    result = run_perf(settings, plan, 0, threads)
    print_summary(settings, result, producers=0, consumers=threads)


@perf.command("client", help="Producers and consumers in one process: throughput and end-to-end latency.")
@perf_options
@producer_options
@idle_option
@click.option("--producers", type=click.IntRange(1, 1000), default=1, show_default=True, help="Producer connections.")
@click.option("--consumers", type=click.IntRange(1, 1000), default=1, show_default=True, help="Consumer connections.")
def perf_client(url: str, user: str | None, password: str | None, protocol: str, destination: str,
                duration: float | None, message_count: int, warmup: float, report_interval: float, rate: float,
                message_size: int, persistent: bool, commit_interval: int, receive_timeout: int, producers: int,
                consumers: int) -> None:
    settings = settings_from(url, user, password, protocol, destination)
    if message_count and message_count < producers:
        raise UsageError("--message-count must be at least --producers")
    plan = _plan(settings.destination, message_size=message_size, persistent=persistent, rate=rate,
                 duration=duration, message_count=message_count, warmup=warmup, commit_interval=commit_interval,
                 report_interval=report_interval, receive_timeout=receive_timeout)
    _start_line(settings, "client", plan)
    result = run_perf(settings, plan, producers, consumers)
    print_summary(settings, result, producers=producers, consumers=consumers)
