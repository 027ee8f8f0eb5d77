"""CORE rows: the S1-S5 and L2 workloads over Petrel's CORE protocol with the asyncio
Python client (``petrel.client``), beside the peers' best STOMP figures.

Workloads, counts, bodies, a fresh broker per workload and run, the warm-up and the broker
CPU / peak RSS figures are stompbench's. Every client is one CORE connection:

- producers ``await producer.send(Message(body, {"bench-ts": ns}, durable=...))``; the
  confirmation window is 1,000 x 1 KiB for persistent rows (stompbench's 1,000 unconfirmed
  receipts), the client's default 1 MiB otherwise; each ends with ``session.flush()``
  (all confirmed: where S5 fill stops its clock);
- consumers: a plain-function listener (the client's cheapest path), ``ack="auto"``
  (cumulative acks batched by the client), consumer window 2 MiB (as Petrel's STOMP dialect).

Peers are not run again: their figures come from the newest stompbench results JSON in
bench/results/ or /tmp/stompbench-dev/results/ (``--peers FILE`` to choose), best median
msgs/s per row over ActiveMQ and RabbitMQ and over the generator process counts that
file has. With none, ``python -m stompbench --brokers activemq,rabbitmq`` runs first.

The client's own ceiling: every row reports the client processes' CPU µs per message and
the busiest client process's CPU share, and row ``G pub`` runs S1's producer alone into a
queue with no consumer (sends confirmed per second).

    .venv/bin/python bench/core_rows.py                     # 3 runs, full counts
    .venv/bin/python bench/core_rows.py --quick --runs 1    # smoke
    .venv/bin/python bench/core_rows.py --workloads S1,S2 --procs 2

Results: bench/results/core-rows-<timestamp>.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import platform
import multiprocessing as mp
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from stompbench import procstat  # noqa: E402
from stompbench.brokers import BrokerFailed, Petrel  # noqa: E402
from stompbench.clients import ClientResult  # noqa: E402
from stompbench.frames import body_of  # noqa: E402
from stompbench.metrics import Measurement, add_broker_figures, medians, summarise  # noqa: E402
from stompbench.runner import Group, split  # noqa: E402
from stompbench.workloads import Counts, Phase, ProducerSpec, Workload, build, warmup  # noqa: E402
from stompbench.report import figure as _fmt  # noqa: E402
from core_clients import CONNECT_TIMEOUT, CoreConsumer, CoreProducer, now_ns, worker_main  # noqa: E402

log = logging.getLogger("core_rows")

PEER_DIRS = (BENCH_DIR / "results", Path("/tmp/stompbench-dev/results"))
PEERS = ("activemq", "rabbitmq")
# issue 4: CORE / best peer msgs/s
TARGETS = {"S1": 1.5, "S3": 1.5, "S2": 2.0}


class CorePetrel(Petrel):
    """``petrel run`` as stompbench starts it (CORE is detected on the all-protocols port; no
    management port, which would clash with another Petrel on the host)."""

    @property
    def url(self) -> str:
        return f"tcp://{self.host}:{self.port}"


def client_ceiling(c: Counts) -> Workload:
    """``G pub``: S1's producer alone, into a queue nobody consumes (sends confirmed / s)."""
    phase = Phase("G pub", (ProducerSpec("queue:bench.gpub", c.s1),), (), latency="none")
    return Workload("G", "S1's producer into a queue with no consumer (the client's ceiling)", (phase,))


# -- the CORE load generator -------------------------------------------------------------------------

DEFAULT_WINDOW = 1024 * 1024  # the client's default confirmation window


def _window_bytes(spec: ProducerSpec, size: int) -> int:
    """Persistent rows: stompbench's unconfirmed-message bound in bytes; else the client's default."""
    return spec.window * size if spec.window else DEFAULT_WINDOW


async def _run_group(group: Group, phase: Phase, url: str, size: int, barrier,
                     timeout_s: float) -> tuple[list[ClientResult], float, float]:
    body = body_of(size)
    latency = phase.latency == "delivery"
    consumers = [CoreConsumer(spec, latency) for _, spec in group.consumers]
    producers = [CoreProducer(spec, body, _window_bytes(spec, size)) for spec in group.producers]
    subscribe_first = bool(phase.producers)
    try:
        try:
            await asyncio.gather(*(c.connect(url) for c in consumers))
            if subscribe_first:
                await asyncio.gather(*(c.subscribe() for c in consumers))
            await asyncio.gather(*(p.connect(url) for p in producers))
        except BaseException:
            barrier.abort()
            raise
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, barrier.wait, CONNECT_TIMEOUT)
        cpu0, wall0 = time.process_time(), time.monotonic()
        deadline_ns = now_ns() + int(timeout_s * 1e9)
        if not subscribe_first:
            await asyncio.gather(*(c.subscribe() for c in consumers))
        results = list(await asyncio.gather(*(c.run(deadline_ns) for c in consumers),
                                            *(p.run(deadline_ns) for p in producers)))
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    finally:
        await asyncio.gather(*(c.close() for c in [*consumers, *producers]), return_exceptions=True)
    return results, (cpu / wall if wall > 0 else 0.0), cpu


