"""HA benchmark: failover time, the cost of a replicating backup, and the initial sync.

Brokers are real ``petrel run`` processes paired by ``petrel.testing.ha.make_pair`` (free
loopback ports, data dirs in a temp dir, the journal's default sync before every
confirmation), always stopped in a ``finally``. Three parts, each in one run of this script:

- ``failover``: a CORE client with default settings on
  ``failover:(tcp://P,tcp://B)?randomize=false`` sends persistent messages one at a time,
  each awaited until confirmed (``send(..., wait=True)``); the live is killed with SIGKILL;
  the figure is kill -> the first send confirmed by the other node. Also shown: kill -> the
  other node's ``/health`` says ``ok`` (polled every 5 ms) and kill -> the client reconnected.
  The killed node is started again as the backup (and, for replication, brought in sync)
  before the next run, so the live alternates. Modes: ``replication`` (``lone_pair_failover``),
  ``shared_store`` (one data directory, ``allow_failback = false``) and ``zookeeper``
  (replication with a ZooKeeper lock manager, ``session_ms`` 2000: the backup takes over once
  the dead live's session expires).
- ``cost``: stompbench's S2 (1 -> 1, persistent, 1,000 unconfirmed) and S5 (fill, then drain)
  over CORE (``bench/core_rows.py``'s clients and counts) on one broker alone and on the
  primary of a replication pair whose backup is in sync, interleaved (alone, pair, RabbitMQ,
  alone, pair, ...), a fresh broker or pair per run; ratios of medians. RabbitMQ's S2 (STOMP,
  stompbench's own harness) runs in the same loop when it is installed.
- ``sync``: a primary alone is filled with a backlog (``--backlog-mib`` of persistent
  ``--backlog-size``-byte messages, confirmed); then S1 (non-persistent 1 -> 1) runs on it
  without a backup, then again and again while a backup that was just started copies the
  backlog, then once the backup is in sync. Figures: backup start -> in sync, and S1 msgs/s
  without / during / after the sync.

    .venv/bin/python bench/ha.py                  # 20 failovers per mode, 3 cost runs, 1 GiB sync (~6 min)
    .venv/bin/python bench/ha.py --quick          # 5 failovers, 1 cost run, quick counts, 64 MiB sync (~1 min)
    .venv/bin/python bench/ha.py --parts failover --modes replication,shared_store --failovers 10

Results: bench/results/ha-<timestamp>.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from stompbench import procstat  # noqa: E402
from stompbench.metrics import Measurement, add_broker_figures, percentile, summarise  # noqa: E402
from stompbench.workloads import Counts, Phase, ProducerSpec, build, warmup  # noqa: E402
from core_clients import now_ns  # noqa: E402
from core_rows import run_phase  # noqa: E402
from ha_report import ZK_SESSION_MS, _fmt, cost_summary, cost_table, failover_table, sync_table  # noqa: E402

from petrel.client import Message, connect  # noqa: E402
from petrel.testing.ha import ha_view, live_of, make_pair, wait_in_sync  # noqa: E402
from petrel.testing.process import BrokerProcess, wait_for  # noqa: E402

log = logging.getLogger("ha_bench")

FAILOVER_QUEUE = "queue://bench.ha.failover"
BACKLOG = "queue:bench.ha.backlog"
WAITING = ("backup", "failing-back")  # /health of a shared-store node waiting for the live lock


@dataclass(frozen=True)
class Mode:
    name: str
    kind: str  # make_pair's kind
    policy: str  # extra [ha_policy] lines for both nodes


def modes(zk_connect: str | None, session_ms: int = ZK_SESSION_MS) -> dict[str, Mode]:
    zk = (f'lock_manager = {{ type = "zookeeper", connect_string = "{zk_connect}", session_ms = {session_ms} }}\n'
          if zk_connect else "")
    return {
        "replication": Mode("replication", "replication", "lone_pair_failover = true\n"),
        "shared_store": Mode("shared_store", "shared_store", "allow_failback = false\n"),
        "zookeeper": Mode("zookeeper", "replication", zk),
    }


def _stop(*nodes: BrokerProcess) -> None:
    for node in nodes:
        try:
            node.stop()
        except Exception as exc:  # keep stopping the others
            log.error("stopping %s: %s", node.workdir, exc)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# -- 1. failover time ------------------------------------------------------------------------------


def _wait_serving(node: BrokerProcess, timeout: float = 60.0) -> int:
    """Poll ``/health`` every 5 ms until ``ok``; the monotonic ns when it was seen."""
    def ok() -> int | None:
        if node.proc is not None and node.proc.poll() is not None:
            raise RuntimeError(f"{node.workdir.name} exited with {node.proc.returncode}:\n{node.log()}")
        return now_ns() if node.health().get("status") == "ok" else None

    return wait_for(ok, timeout, 0.005, f"{node.workdir.name} not serving in {timeout}s:\n{node.log()}")


def _purge(node: BrokerProcess, queue: str) -> int:
    """Remove every message of ``queue`` on ``node`` (management API); how many it removed."""
    req = urllib.request.Request(f"http://127.0.0.1:{node.http_port}/api/v1/queues/{queue}/purge",
                                 data=b"{}", headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read()).get("removed", 0)


def _rejoin(node: BrokerProcess, mode: Mode) -> None:
    """Start a killed node again and wait until it is a ready backup."""
    node.start(wait=False)
    if mode.kind == "replication":
        wait_in_sync(node, timeout=120)
    else:
        node.wait_state(*WAITING, timeout=60)


async def failover_runs(p: BrokerProcess, b: BrokerProcess, mode: Mode, runs: int, warm_s: float,
                        out: list[dict], keep_backlog: bool = False) -> None:
    """``runs`` kills of the live, each appended to ``out`` as it is measured. After each, the
    queue is purged (unless ``keep_backlog``), so that every run starts with the same store."""
    loop = asyncio.get_running_loop()
    url = f"failover:(tcp://127.0.0.1:{p.port},tcp://127.0.0.1:{b.port})?randomize=false"
    conn = await asyncio.wait_for(connect(url), 30)
    producer = (await conn.session()).producer(FAILOVER_QUEUE)
    confirms: list[tuple[int, int]] = []  # (ns, port of the broker that confirmed)
    resumed: list[int] = []
    conn.on_resumed.append(lambda: resumed.append(now_ns()))
    sending = asyncio.Event()
    body = b"x" * 64

    async def produce() -> None:
        while True:
            await sending.wait()
            await producer.send(Message(body), wait=True)
            confirms.append((now_ns(), conn.endpoint.port))

    task = asyncio.ensure_future(produce())
    try:
        for run in range(1, runs + 1):
            live = await loop.run_in_executor(None, live_of, p, b)
            if live is None:
                raise RuntimeError("no node serves")
            other = b if live is p else p
            mark = len(confirms)
            sending.set()
            start = time.monotonic()
            while not (len(confirms) > mark and confirms[-1][1] == live.port
                       and time.monotonic() - start >= warm_s):
                if time.monotonic() - start > 60:
                    raise RuntimeError(f"no confirmed send on {live.workdir.name} within 60 s")
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
            t_kill = now_ns()
            await loop.run_in_executor(None, live.kill9)
            t_ok = await loop.run_in_executor(None, _wait_serving, other)
            deadline = time.monotonic() + 60
            first = None
            while first is None:
                first = next((t for t, port in confirms[mark:] if t > t_kill and port == other.port), None)
                if first is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no send confirmed by {other.workdir.name} within 60 s of the kill")
                    if task.done():
                        task.result()
                    await asyncio.sleep(0.002)
            sending.clear()
            back = next((t for t in resumed if t > t_kill), None)
            f = {"mode": mode.name, "run": run, "killed": live.workdir.name,
                 "failover_s": (first - t_kill) / 1e9, "serving_s": (t_ok - t_kill) / 1e9,
                 "reconnect_s": (back - t_kill) / 1e9 if back else None,
                 "sends_before_kill": sum(1 for t, _ in confirms[mark:] if t <= t_kill)}
            out.append(f)
            _progress(f"[failover {mode.name} {run}/{runs}] killed {f['killed']}: first confirmed send after "
                      f"{f['failover_s'] * 1e3:.0f} ms (serving {f['serving_s'] * 1e3:.0f} ms, reconnected "
                      f"{_fmt(f['reconnect_s'] and f['reconnect_s'] * 1e3)} ms)")
            await asyncio.sleep(0.05)  # let the send in flight, if any, finish before the restart
            if not keep_backlog:
                f["purged"] = await loop.run_in_executor(None, _purge, other, FAILOVER_QUEUE.split("//")[1])
            await loop.run_in_executor(None, _rejoin, live, mode)
    finally:
        task.cancel()
        try:
            await conn.close(timeout=5)
        except Exception:
            pass


def measure_failover(mode: Mode, runs: int, warm_s: float, keep_backlog: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"petrel-bench-ha-{mode.name}-") as root:
        p, b = make_pair(Path(root), mode.kind, primary=mode.policy, backup=mode.policy)
        runs_out: list[dict] = []
        error = None
        try:
            p.start(wait=False)
            p.wait_state("ok", timeout=60)
            if mode.kind == "replication":
                b.start(wait=False)
                wait_in_sync(b, timeout=120)
            else:
                b.start(wait=False)
                b.wait_state("backup", timeout=60)
            asyncio.run(failover_runs(p, b, mode, runs, warm_s, runs_out, keep_backlog))
        except (RuntimeError, TimeoutError, OSError, asyncio.TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:2000]
            _progress(f"[failover {mode.name}] FAILED {error}")
        finally:
            _stop(p, b)
    return {"mode": mode.name, "runs": runs, "measured": runs_out, "error": error}


def failover_summary(f: dict) -> dict:
    out = {"mode": f["mode"], "runs": f["runs"], "ok": len(f["measured"]), "error": f["error"]}
    for key in ("failover_s", "serving_s", "reconnect_s"):
        values = sorted(r[key] for r in f["measured"] if r[key] is not None)
        out[key] = {"p50": statistics.median(values) if values else None,
                    "p99": percentile(values, 0.99) if values else None,
                    "min": values[0] if values else None, "max": values[-1] if values else None}
    return out


# -- 2. replication cost ---------------------------------------------------------------------------


def measure_phase(label: str, phase: Phase, url: str, live: BrokerProcess, backup: BrokerProcess | None,
                  run: int, size: int) -> Measurement:
    """One phase with ``core_rows``' CORE clients; broker CPU of the live (and the backup's)."""
    m = Measurement(label, phase.row, run, 1)
    cpu0: list = [None, None]

    def started() -> None:
        cpu0[0] = _safe(procstat.cpu_seconds, live.proc.pid)
        cpu0[1] = _safe(procstat.cpu_seconds, backup.proc.pid) if backup else None

    outcome = run_phase(phase, url, 1, size, on_start=started)
    cpu1 = _safe(procstat.cpu_seconds, live.proc.pid)
    bcpu1 = _safe(procstat.cpu_seconds, backup.proc.pid) if backup else None
    m.loadavg_1m = procstat.loadavg_1m()
    if outcome.errors:
        m.error = "; ".join(outcome.errors)[:500]
    summarise(phase, outcome.results, m)
    add_broker_figures(m, None if cpu0[0] is None or cpu1 is None else cpu1 - cpu0[0],
                       _safe(procstat.peak_rss_mib, live.proc.pid))
    m.backup_cpu_us = ((bcpu1 - cpu0[1]) / m.messages * 1e6
                       if backup and bcpu1 is not None and cpu0[1] is not None and m.messages else None)
    return m


def _safe(fn, *args):
    try:
        return fn(*args)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def measure_layout(layout: str, run: int, counts: Counts, size: int) -> list[Measurement]:
    """``alone``: one broker; ``pair``: a replication primary with its backup in sync. Warm-up,
    S2, S5 fill, S5 drain; the brokers stopped."""
    phases = [*build(counts)["S2"].phases, *build(counts)["S5"].phases]
    rows = [Measurement(layout, ph.row, run, 1) for ph in phases]
    with tempfile.TemporaryDirectory(prefix=f"petrel-bench-ha-{layout}-") as root:
        if layout == "pair":
            live, backup = make_pair(Path(root), "replication")
        else:
            live, backup = BrokerProcess(Path(root) / "alone", name="alone", http=True), None
        try:
            live.start(wait=False)
            live.wait_state("ok", timeout=60)
            if backup is not None:
                backup.start(wait=False)
                wait_in_sync(backup, timeout=120)
            url = f"tcp://127.0.0.1:{live.port}"
            warm = run_phase(warmup(counts), url, 1, size)
            if warm.errors:
                raise RuntimeError("warm-up failed: " + "; ".join(warm.errors)[:400])
            for i, phase in enumerate(phases):
                m = rows[i] = measure_phase(layout, phase, url, live, backup, run, size)
                if backup is not None:
                    state = (ha_view(backup).get("replication", {}).get("live") or {}).get("state")
                    m.backup_state = state
                    if state != "in-sync" and not m.error:
                        m.error = f"the backup is {state!r} after the phase, not in sync"
                _progress(f"[cost run {run}] {describe(m)}")
                if m.error:
                    break
        except (RuntimeError, TimeoutError, OSError) as exc:
            for m in rows:
                if m.error is None and m.rate is None:
                    m.error = f"{type(exc).__name__}: {exc}"[:500]
            _progress(f"[cost run {run}] {layout}: FAILED {exc}")
        finally:
            _stop(*(n for n in (live, backup) if n is not None))
    return rows


def rabbitmq_s2(run: int, counts: Counts, size: int) -> list[Measurement]:
    """RabbitMQ's S2 through stompbench's own harness (STOMP, its default setup)."""
    from stompbench.brokers.rabbitmq import RabbitMQ
    from stompbench.harness import Plan, measure_workload

    broker = RabbitMQ()
    workload = build(counts)["S2"]
    plan = Plan([broker], [workload], 1, 1, size, warmup(counts), progress=_progress)
    rows = measure_workload(broker, workload, run, plan, 1)
    for m in rows:
        m.broker = "rabbitmq"
        _progress(f"[cost run {run}] {describe(m)}")
    return rows


def rabbitmq_available() -> str | None:
    """None when stompbench can run RabbitMQ here, else why not."""
    try:
        from stompbench.brokers.base import BrokerUnavailable
        from stompbench.brokers.rabbitmq import RabbitMQ

        try:
            RabbitMQ().check()
        except BrokerUnavailable as exc:
            return str(exc)
        return None
    except Exception as exc:  # an import or probe failure: say so, measure the rest
        return f"{type(exc).__name__}: {exc}"


def describe(m: Measurement) -> str:
    if not m.ok:
        return f"{m.broker:8} {m.row:8} FAILED {m.error}"
    lat = f" p50 {m.p50_ms:.2f} ms p99 {m.p99_ms:.2f} ms" if m.p50_ms is not None else ""
    cpu = f" live {m.cpu_us_per_msg:.1f} us/msg" if m.cpu_us_per_msg is not None else ""
    bcpu = getattr(m, "backup_cpu_us", None)
    return f"{m.broker:8} {m.row:8} {m.rate:>10,.0f} msgs/s{lat}{cpu}" + (f" backup {bcpu:.1f} us/msg" if bcpu else "")


# -- 3. initial sync -------------------------------------------------------------------------------


def s1_phase(count: int) -> Phase:
    return build(Counts(s1=count))["S1"].phases[0]


def measure_sync(args, counts: Counts) -> dict:
    size = args.backlog_size
    total = args.backlog_mib * 1024 * 1024
    count = max(1, total // size)
    out: dict = {"backlog_messages": count, "backlog_size": size, "backlog_bytes": count * size,
                 "s1_count": args.s1_chunk, "without": [], "during": [], "after": [], "error": None}
    with tempfile.TemporaryDirectory(prefix="petrel-bench-ha-sync-") as root:
        p, b = make_pair(Path(root), "replication")
        try:
            p.start(wait=False)
            p.wait_state("ok", timeout=60)
            url = f"tcp://127.0.0.1:{p.port}"
            warm = run_phase(warmup(counts), url, 1, args.size)
            if warm.errors:
                raise RuntimeError("warm-up failed: " + "; ".join(warm.errors)[:400])
            fill = Phase("backlog fill", (ProducerSpec(BACKLOG, count, persistent=True, window=counts.window),), (),
                         latency="receipt")
            m = measure_phase("alone", fill, url, p, None, 1, size)
            out["fill"] = m.as_dict()
            _progress(f"[sync] {count:,} x {size:,} B backlog: {describe(m)}")
            if not m.ok:
                raise RuntimeError(f"backlog fill failed: {m.error}")
            out["journal_mib"] = _du_mib(p.data_dir)
            s1 = s1_phase(args.s1_chunk)
            for i in range(args.s1_runs):
                m = measure_phase("no backup", s1, url, p, None, i + 1, args.size)
                out["without"].append(m.as_dict())
                _progress(f"[sync] S1 without a backup: {describe(m)}")
            synced: list[int] = []
            t0 = now_ns()
            b.start(wait=False)
            watcher = threading.Thread(target=lambda: synced.append(_wait_in_sync_ns(b)), daemon=True)
            watcher.start()
            k = 0
            while not synced and watcher.is_alive():
                k += 1
                start = now_ns()
                m = measure_phase("during sync", s1, url, p, b, k, args.size)
                d = m.as_dict()
                d["whole_within_sync"] = bool(not synced or synced[0] >= now_ns())
                d["started_after_s"] = (start - t0) / 1e9
                out["during"].append(d)
                _progress(f"[sync] S1 while the backup syncs (started {d['started_after_s']:.1f} s after it, "
                          f"{'inside' if d['whole_within_sync'] else 'overlapping the end of'} the sync): "
                          f"{describe(m)}")
            watcher.join(timeout=args.sync_timeout)
            if not synced:
                raise RuntimeError(f"backup not in sync within {args.sync_timeout} s:\n{b.log()}")
            out["sync_s"] = (synced[0] - t0) / 1e9
            out["backup_journal_mib"] = _du_mib(b.data_dir)
            _progress(f"[sync] backup in sync {out['sync_s']:.1f} s after its start")
            for i in range(args.s1_runs):
                m = measure_phase("in sync", s1, url, p, b, i + 1, args.size)
                out["after"].append(m.as_dict())
                _progress(f"[sync] S1 with the backup in sync: {describe(m)}")
        except (RuntimeError, TimeoutError, OSError) as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            _progress(f"[sync] FAILED {out['error']}")
        finally:
            _stop(p, b)
    return out


def _wait_in_sync_ns(backup: BrokerProcess, timeout: float = 1800) -> int:
    """Poll the backup's /api/v1/ha every 20 ms; the monotonic ns at which it says in-sync."""
    def in_sync() -> int | None:
        if backup.proc is not None and backup.proc.poll() is not None:
            raise RuntimeError(f"backup exited with {backup.proc.returncode}")
        live = ha_view(backup).get("replication", {}).get("live") or {}
        return now_ns() if live.get("state") == "in-sync" else None

    try:
        return wait_for(in_sync, timeout, 0.02)
    except (RuntimeError, TimeoutError) as exc:
        log.error("waiting for the sync: %s", exc)
        raise


