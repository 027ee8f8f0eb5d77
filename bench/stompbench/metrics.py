"""From client results to one measurement, and from runs to medians and ratios."""

from __future__ import annotations

import statistics
from array import array
from dataclasses import asdict, dataclass

from .clients import ClientResult
from .workloads import Phase

# metric name -> (heading, higher is better?)
METRICS: dict[str, tuple[str, bool]] = {
    "rate": ("msgs/s (higher is better)", True),
    "p50_ms": ("latency p50 ms (lower is better)", False),
    "p99_ms": ("latency p99 ms (lower is better)", False),
    "peak_rss_mib": ("broker peak RSS MiB (lower is better)", False),
    "cpu_us_per_msg": ("broker CPU µs/msg (lower is better)", False),
}


@dataclass
class Measurement:
    """One row, one broker, one run."""

    broker: str
    row: str
    run: int
    procs: int
    messages: int = 0
    expected: int = 0
    seconds: float | None = None
    rate: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    cpu_s: float | None = None
    cpu_us_per_msg: float | None = None
    peak_rss_mib: float | None = None
    generator_cpu_pct: float | None = None  # busiest generator process, CPU time / wall time
    loadavg_1m: float | None = None  # the host's load when the phase ended (noise indicator)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.rate is not None

    def as_dict(self) -> dict:
        return asdict(self)


def percentile(sorted_values: list[int] | array, q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    n = len(sorted_values)
    return float(sorted_values[min(n - 1, max(0, int(q * n + 0.5) - 1))])


def summarise(phase: Phase, results: list[ClientResult], m: Measurement) -> Measurement:
    """Fill ``m``'s count, duration, rate and latency from the clients' results.

    msgs/s: with consumers, deliveries / (last receive - first send), or - first
    subscribe when the phase has no producer; without consumers, sends / (last
    RECEIPT - first send).  A phase without producers starts when its consumers
    send SUBSCRIBE.
    """
    producers = [r for r in results if r.role == "producer"]
    consumers = [r for r in results if r.role == "consumer"]
    m.expected = phase.messages
    if phase.consumers:
        m.messages = sum(r.received for r in consumers)
        starts = [r.first_send_ns for r in producers if r.first_send_ns]
        starts = starts or [r.subscribe_ns for r in consumers if r.subscribe_ns]
        ends = [r.last_recv_ns for r in consumers if r.last_recv_ns]
    else:
        windowed = any(p.window for p in phase.producers)
        m.messages = sum(r.receipts if windowed else r.sent for r in producers)
        starts = [r.first_send_ns for r in producers if r.first_send_ns]
        ends = [r.last_receipt_ns for r in producers if r.last_receipt_ns]
    if starts and ends and max(ends) > min(starts):
        m.seconds = (max(ends) - min(starts)) / 1e9
        m.rate = m.messages / m.seconds
    if m.messages < m.expected and m.error is None:
        m.error = f"incomplete: {m.messages}/{m.expected}"
    source = consumers if phase.latency == "delivery" else producers
    if phase.latency != "none":
        lat = array("q")
        for r in source:
            lat.frombytes(r.latencies)
        if lat:
            ordered = sorted(lat)
            m.p50_ms = percentile(ordered, 0.50) / 1e6
            m.p99_ms = percentile(ordered, 0.99) / 1e6
    return m


def add_broker_figures(m: Measurement, cpu_s: float | None, rss_mib: float | None) -> None:
    m.cpu_s = cpu_s
    m.peak_rss_mib = rss_mib
    if cpu_s is not None and m.messages:
        m.cpu_us_per_msg = cpu_s / m.messages * 1e6


@dataclass
class Cell:
    """The median of the good runs of one (broker, row, procs, metric)."""

    value: float | None
    runs_ok: int
    runs: int


def medians(measurements: list[Measurement]) -> dict[tuple[str, str, int], dict[str, Cell]]:
    """(broker, row, procs) -> metric -> median over the runs that completed."""
    groups: dict[tuple[str, str, int], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.broker, m.row, m.procs), []).append(m)
    table = {}
    for key, ms in groups.items():
        good = [m for m in ms if m.ok]
        cells = {}
        for metric in (*METRICS, "generator_cpu_pct"):
            values = [getattr(m, metric) for m in good if getattr(m, metric) is not None]
            cells[metric] = Cell(statistics.median(values) if values else None, len(good), len(ms))
        table[key] = cells
    return table


def ratio(subject: float | None, peers: list[float | None], higher_better: bool) -> float | None:
    """subject / best peer, where best is the max (higher is better) or the min."""
    values = [v for v in peers if v is not None]
    if subject is None or not values:
        return None
    best = max(values) if higher_better else min(values)
    return subject / best if best else None
