"""The workloads of the comparison (S1-S5, L2), the generator checks, and their sizes."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from .dialect import Headers


@dataclass(frozen=True)
class ProducerSpec:
    """One producer connection.

    ``window`` > 0: every SEND asks for a receipt and at most ``window`` are
    unconfirmed.  ``window`` == 0: fire and forget, only the last SEND asks for a
    receipt, which marks when the broker has taken everything.  ``rate`` > 0
    paces the sends (msgs/s); 0 sends as fast as the socket takes them.
    """

    destination: str
    count: int
    persistent: bool = False
    window: int = 0
    rate: float = 0.0


@dataclass(frozen=True)
class ConsumerSpec:
    destination: str
    expected: int
    extra_headers: Headers = ()


@dataclass(frozen=True)
class Phase:
    """Clients that run together; one row of the table.

    ``latency`` says which latency the row reports: ``"delivery"`` (consumer
    receive time minus the send timestamp) or ``"receipt"`` (send to RECEIPT).
    """

    row: str
    producers: tuple[ProducerSpec, ...]
    consumers: tuple[ConsumerSpec, ...]
    latency: str = "delivery"

    @property
    def messages(self) -> int:
        """The message count the row's msgs/s divides: deliveries, or sends if no consumer."""
        if self.consumers:
            return sum(c.expected for c in self.consumers)
        return sum(p.count for p in self.producers)

    @property
    def timeout_s(self) -> float:
        """A generous bound: 60 s plus 2 ms a message, plus the paced duration."""
        paced = max((p.count / p.rate for p in self.producers if p.rate), default=0.0)
        return 60.0 + self.messages / 500.0 + paced


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    phases: tuple[Phase, ...]


@dataclass(frozen=True)
class Counts:
    """Message counts; ``quick()`` is a smoke-sized variant."""

    s1: int = 200_000
    s2: int = 50_000
    s3: int = 50_000  # per producer/queue pair
    s4: int = 100_000  # published; each of 4 subscribers gets all
    s5: int = 100_000
    l2_rate: int = 1_000
    l2_seconds: int = 30
    warmup: int = 20_000
    window: int = 1_000  # receipts in flight for persistent sends

    @classmethod
    def quick(cls) -> "Counts":
        return cls(s1=20_000, s2=5_000, s3=5_000, s4=10_000, s5=10_000, l2_seconds=5, warmup=3_000)

    def with_overrides(self, items: list[str]) -> "Counts":
        """Apply ``NAME=VALUE`` strings (``s1=50000``, ``l2_seconds=10``)."""
        known = {f.name for f in fields(self)}
        changes = {}
        for item in items:
            name, _, value = item.partition("=")
            name = name.strip().lower()
            if name not in known or not value.strip().isdigit():
                raise ValueError(f"bad count {item!r}; names: {', '.join(sorted(known))}")
            changes[name] = int(value)
        return replace(self, **changes)


def _pair(row: str, queue: str, count: int, persistent: bool, window: int) -> Phase:
    return Phase(
        row,
        (ProducerSpec(queue, count, persistent=persistent, window=window),),
        (ConsumerSpec(queue, count),),
    )


def build(c: Counts) -> dict[str, Workload]:
    """The comparison workloads, keyed S1..S5, L2, in table order."""
    s3_queues = [f"queue:bench.s3.{i}" for i in range(4)]
    l2_count = c.l2_rate * c.l2_seconds
    workloads = [
        Workload(
            "S1",
            "1 -> 1, one queue, 1 KiB, non-persistent",
            (_pair("S1", "queue:bench.s1", c.s1, False, 0),),
        ),
        Workload(
            "S2",
            f"1 -> 1, persistent, receipts, <= {c.window} in flight",
            (_pair("S2", "queue:bench.s2", c.s2, True, c.window),),
        ),
        Workload(
            "S3",
            "4 -> 4 on 4 queues, non-persistent",
            (
                Phase(
                    "S3",
                    tuple(ProducerSpec(q, c.s3) for q in s3_queues),
                    tuple(ConsumerSpec(q, c.s3) for q in s3_queues),
                ),
            ),
        ),
        Workload(
            "S4",
            "1 -> topic with 4 subscribers, non-persistent",
            (
                Phase(
                    "S4",
                    (ProducerSpec("topic:bench.s4", c.s4),),
                    tuple(ConsumerSpec("topic:bench.s4", c.s4) for _ in range(4)),
                ),
            ),
        ),
        Workload(
            "S5",
            f"{c.s5:,} persistent into a queue with no consumer, then drained",
            (
                Phase(
                    "S5 fill",
                    (ProducerSpec("queue:bench.s5", c.s5, persistent=True, window=c.window),),
                    (),
                    latency="receipt",
                ),
                Phase("S5 drain", (), (ConsumerSpec("queue:bench.s5", c.s5),), latency="none"),
            ),
        ),
        Workload(
            "L2",
            f"{c.l2_rate:,} msg/s persistent for {c.l2_seconds} s, latency",
            (
                Phase(
                    "L2",
                    (
                        ProducerSpec(
                            "queue:bench.l2",
                            l2_count,
                            persistent=True,
                            window=c.window,
                            rate=float(c.l2_rate),
                        ),
                    ),
                    (ConsumerSpec("queue:bench.l2", l2_count),),
                ),
            ),
        ),
    ]
    return {w.key: w for w in workloads}


def warmup(c: Counts) -> Phase:
    """A short non-persistent pass before each measured workload (JIT, caches, connections)."""
    return _pair("warmup", "queue:bench.warmup", c.warmup, False, 0)


# Rows where the generator could plausibly be the limit: nothing paces them but the broker.
UNPACED = ("S1", "S3", "S4")


def generator_checks(c: Counts) -> list[Phase]:
    """Rows that isolate each side of the generator against the sink server.

    ``G pub``: one producer into a destination the sink discards (sends/s).
    ``G sub``: one consumer that the sink floods with pre-built MESSAGE frames.
    """
    flood = ConsumerSpec("queue:bench.flood", c.s1, extra_headers=(("bench-flood", str(c.s1)),))
    return [
        Phase("G pub", (ProducerSpec("queue:bench.discard", c.s1),), (), latency="receipt"),
        Phase("G sub", (), (flood,), latency="delivery"),
    ]

