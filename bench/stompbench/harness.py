"""The measuring loop: for each run, workload and broker, a fresh broker process.

A broker is started for every (run, workload) with an empty data directory, warmed
up with a short non-persistent pass, measured phase by phase, and stopped.  That
way VmHWM (peak RSS since process start) is the peak of that one workload (its
warm-up included) and no workload inherits another's stored messages.  Runs are
interleaved (run 1 of every workload on every broker, then run 2 ...), so slow
drift of the machine (and of a Petrel tree being worked on) spreads over all brokers
alike.  The process-count check is interleaved the same way: right after a workload
runs with N generator processes on a broker, it runs again with the check's count.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Callable

from . import procstat
from .brokers import Broker, BrokerFailed
from .metrics import Measurement, add_broker_figures, summarise
from .runner import run_phase
from .workloads import Phase, Workload

log = logging.getLogger("stompbench.harness")


@dataclass
class Plan:
    brokers: list[Broker]
    workloads: list[Workload]
    runs: int
    procs: int
    body_size: int
    warmup: Phase | None
    check_procs: int = 0  # also run with this many generator processes (0: no)
    check_keys: tuple[str, ...] = ()  # ... these workloads only (empty: all)
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)


@dataclass
class _Probe:
    pid: int
    cpu0: float | None = None

    def start(self) -> None:
        self.cpu0 = _safe(procstat.cpu_seconds, self.pid)


def _safe(fn, pid: int) -> float | None:
    try:
        return fn(pid)
    except (OSError, ValueError, IndexError):
        return None


def measure_workload(
    broker: Broker, workload: Workload, run: int, plan: Plan, procs: int
) -> list[Measurement]:
    """Start ``broker``, warm it up, measure each phase of ``workload``, stop it."""
    rows = [Measurement(broker.name, p.row, run, procs) for p in workload.phases]
    try:
        broker.start()
    except BrokerFailed as exc:
        for m in rows:
            m.error = f"start failed: {exc}"[:500]
        return rows
    try:
        if plan.warmup is not None and plan.warmup.messages:
            warm = run_phase(plan.warmup, broker.dialect, broker.host, broker.port, 1, plan.body_size)
            if warm.errors:
                for m in rows:
                    m.error = "warm-up failed: " + "; ".join(warm.errors)[:400]
                return rows
        for phase, m in zip(workload.phases, rows):
            probe = _Probe(broker.pid)
            outcome = run_phase(
                phase,
                broker.dialect,
                broker.host,
                broker.port,
                procs,
                plan.body_size,
                on_start=probe.start,
            )
            cpu1 = _safe(procstat.cpu_seconds, broker.pid)
            rss = _safe(procstat.peak_rss_mib, broker.pid)
            m.loadavg_1m = procstat.loadavg_1m()
            if outcome.errors:
                m.error = "; ".join(outcome.errors)[:500]
            summarise(phase, outcome.results, m)
            cpu = None if probe.cpu0 is None or cpu1 is None else cpu1 - probe.cpu0
            add_broker_figures(m, cpu, rss)
            if outcome.loads:
                m.generator_cpu_pct = 100.0 * max(outcome.loads)
            if m.error:  # later phases depend on this one (S5 drain on S5 fill)
                for rest in rows[rows.index(m) + 1 :]:
                    rest.error = f"skipped: {m.row} failed"
                break
    finally:
        broker.stop()
    return rows


def describe(m: Measurement) -> str:
    if not m.ok:
        return f"{m.row:8} {m.broker:9} FAILED {m.error}"
    lat = f" p50 {m.p50_ms:.2f} ms p99 {m.p99_ms:.2f} ms" if m.p50_ms is not None else ""
    cpu = f" cpu {m.cpu_us_per_msg:.1f} us/msg" if m.cpu_us_per_msg is not None else ""
    rss = f" rss {m.peak_rss_mib:.0f} MiB" if m.peak_rss_mib is not None else ""
    gen = f" gen {m.generator_cpu_pct:.0f}%" if m.generator_cpu_pct is not None else ""
    return f"{m.row:8} {m.broker:9} {m.rate:>10,.0f} msgs/s{lat}{cpu}{rss}{gen}"


def procs_for(plan: Plan, workload: Workload) -> list[int]:
    counts = [plan.procs]
    wanted = not plan.check_keys or workload.key in plan.check_keys
    if plan.check_procs and plan.check_procs != plan.procs and wanted:
        counts.append(plan.check_procs)
    return counts


def run_plan(plan: Plan) -> list[Measurement]:
    out: list[Measurement] = []
    for run in range(1, plan.runs + 1):
        for workload in plan.workloads:
            for broker in plan.brokers:
                for procs in procs_for(plan, workload):
                    for m in measure_workload(broker, workload, run, plan, procs):
                        out.append(m)
                        plan.progress(f"[run {run}/{plan.runs} procs {procs}] {describe(m)}")
    return out