def _worker(index, group, phase, url, size, barrier, results, timeout_s) -> None:
    async def run():
        out, load, cpu = await _run_group(group, phase, url, size, barrier, timeout_s)
        return index, out, load, cpu, None

    worker_main(run, barrier, results, lambda why: (index, [], None, 0.0, f"worker {index}: {why}"))


@dataclass
class PhaseOutcome:
    results: list[ClientResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)  # per worker: CPU time / wall time
    cpu_s: float = 0.0  # all workers' CPU time in the measured part


def run_phase(phase: Phase, url: str, procs: int, size: int,
              on_start: Callable[[], None] = lambda: None) -> PhaseOutcome:
    """Run ``phase``'s CORE clients over ``procs`` worker processes (stompbench's ``split``);
    ``on_start`` is called when they are released. Every wait is bounded."""
    timeout_s = phase.timeout_s
    groups = split(phase, procs)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(groups) + 1)
    results = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(i, g, phase, url, size, barrier, results, timeout_s),
                           name=f"core-rows-{phase.row}-{i}", daemon=True) for i, g in enumerate(groups)]
    outcome = PhaseOutcome()
    for w in workers:
        w.start()
    try:
        try:
            barrier.wait(CONNECT_TIMEOUT + 30)
            on_start()
        except threading.BrokenBarrierError:
            outcome.errors.append("clients could not connect (barrier broken)")
        end = time.monotonic() + timeout_s + CONNECT_TIMEOUT + 15
        pending = len(workers)
        while pending:
            try:
                _, out, load, cpu, error = results.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                outcome.errors.append(f"{pending} worker(s) did not report in time")
                break
            pending -= 1
            outcome.results.extend(out)
            outcome.cpu_s += cpu
            if load is not None:
                outcome.loads.append(load)
            if error:
                outcome.errors.append(error)
    finally:
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                log.warning("terminating worker %s", w.name)
                w.terminate()
                w.join(timeout=5)
    outcome.errors.extend(f"{r.role} {r.destination}: {r.error}" for r in outcome.results if r.error)
    return outcome


# -- measuring ---------------------------------------------------------------------------------------


def _safe(fn, *args):
    try:
        return fn(*args)
    except (OSError, ValueError, IndexError):
        return None


def measure_workload(broker: CorePetrel, workload: Workload, run: int, args, counts: Counts) -> list[Measurement]:
    """Fresh broker, CORE warm-up, each phase measured, broker stopped. Each Measurement also
    gets ``client_cpu_us`` (client CPU per message; ``generator_cpu_pct`` is the busiest one's share)."""
    rows = [Measurement(broker.name, p.row, run, args.procs) for p in workload.phases]
    try:
        broker.start()
    except BrokerFailed as exc:
        for m in rows:
            m.error = f"start failed: {exc}"[:500]
        return rows
    try:
        if counts.warmup:
            warm = run_phase(warmup(counts), broker.url, 1, args.size)
            if warm.errors:
                for m in rows:
                    m.error = "warm-up failed: " + "; ".join(warm.errors)[:400]
                return rows
        for phase, m in zip(workload.phases, rows):
            cpu0 = [None]

            def started(cpu0=cpu0) -> None:
                cpu0[0] = _safe(procstat.cpu_seconds, broker.pid)

            outcome = run_phase(phase, broker.url, args.procs, args.size, on_start=started)
            cpu1 = _safe(procstat.cpu_seconds, broker.pid)
            rss = _safe(procstat.peak_rss_mib, broker.pid)
            m.loadavg_1m = procstat.loadavg_1m()
            if outcome.errors:
                m.error = "; ".join(outcome.errors)[:500]
            summarise(phase, outcome.results, m)
            add_broker_figures(m, None if cpu0[0] is None or cpu1 is None else cpu1 - cpu0[0], rss)
            if outcome.loads:
                m.generator_cpu_pct = 100.0 * max(outcome.loads)
            m.client_cpu_us = outcome.cpu_s / m.messages * 1e6 if m.messages else None
            if m.error:
                for rest in rows[rows.index(m) + 1 :]:
                    rest.error = f"skipped: {m.row} failed"
                break
    finally:
        broker.stop()
    return rows


