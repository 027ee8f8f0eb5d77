"""S6: a persistent backlog far larger than the memory limit, filled then drained.

Petrel pages the address ``s6.backlog`` past ``max_size_bytes = 64 MiB``
(``address_full_policy`` PAGE, the default); ActiveMQ 5.17 runs with
``<systemUsage>`` memoryUsage 64 mb (storeUsage and tempUsage 4 gb, KahaDB
defaults), so its store cursor stops caching at the same limit. Both get the
same STOMP workload from the stompbench load generator:

- fill: one producer sends ``--size-mib`` MiB of 1 KiB persistent messages, a
  RECEIPT per SEND, up to 1,000 unconfirmed (S2/S5 fill's producer);
- drain: then one consumer takes them all (each broker's stompbench dialect:
  ``ack:auto`` with ``activemq.prefetchSize:1000``, plus Petrel's
  ``consumer-window-size`` of 2 MiB; ``--ack client`` acknowledges every 250
  deliveries instead, cumulatively).

Reported per broker: fill and drain msgs/s, peak RSS (VmHWM of the broker
process, from its start), broker CPU µs/msg per phase, and at the end of the
fill the size of Petrel's paging directory and of each broker's data directory.
Every run gets a freshly started broker with an empty data directory.

    .venv/bin/python bench/s6_paging.py                      # 1 GiB, 1 run each
    .venv/bin/python bench/s6_paging.py --size-mib 16        # smoke run
    .venv/bin/python bench/s6_paging.py --runs 3 --brokers petrel,activemq
    .venv/bin/python bench/s6_paging.py --size-mib 64 --brokers petrel --ack client

With client acknowledgements a paged queue drained at 364 msgs/s before depaging stopped
waiting for acknowledgements (issue 9, bug 12); it now drains at the ack:auto rate.

Results: bench/results/s6-<timestamp>.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from stompbench import procstat  # noqa: E402
from stompbench.brokers import ActiveMQ, BrokerFailed, BrokerUnavailable, Petrel  # noqa: E402
from stompbench.metrics import Measurement, add_broker_figures, summarise  # noqa: E402
from stompbench.runner import run_phase  # noqa: E402
from stompbench.workloads import ConsumerSpec, Phase, ProducerSpec  # noqa: E402

QUEUE = "s6.backlog"
LIMIT_BYTES = 64 * 1024 * 1024
WINDOW = 1_000  # unconfirmed SENDs
ROWS = ("S6 fill", "S6 drain")

PETREL_TOML = """\
# Written by bench/s6_paging.py: page the S6 address past 64 MiB.
[address_settings."s6.#"]
max_size_bytes = {limit}
address_full_policy = "PAGE"
"""

ACTIVEMQ_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <!-- Written by bench/s6_paging.py: one STOMP connector, KahaDB with its defaults,
       64 mb of memory for messages, room on disk for the backlog. -->
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="s6"
          useJmx="false" dataDirectory="{data}">
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb"/>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="{limit_mb} mb"/></memoryUsage>
        <storeUsage><storeUsage limit="{disk_gb} gb"/></storeUsage>
        <tempUsage><tempUsage limit="{disk_gb} gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://{host}:{port}"/>
    </transportConnectors>
  </broker>
</beans>
"""


class PagingPetrel(Petrel):
    """``petrel run`` as stompbench starts it, plus a broker.toml limiting ``s6.#``."""

    def __init__(self, host: str = "127.0.0.1", limit: int = LIMIT_BYTES) -> None:
        super().__init__(host)
        self.limit = limit

    def command(self, workdir: Path) -> list[str]:
        config = workdir / "broker.toml"
        config.write_text(PETREL_TOML.format(limit=self.limit))
        # no management port: it would clash with any other Petrel on this host
        return [*super().command(workdir), "--config", str(config), "--http-port", "-1"]

    def store_dirs(self) -> dict[str, Path]:
        assert self.workdir is not None
        data = self.workdir / "data"
        return {"paging": data / "paging", "data": data}