def _du_mib(path: Path) -> float | None:
    try:
        return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 2**20
    except OSError:
        return None


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average {os.getloadavg()}"


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="--failovers 5 --runs 1, stompbench's quick counts, --backlog-mib 64")
    p.add_argument("--parts", default="failover,cost,sync", help="comma list of failover, cost, sync")
    p.add_argument("--modes", default="replication,shared_store,zookeeper", help="failover modes")
    p.add_argument("--failovers", type=int, help="kill -9 runs per mode (default 20)")
    p.add_argument("--zk-session-ms", type=int, default=ZK_SESSION_MS,
                   help=f"the ZooKeeper lock manager's session_ms ({ZK_SESSION_MS}; the broker's default is 18000)")
    p.add_argument("--zk-failovers", type=int, help="kill -9 runs of the zookeeper mode (default: --failovers)")
    p.add_argument("--keep-backlog", action="store_true",
                   help="never purge the failover queue: the store grows by every run's sends")
    p.add_argument("--warm", type=float, default=0.5, help="seconds of confirmed sends before each kill (0.5)")
    p.add_argument("--runs", type=int, help="cost runs per layout; medians (default 3)")
    p.add_argument("--count", action="append", default=[], metavar="NAME=N", help="as stompbench's --count")
    p.add_argument("--size", type=int, default=1024, help="body bytes of S1/S2/S5 (1024)")
    p.add_argument("--no-rabbitmq", action="store_true", help="skip RabbitMQ's S2")
    p.add_argument("--backlog-mib", type=int, help="initial sync backlog (default 1024)")
    p.add_argument("--backlog-size", type=int, default=1024, help="backlog body bytes (1024)")
    p.add_argument("--s1-chunk", type=int, help="messages per S1 run in the sync part (default 50,000)")
    p.add_argument("--s1-runs", type=int, default=3, help="S1 runs without a backup and once in sync (3)")
    p.add_argument("--sync-timeout", type=float, default=1800.0)
    p.add_argument("--results-dir", type=Path, default=BENCH_DIR / "results")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    args.parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    args.modes = [x.strip() for x in args.modes.split(",") if x.strip()]
    args.failovers = args.failovers or (5 if args.quick else 20)
    args.runs = args.runs or (1 if args.quick else 3)
    args.backlog_mib = args.backlog_mib or (64 if args.quick else 1024)
    args.s1_chunk = args.s1_chunk or (20_000 if args.quick else 50_000)
    bad = [x for x in args.parts if x not in ("failover", "cost", "sync")] + \
        [x for x in args.modes if x not in ("replication", "shared_store", "zookeeper")]
    if bad:
        p.error(f"unknown part or mode: {bad}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    counts = (Counts.quick() if args.quick else Counts()).with_overrides(args.count)
    started = dt.datetime.now().astimezone()
    load_before = uptime()
    _progress(f"before: {load_before}")
    payload: dict = {"kind": "ha", "started": started.isoformat(timespec="seconds"),
                     "host": {"cpus": os.cpu_count(), "kernel": platform.release(),
                              "python": platform.python_version()},
                     "args": {k: str(v) for k, v in vars(args).items()}, "counts": vars(counts),
                     "uptime_before": load_before}
    sections = []
    interrupted = False
    try:
        if "failover" in args.parts:
            failovers = []
            for name in args.modes:
                if name == "zookeeper":
                    failovers.append(_zookeeper_failover(args))
                    continue
                failovers.append(measure_failover(modes(None)[name], args.failovers, args.warm, args.keep_backlog))
            payload["failover"] = failovers
            summaries = [failover_summary(f) for f in failovers]
            payload["failover_summary"] = summaries
        if "cost" in args.parts:
            why_not = None if args.no_rabbitmq else rabbitmq_available()
            payload["rabbitmq"] = "skipped (--no-rabbitmq)" if args.no_rabbitmq else (why_not or "measured")
            measured: list[Measurement] = []
            for run in range(1, args.runs + 1):
                measured += measure_layout("alone", run, counts, args.size)
                measured += measure_layout("pair", run, counts, args.size)
                if not args.no_rabbitmq and why_not is None:
                    measured += rabbitmq_s2(run, counts, args.size)
            payload["cost"] = [{**m.as_dict(), "backup_cpu_us": getattr(m, "backup_cpu_us", None),
                                "backup_state": getattr(m, "backup_state", None)} for m in measured]
            payload["cost_summary"] = {f"{row}/{b}": c for (row, b), c in cost_summary(measured).items()}
        if "sync" in args.parts:
            payload["sync"] = measure_sync(args, counts)
    except KeyboardInterrupt:
        interrupted = True
        _progress("interrupted: brokers stopped, reporting what was measured")
    load_after = uptime()
    _progress(f"after: {load_after}")
    payload["uptime_after"] = load_after
    if "failover_summary" in payload:
        sections += [f"#### Failover: kill -9 of the live -> first confirmed send ({args.failovers} runs per mode)",
                     "", failover_table(payload["failover_summary"], args.zk_session_ms), ""]
    if "cost" in payload:
        table = cost_summary([_measurement(d) for d in payload["cost"]])
        sections += [f"#### Replication cost: a backup in sync vs the same broker alone (medians of {args.runs} "
                     f"interleaved run(s); RabbitMQ: {payload['rabbitmq']})", "", cost_table(table), ""]
    if "sync" in payload:
        sections += ["#### Initial sync of a backlog while the live serves S1", "", sync_table(payload["sync"]), ""]
    text = "\n".join([
        f"### HA: failover, replication cost, initial sync, {started:%Y-%m-%d %H:%M %Z}",
        "",
        f"Host: {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}. "
        f"Counts: S1 chunk {args.s1_chunk:,}, S2 {counts.s2:,}, S5 {counts.s5:,} ({args.size}-byte bodies), "
        f"warm-up {counts.warmup:,} non-persistent.",
        f"Load before: `{load_before}`; after: `{load_after}`.",
        "",
        *sections,
    ])
    payload["markdown"] = text
    payload["interrupted"] = interrupted
    out = args.results_dir / f"ha-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(text)
    print(f"results: {out}", file=sys.stderr)
    return 130 if interrupted else 0


def _measurement(d: dict) -> Measurement:
    known = set(Measurement.__dataclass_fields__)
    m = Measurement(**{k: v for k, v in d.items() if k in known})
    m.backup_cpu_us = d.get("backup_cpu_us")
    return m


def _zookeeper_failover(args) -> dict:
    from petrel.testing.zookeeper import ZooKeeperServer, zookeeper_available

    why_not = zookeeper_available()
    if why_not:
        _progress(f"[failover zookeeper] skipped: {why_not}")
        return {"mode": "zookeeper", "runs": 0, "measured": [], "error": f"skipped: {why_not}"}
    with tempfile.TemporaryDirectory(prefix="petrel-bench-ha-zk-") as root:
        zk = ZooKeeperServer(Path(root) / "zk")
        try:
            zk.start()
            return measure_failover(modes(zk.connect_string, args.zk_session_ms)["zookeeper"],
                                    args.zk_failovers or args.failovers, args.warm, args.keep_backlog)
        finally:
            zk.close()


if __name__ == "__main__":
    sys.exit(main())