def describe(m: Measurement) -> str:
    if not m.ok:
        return f"{m.row:8} FAILED {m.error}"
    lat = f" p50 {m.p50_ms:.2f} ms p99 {m.p99_ms:.2f} ms" if m.p50_ms is not None else ""
    cpu = f" broker {m.cpu_us_per_msg:.1f} us/msg" if m.cpu_us_per_msg is not None else ""
    client = f" client {m.client_cpu_us:.1f} us/msg" if getattr(m, "client_cpu_us", None) else ""
    rss = f" rss {m.peak_rss_mib:.0f} MiB" if m.peak_rss_mib is not None else ""
    return f"{m.row:8} {m.rate:>10,.0f} msgs/s{lat}{cpu}{client}{rss}"


# -- the peers' figures ----------------------------------------------------------------------------


def _stompbench_files(dirs) -> list[Path]:
    """stompbench's <date>-<time>.json files, newest first (ours start with a word)."""
    files = [p for d in dirs if d.is_dir() for p in d.glob("[0-9]*-[0-9]*.json")]
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


def _measurements(payload: dict) -> list[Measurement]:
    known = set(Measurement.__dataclass_fields__)
    return [Measurement(**{k: v for k, v in d.items() if k in known}) for d in payload.get("measurements", [])]


def load_peers(path: Path | None) -> tuple[Path, dict] | None:
    """(file, payload) of the chosen stompbench results: ``path``, or the newest file that
    measured a peer (full counts preferred over ``--quick`` ones)."""
    if path is not None:
        return path, json.loads(path.read_text())
    quick_fallback = None
    for candidate in _stompbench_files(PEER_DIRS):
        try:
            payload = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        if not any(m.broker in PEERS and m.ok for m in _measurements(payload)):
            continue
        if payload.get("args", {}).get("quick") == "True":
            quick_fallback = quick_fallback or (candidate, payload)
            continue
        return candidate, payload
    return quick_fallback


def run_peers(args) -> Path | None:
    """No stompbench results: measure the peers only, with stompbench itself."""
    out_dir = args.results_dir
    cmd = [sys.executable, "-m", "stompbench", "--brokers", ",".join(PEERS), "--no-readme",
           "--no-self-test", "--check-procs", "0", "--runs", str(args.runs), "--results-dir", str(out_dir)]
    if args.quick:
        cmd.append("--quick")
    print("no stompbench results found; running: " + " ".join(cmd), file=sys.stderr, flush=True)
    before = set(_stompbench_files([out_dir]))
    subprocess.run(cmd, cwd=BENCH_DIR, check=False)
    new = [p for p in _stompbench_files([out_dir]) if p not in before]
    return new[0] if new else None


def best_peers(payload: dict) -> tuple[dict[str, tuple[float, str, int]], dict[str, float]]:
    """row -> (best median msgs/s of a peer, that peer, its generator processes), and
    row -> Petrel's own STOMP median msgs/s in the same file (1 generator process)."""
    best: dict[str, tuple[float, str, int]] = {}
    stomp: dict[str, float] = {}
    for (broker, row, procs), cells in medians(_measurements(payload)).items():
        v = cells["rate"].value
        if broker in PEERS and v is not None and (row not in best or v > best[row][0]):
            best[row] = (v, broker, procs)
        elif broker == "petrel" and procs == 1 and v is not None:
            stomp[row] = v
    return best, stomp


# -- report ----------------------------------------------------------------------------------------