class PagingActiveMQ(ActiveMQ):
    """stompbench's ActiveMQ instance with a ``<systemUsage>`` memory limit."""

    def __init__(self, host: str = "127.0.0.1", limit: int = LIMIT_BYTES, disk_gb: int = 4) -> None:
        super().__init__(host)
        self.limit = limit
        self.disk_gb = disk_gb

    def command(self, workdir: Path) -> list[str]:
        cmd = super().command(workdir)  # writes conf/ and data/; the JVM reads the XML at start
        (workdir / "conf" / "activemq.xml").write_text(
            ACTIVEMQ_XML.format(
                data=workdir / "data",
                host=self.host,
                port=self.port,
                limit_mb=self.limit // (1024 * 1024),
                disk_gb=self.disk_gb,
            )
        )
        return cmd

    def store_dirs(self) -> dict[str, Path]:
        assert self.workdir is not None
        data = self.workdir / "data"
        return {"kahadb": data / "kahadb", "data": data}


BROKERS = {"petrel": PagingPetrel, "activemq": PagingActiveMQ}


def tree_bytes(path: Path) -> int:
    """Total size of the regular files under ``path`` (0 if it does not exist)."""
    total = 0
    todo = [str(path)]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def phases(messages: int) -> tuple[Phase, Phase]:
    destination = "queue:" + QUEUE
    fill = Phase(
        "S6 fill",
        (ProducerSpec(destination, messages, persistent=True, window=WINDOW),),
        (),
        latency="receipt",
    )
    drain = Phase("S6 drain", (), (ConsumerSpec(destination, messages),), latency="none")
    return fill, drain


@dataclass
class RunFigures:
    """What one run on one broker measured beyond the per-phase Measurements."""

    broker: str
    run: int
    rss_after_fill_mib: float | None = None  # VmRSS at the end of the fill
    hwm_after_fill_mib: float | None = None  # VmHWM at the end of the fill
    dir_mib_after_fill: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def _safe(fn, *args):
    try:
        return fn(*args)
    except (OSError, ValueError, IndexError):
        return None


def measure(broker, run: int, fill: Phase, drain: Phase, body_size: int, log_line, ack: str = "auto"
            ) -> tuple[list[Measurement], RunFigures]:
    """Start ``broker``, fill, drain (acknowledging as ``ack`` says), stop it; per-phase
    Measurements and the run's extras."""
    rows = [Measurement(broker.name, p.row, run, 1) for p in (fill, drain)]
    extra = RunFigures(broker.name, run)
    try:
        broker.start()
    except BrokerFailed as exc:
        for m in rows:
            m.error = f"start failed: {exc}"[:500]
        extra.error = rows[0].error
        return rows, extra
    try:
        for phase, m in zip((fill, drain), rows):
            cpu0 = [None]

            def started(cpu0=cpu0) -> None:
                cpu0[0] = _safe(procstat.cpu_seconds, broker.pid)

            t0 = time.monotonic()
            dialect = broker.dialect if phase is fill else dataclasses.replace(broker.dialect, ack=ack)
            outcome = run_phase(phase, dialect, broker.host, broker.port, 1, body_size, on_start=started)
            cpu1 = _safe(procstat.cpu_seconds, broker.pid)
            rss = _safe(procstat.peak_rss_mib, broker.pid)
            m.loadavg_1m = procstat.loadavg_1m()
            if outcome.errors:
                m.error = "; ".join(outcome.errors)[:500]
            summarise(phase, outcome.results, m)
            cpu = None if cpu0[0] is None or cpu1 is None else cpu1 - cpu0[0]
            add_broker_figures(m, cpu, rss)
            if outcome.loads:
                m.generator_cpu_pct = 100.0 * max(outcome.loads)
            if phase is fill:
                rss_kib = _safe(procstat.status_kib, broker.pid, "VmRSS")
                extra.rss_after_fill_mib = None if rss_kib is None else rss_kib / 1024
                extra.hwm_after_fill_mib = rss
                extra.dir_mib_after_fill = {
                    name: tree_bytes(path) / (1024 * 1024) for name, path in broker.store_dirs().items()
                }
            log_line(f"[run {run}] {broker.name:8} {phase.row:8} {_describe(m)} ({time.monotonic() - t0:.0f} s)")
            if m.error:
                if phase is fill:
                    rows[1].error = "skipped: the fill failed"
                break
    finally:
        broker.stop()
    return rows, extra


def _describe(m: Measurement) -> str:
    if not m.ok:
        return f"FAILED {m.error}"
    cpu = f", cpu {m.cpu_us_per_msg:.1f} us/msg" if m.cpu_us_per_msg is not None else ""
    return f"{m.rate:,.0f} msgs/s, peak rss {m.peak_rss_mib:.0f} MiB{cpu}"


# -- report ----------------------------------------------------------------------------------------


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summary(measurements: list[Measurement], extras: list[RunFigures], brokers: list[str]) -> dict:
    """broker -> figure name -> median over the runs whose phase completed."""
    out: dict[str, dict[str, float | None]] = {}
    for b in brokers:
        fill = [m for m in measurements if m.broker == b and m.row == "S6 fill" and m.ok]
        drain = [m for m in measurements if m.broker == b and m.row == "S6 drain" and m.ok]
        ext = [e for e in extras if e.broker == b and e.error is None]
        fig: dict[str, float | None] = {
            "fill_rate": _median([m.rate for m in fill]),
            "drain_rate": _median([m.rate for m in drain]),
            "fill_p50_ms": _median([m.p50_ms for m in fill]),
            "fill_p99_ms": _median([m.p99_ms for m in fill]),
            "peak_rss_fill_mib": _median([m.peak_rss_mib for m in fill]),
            "peak_rss_mib": _median([m.peak_rss_mib for m in drain] or [m.peak_rss_mib for m in fill]),
            "rss_after_fill_mib": _median([e.rss_after_fill_mib for e in ext]),
            "fill_cpu_us": _median([m.cpu_us_per_msg for m in fill]),
            "drain_cpu_us": _median([m.cpu_us_per_msg for m in drain]),
            "data_mib": _median([e.dir_mib_after_fill.get("data") for e in ext]),
            "paging_mib": _median([e.dir_mib_after_fill.get("paging") for e in ext]),
            "runs_fill_ok": len(fill),
            "runs_drain_ok": len(drain),
        }
        out[b] = fig
    return out


# (key, heading, higher is better)
TABLE = (
    ("fill_rate", "fill msgs/s (higher is better)", True),
    ("drain_rate", "drain msgs/s (higher is better)", True),
    ("fill_p50_ms", "fill SEND->RECEIPT p50 ms", False),
    ("fill_p99_ms", "fill SEND->RECEIPT p99 ms", False),
    ("peak_rss_fill_mib", "peak RSS MiB after the fill (VmHWM)", False),
    ("peak_rss_mib", "peak RSS MiB, whole run (VmHWM)", False),
    ("rss_after_fill_mib", "RSS MiB at the end of the fill (VmRSS)", False),
    ("fill_cpu_us", "broker CPU µs/msg, fill", False),
    ("drain_cpu_us", "broker CPU µs/msg, drain", False),
    ("paging_mib", "paging directory MiB at the end of the fill", False),
    ("data_mib", "whole data directory MiB at the end of the fill", False),
)