def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(measurements: list[Measurement], rows: list[str], peers: dict, stomp: dict, labels: dict) -> str:
    head = ["row", "CORE msgs/s", "p50 ms", "p99 ms", "broker CPU µs/msg", "broker peak RSS MiB",
            "client CPU µs/msg", "busiest client proc CPU %", "Petrel STOMP msgs/s",
            "best peer STOMP msgs/s", "CORE / best peer", "target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        ms = [m for m in measurements if m.row == row]
        good = [m for m in ms if m.ok]
        if not ms:
            continue

        def med(attr: str) -> float | None:
            return _median(getattr(m, attr, None) for m in good)

        rate = med("rate")
        rate_text = _fmt(rate) if good else "failed"
        if good and len(good) < len(ms):
            rate_text += f" ({len(good)}/{len(ms)} runs)"
        peer = peers.get(row)
        peer_text = "–" if peer is None else f"{peer[0]:,.0f} ({labels.get(peer[1], peer[1])}, {peer[2]} proc)"
        r = rate / peer[0] if rate is not None and peer else None
        target = TARGETS.get(row)
        verdict = "–" if target is None else (
            f">= {target}×: " + ("?" if r is None else ("met" if r >= target else "NOT met")))
        lines.append("| " + " | ".join([
            row, rate_text, _fmt(med("p50_ms"), 2), _fmt(med("p99_ms"), 2), _fmt(med("cpu_us_per_msg")),
            _fmt(med("peak_rss_mib")), _fmt(med("client_cpu_us")), _fmt(med("generator_cpu_pct"), 0),
            _fmt(stomp.get(row)), peer_text, "–" if r is None else f"{r:.2f}×", verdict,
        ]) + " |")
    return "\n".join(lines)


# -- command line ----------------------------------------------------------------------------------


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="stompbench's --quick counts")
    p.add_argument("--runs", type=int, default=3, help="runs per workload; medians (default 3)")
    p.add_argument("--procs", type=int, default=1, help="client processes per phase (default 1)")
    p.add_argument("--workloads", default="S1,S2,S3,S4,S5,L2,G", help="comma list (G: the client ceiling)")
    p.add_argument("--count", action="append", default=[], metavar="NAME=N", help="as stompbench's --count")
    p.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    p.add_argument("--peers", type=Path, help="stompbench results JSON with the peers' figures")
    p.add_argument("--no-run-peers", action="store_true", help="never run stompbench for the peers")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--results-dir", type=Path, default=BENCH_DIR / "results")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if min(args.runs, args.procs, args.size) < 1:
        p.error("--runs, --procs and --size must be >= 1")
    if not args.host.startswith("127."):
        p.error("loopback only (127.0.0.0/8)")
    args.workloads = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    counts = (Counts.quick() if args.quick else Counts()).with_overrides(args.count)
    catalogue = {**build(counts), "G": client_ceiling(counts)}
    missing = [w for w in args.workloads if w not in catalogue]
    if missing:
        print(f"unknown workload(s) {missing}; choose from {', '.join(catalogue)}", file=sys.stderr)
        return 2
    workloads = [catalogue[w] for w in args.workloads]
    rows = [p.row for w in workloads for p in w.phases]

    found = load_peers(args.peers)
    if found is None and not args.no_run_peers:
        path = run_peers(args)
        found = (path, json.loads(path.read_text())) if path else None
    peer_file, peer_payload = found if found else (None, {})
    peers, stomp = best_peers(peer_payload)
    labels = {k: v.get("label", k) for k, v in peer_payload.get("brokers", {}).items() if isinstance(v, dict)}

    started = dt.datetime.now().astimezone()
    broker = CorePetrel(args.host)
    broker.check()
    measurements: list[Measurement] = []
    interrupted = False
    try:
        for run in range(1, args.runs + 1):
            for workload in workloads:
                for m in measure_workload(broker, workload, run, args, counts):
                    measurements.append(m)
                    print(f"[run {run}/{args.runs}] {describe(m)}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: broker stopped, writing what was measured", file=sys.stderr)
    loads = sorted(m.loadavg_1m for m in measurements if m.loadavg_1m is not None)
    header = [
        f"### CORE rows: Petrel over CORE (asyncio Python client), {started:%Y-%m-%d %H:%M %Z}",
        "",
        f"{broker.label}, medians of {args.runs} run(s), {args.procs} client process(es), "
        f"{args.size}-byte bodies, a fresh broker per workload and run warmed up with {counts.warmup:,} "
        f"non-persistent CORE messages. Counts: S1 {counts.s1:,}, S2 {counts.s2:,}, S3 4 x {counts.s3:,}, "
        f"S4 {counts.s4:,} x 4, S5 {counts.s5:,}, L2 {counts.l2_rate:,}/s for {counts.l2_seconds} s."
        + (f" Host load (1 min) at the end of the phases: median {loads[len(loads) // 2]:.1f}, "
           f"max {loads[-1]:.1f}." if loads else ""),
        "",
        "Peers' figures: " + (f"`{peer_file}` (stompbench, started {peer_payload.get('started', '?')}; "
                              "best median msgs/s per row over ActiveMQ and RabbitMQ, STOMP)"
                              if peer_file else "none found"),
        "",
        table(measurements, rows, peers, stomp, labels),
        "",
        "CORE / best peer > 1 is better. Client CPU µs/msg: CPU time of the client processes / "
        "messages; busiest client proc CPU %: CPU time / wall time of the busiest client process "
        "(100 = one core). `G pub`: S1's producer alone into a queue with no consumer, confirmed "
        "sends per second: the client's ceiling as a producer against this broker.",
    ]
    markdown = "\n".join(header)
    payload = {
        "kind": "core-rows",
        "started": started.isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        "args": {k: str(v) for k, v in vars(args).items()},
        "counts": vars(counts),
        "peers_file": str(peer_file) if peer_file else None,
        "peers_best": {row: list(v) for row, v in peers.items()},
        "measurements": [{**m.as_dict(), "client_cpu_us": getattr(m, "client_cpu_us", None)}
                         for m in measurements],
        "markdown": markdown,
        "interrupted": interrupted,
    }
    out = args.results_dir / f"core-rows-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(markdown)
    print(f"results: {out}", file=sys.stderr)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