def _fmt(v: float | None) -> str:
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def markdown(fig: dict, labels: dict[str, str], messages: int, args, started) -> str:
    p, a = fig.get("petrel", {}), fig.get("activemq", {})
    lines = [
        f"### S6: {args.size_mib:,} MiB persistent backlog, paging at {args.limit_mib} MiB, "
        f"{started:%Y-%m-%d %H:%M %Z}",
        "",
        f"{messages:,} persistent messages of {args.size} bytes into `{QUEUE}`, a RECEIPT per SEND, "
        f"<= {WINDOW:,} unconfirmed; then one consumer drains them. Medians of {args.runs} run(s), "
        f"a fresh broker per run. Petrel: `max_size_bytes = {args.limit_mib * 1024 * 1024}`, PAGE. "
        f"ActiveMQ: `<memoryUsage limit=\"{args.limit_mib} mb\"/>`, store/temp usage 4 gb, "
        f"KahaDB defaults, JVM -Xmx512M (the package's). Consumers: `ack:{args.ack}`"
        f"{' (cumulative, every 250)' if args.ack == 'client' else ''}, `activemq.prefetchSize:1000` "
        "(Petrel also `consumer-window-size:2097152`).",
        "",
        f"| figure | {labels.get('petrel', 'Petrel')} | {labels.get('activemq', 'ActiveMQ')} "
        "| Petrel / ActiveMQ |",
        "|---|---|---|---|",
    ]
    for key, heading, _higher in TABLE:
        pv, av = p.get(key), a.get(key)
        if pv is None and av is None:
            continue
        r = f"{pv / av:.2f}×" if pv is not None and av else "–"
        lines.append(f"| {heading} | {_fmt(pv)} | {_fmt(av)} | {r} |")
    lines += [
        "",
        "Ratio = Petrel / ActiveMQ: above 1 is better for msgs/s, below 1 is better for the others.",
    ]
    verdicts = []
    if p.get("drain_rate") and a.get("drain_rate"):
        r = p["drain_rate"] / a["drain_rate"]
        verdicts.append(f"drain {r:.2f}× ActiveMQ (target >= 1.0×: {'met' if r >= 1.0 else 'NOT met'})")
    if p.get("peak_rss_mib") is not None:
        v = p["peak_rss_mib"]
        verdicts.append(f"Petrel peak RSS {v:.0f} MiB (target < 256 MiB: {'met' if v < 256 else 'NOT met'})")
    if verdicts:
        lines += ["", "Targets: " + "; ".join(verdicts) + "."]
    return "\n".join(lines)


# -- command line ----------------------------------------------------------------------------------


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mib", type=int, default=1024, help="backlog size in MiB of bodies (default 1024)")
    p.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    p.add_argument("--limit-mib", type=int, default=64, help="memory limit in MiB on both brokers (default 64)")
    p.add_argument("--runs", type=int, default=1, help="runs per broker; medians (default 1)")
    p.add_argument("--brokers", default="petrel,activemq", help="comma list of petrel, activemq")
    p.add_argument("--ack", choices=("auto", "client"), default="auto",
                   help="the drain's acknowledgement mode (default auto)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--results-dir", type=Path, default=BENCH_DIR / "results")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if min(args.size_mib, args.size, args.runs, args.limit_mib) < 1:
        p.error("--size-mib, --size, --limit-mib and --runs must be >= 1")
    if not args.host.startswith("127."):
        p.error("loopback only (127.0.0.0/8)")
    args.brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    unknown = [b for b in args.brokers if b not in BROKERS]
    if unknown:
        p.error(f"unknown broker(s) {unknown}; choose from {', '.join(BROKERS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    messages = args.size_mib * 1024 * 1024 // args.size
    fill, drain = phases(messages)
    started = dt.datetime.now().astimezone()

    def log_line(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    brokers, labels, info = [], {}, {}
    for name in args.brokers:
        broker = BROKERS[name](args.host, limit=args.limit_mib * 1024 * 1024)
        try:
            broker.check()
        except BrokerUnavailable as exc:
            log_line(f"SKIPPING {name}: {exc}")
            info[name] = {"status": f"skipped: {exc}"}
            continue
        brokers.append(broker)
        labels[name] = broker.label
        info[name] = {"status": "measured", "label": broker.label, "version": broker.version()}
        if isinstance(broker, ActiveMQ):
            info[name]["java_opts"] = " ".join(broker.java_opts)
    measurements: list[Measurement] = []
    extras: list[RunFigures] = []
    interrupted = False
    try:
        for run in range(1, args.runs + 1):
            for broker in brokers:
                rows, extra = measure(broker, run, fill, drain, args.size, log_line, args.ack)
                measurements.extend(rows)
                extras.append(extra)
    except KeyboardInterrupt:
        interrupted = True
        log_line("interrupted: brokers stopped, writing what was measured")
    figures = summary(measurements, extras, [b.name for b in brokers])
    text = markdown(figures, labels, messages, args, started)
    payload = {
        "kind": "s6",
        "started": started.isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                 "loadavg_1m_at_start": procstat.loadavg_1m()},
        "args": {k: str(v) for k, v in vars(args).items()},
        "messages": messages,
        "brokers": info,
        "measurements": [m.as_dict() for m in measurements],
        "extras": [asdict(e) for e in extras],
        "summary": figures,
        "markdown": text,
        "interrupted": interrupted,
    }
    out = args.results_dir / f"s6-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(text)
    log_line(f"results: {out}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
