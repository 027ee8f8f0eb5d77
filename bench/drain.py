"""Scale-down / drain benchmark: how fast ``petrel drain`` empties a dead broker's directory
into a live one (while that one serves its own clients), and how long ``petrel cluster scale``
takes from 3 nodes to 1.

Every broker is a real ``petrel run`` process (``petrel.testing.process.BrokerProcess``: free
loopback ports, its own data directory, the journal's default sync before each confirmation),
the drainer a real ``python -m petrel drain`` process; all stopped in a ``finally``.

- ``migration``: a source broker is filled with persistent messages (one CORE producer,
  1,000 unconfirmed, ``bench/core_rows.py``'s clients), killed with SIGKILL, and its data
  directory is copied (``cp -a``) once per run, so the fill happens once per message size.
  Each run: a fresh target broker, a light load on it (one CORE producer at ``--light-rate``
  persistent 1 KiB msg/s and one consumer of that queue, its own process), then
  ``petrel drain --data-dir COPY --target tcp://127.0.0.1:PORT --progress json``. Figures:
  wall time of the drain process (start -> exit 0), messages/s and MB/s over that wall time,
  the drainer's own last reported rate (since its migration started, after recovery), the
  target's CPU, and the light load's delivered rate and latency during the drain beside the
  same load before it. The target's queue count is checked after each run.
- ``scale``: ``petrel cluster up --size 3``, nodes 2 and 3 filled with ``--scale-count``
  persistent 1 KiB messages each, then ``petrel cluster scale --size 1`` timed until it
  returns (it waits until converged); checked: the leaving nodes' directories are gone and
  node 1 holds both fills. ``petrel cluster down`` in a ``finally``.

    .venv/bin/python bench/drain.py              # 1,000,000 x 1 KiB and 10,240 x 100 KiB, 3 runs; scale 2 x 100,000
    .venv/bin/python bench/drain.py --quick      # 100,000 x 1 KiB and 1,024 x 100 KiB, 3 runs; scale 2 x 100,000
    .venv/bin/python bench/drain.py --parts migration --sizes small --runs 1 --profile
    .venv/bin/python bench/drain.py --light-load-only URL   # (internal) the light load's process

Results: bench/results/drain-<timestamp>.json and markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from stompbench import procstat  # noqa: E402
from stompbench.workloads import Phase, ProducerSpec  # noqa: E402
from stompbench.report import figure as _fmt, source_state  # noqa: E402
from core_clients import now_ns  # noqa: E402
from core_rows import run_phase  # noqa: E402

from petrel.testing.process import TEST_SECURITY, BrokerProcess, free_port  # noqa: E402

BACKLOG = "bench.drain.backlog"
LIVE = "bench.drain.live"
GOAL_RATE = 50_000


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average {os.getloadavg()}"


def _du_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 2**20


def _safe(fn, *args):
    try:
        return fn(*args)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _count(http_port: int, queue: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/v1/queues/{queue}/count", timeout=30) as r:
            return json.loads(r.read())["count"]
    except (OSError, ValueError, KeyError):
        return None


def fill(url: str, count: int, size: int) -> float:
    """``count`` persistent ``size``-byte messages into BACKLOG, 1,000 unconfirmed; confirmed sends/s."""
    phase = Phase("fill", (ProducerSpec(f"queue:{BACKLOG}", count, persistent=True, window=1000),), (),
                  latency="receipt")
    out = run_phase(phase, url, 1, size)
    if out.errors:
        raise RuntimeError("fill failed: " + "; ".join(out.errors)[:500])
    r = out.results[0]
    return r.receipts / ((r.last_receipt_ns - r.first_send_ns) / 1e9)


# -- the light load on the target ------------------------------------------------------------------


async def _light_load(url: str, rate: float, stop: asyncio.Event) -> dict:
    from petrel.client import Message, connect

    recv: list[tuple[int, int]] = []
    pconn = await connect(url)
    cconn = await connect(url)
    consumer = await (await cconn.session()).consumer(f"queue://{LIVE}", ack="auto")
    consumer.set_listener(lambda m: recv.append((now_ns(), now_ns() - m.properties.get("bench-ts", 0))))
    producer = (await pconn.session()).producer(f"queue://{LIVE}")
    body = b"l" * 1024
    sent = 0
    t0 = now_ns()
    step = 1e9 / rate
    while not stop.is_set():
        due = int((now_ns() - t0) / step) + 1
        while sent < due:
            await producer.send(Message(body, {"bench-ts": now_ns()}, durable=True))
            sent += 1
        await asyncio.sleep(0.002)
    await asyncio.sleep(1.0)  # let the last ones arrive
    await pconn.close(timeout=5)
    await cconn.close(timeout=5)
    return {"sent": sent, "recv": recv}


def light_load_main(url: str, rate: float) -> int:
    """The light load's process: runs until SIGTERM, then prints its deliveries as JSON."""
    async def main() -> dict:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print(json.dumps({"ready": True}), flush=True)
        return await _light_load(url, rate, stop)

    out = asyncio.run(main())
    print(json.dumps(out), flush=True)
    return 0


def light_stats(recv: list, start_ns: int, end_ns: int) -> dict:
    inside = [lat for t, lat in recv if start_ns <= t <= end_ns]
    secs = (end_ns - start_ns) / 1e9
    lats = sorted(inside)
    return {"received": len(inside), "rate": len(inside) / secs if secs > 0 else None,
            "p50_ms": lats[len(lats) // 2] / 1e6 if lats else None,
            "p99_ms": lats[min(len(lats) - 1, int(len(lats) * 0.99))] / 1e6 if lats else None,
            "max_ms": lats[-1] / 1e6 if lats else None}


# -- 1. migration rate -----------------------------------------------------------------------------


def drain_once(source_copy: Path, target: BrokerProcess, args, profile: Path | None) -> dict:
    cmd = [sys.executable]
    if profile:
        cmd += ["-m", "cProfile", "-o", str(profile)]
    cmd += ["-m", "petrel", "drain", "--data-dir", str(source_copy), "--target",
            f"tcp://127.0.0.1:{target.port}", "--progress", "json"]
    events: list[tuple[int, dict]] = []
    cpu0 = _safe(procstat.cpu_seconds, target.proc.pid)
    t0 = now_ns()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()
    for line in proc.stdout:
        try:
            events.append((now_ns(), json.loads(line)))
        except ValueError:
            pass
    _, status, usage = os.wait4(proc.pid, 0)  # the drainer's own CPU time with its exit status
    t1 = now_ns()
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    cpu1 = _safe(procstat.cpu_seconds, target.proc.pid)
    drainer_cpu = usage.ru_utime + usage.ru_stime
    done = next((e for _, e in events if e.get("event") == "done"), None)
    prog = [(t, e) for t, e in events if e.get("event") == "progress"]
    first_prog = prog[0][0] if prog else None
    wall = (t1 - t0) / 1e9
    moved = done["messages_moved"] if done else None
    nbytes = done["bytes_moved"] if done else None
    return {"exit": code, "wall_s": wall, "moved": moved, "bytes": nbytes,
            "rate": moved / wall if moved else None,
            "mb_s": nbytes / wall / 1e6 if nbytes else None,
            "drainer_rate": prog[-1][1]["rate"] if prog else None,
            "start_to_first_progress_s": (first_prog - t0) / 1e9 if first_prog else None,
            "target_cpu_us_per_msg": ((cpu1 - cpu0) / moved * 1e6) if moved and cpu0 is not None and cpu1 else None,
            "target_cpu_pct": ((cpu1 - cpu0) / wall * 100) if cpu0 is not None and cpu1 else None,
            "drainer_cpu_us_per_msg": drainer_cpu / moved * 1e6 if moved else None,
            "drainer_cpu_pct": drainer_cpu / wall * 100,
            "t0": t0, "t1": t1, "stderr": "".join(err)[-1500:], "progress_events": len(prog)}


def measure_migration(label: str, count: int, size: int, runs: int, args, root: Path) -> dict:
    out: dict = {"label": label, "count": count, "size": size, "runs": [], "error": None}
    src = BrokerProcess(root / f"src-{label}", name=f"src-{label}")
    try:
        src.start()
        _progress(f"[{label}] filling {count:,} x {size:,} B ...")
        out["fill_rate"] = fill(f"tcp://127.0.0.1:{src.port}", count, size)
        src.kill9()
        out["data_mib"] = _du_mib(src.data_dir)
        _progress(f"[{label}] filled at {out['fill_rate']:,.0f} msg/s, killed -9; data dir {out['data_mib']:,.0f} MiB")
        for run in range(1, runs + 1):
            copy = root / f"copy-{label}-{run}"
            subprocess.run(["cp", "-a", str(src.data_dir), str(copy)], check=True)
            target = BrokerProcess(root / f"target-{label}-{run}", name=f"target-{label}-{run}", http=True)
            load = None
            try:
                target.start(wait=False)
                target.wait_state("ok", timeout=60)
                load = subprocess.Popen([sys.executable, __file__, "--light-load-only",
                                         f"tcp://127.0.0.1:{target.port}", "--light-rate", str(args.light_rate)],
                                        stdout=subprocess.PIPE, text=True)
                json.loads(load.stdout.readline())
                time.sleep(0.5)
                before0 = now_ns()
                time.sleep(args.light_before)
                profile = root / f"drain-{label}.prof" if args.profile and run == 1 else None
                r = drain_once(copy, target, args, profile)
                time.sleep(0.5)
                load.send_signal(signal.SIGTERM)
                lo = json.loads(load.stdout.read().strip().splitlines()[-1])
                load.wait(30)
                r["light_before"] = light_stats(lo["recv"], before0, r["t0"])
                r["light_during"] = light_stats(lo["recv"], r["t0"], r["t1"])
                r["light_sent"] = lo["sent"]
                r["light_received"] = len(lo["recv"])
                r["target_count"] = _count(target.http_port, BACKLOG)
                if profile and profile.exists():
                    dest = args.results_dir / f"drain-{label}-{dt.datetime.now():%Y%m%d-%H%M%S}.prof"
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(profile, dest)
                    r["profile"] = str(dest)
                out["runs"].append(r)
                _progress(f"[{label} run {run}] exit {r['exit']}: {r['moved']} moved in {r['wall_s']:.2f} s = "
                          f"{_fmt(r['rate'])} msg/s {_fmt(r['mb_s'])} MB/s (drainer's own rate "
                          f"{_fmt(r['drainer_rate'])}); target holds {r['target_count']}; light load "
                          f"{_fmt(r['light_during']['rate'])} msg/s during (p99 {_fmt(r['light_during']['p99_ms'])} ms), "
                          f"{_fmt(r['light_before']['rate'])} before")
                if r["exit"] != 0:
                    _progress(r["stderr"])
            finally:
                if load is not None and load.poll() is None:
                    load.kill()
                target.stop()
                shutil.rmtree(copy, ignore_errors=True)
                shutil.rmtree(target.workdir, ignore_errors=True)
    except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:1500]
        _progress(f"[{label}] FAILED {out['error']}")
    finally:
        src.stop()
    return out


# -- 2. cluster scale 3 -> 1 ----------------------------------------------------------------------


def petrel(*argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """A `petrel` command whose brokers run without security, as the migration part's
    `BrokerProcess` brokers do (TEST_SECURITY), so the bench's anonymous clients can fill them."""
    env = {**TEST_SECURITY, **os.environ}
    return subprocess.run([sys.executable, "-m", "petrel", *argv], capture_output=True, text=True, timeout=timeout,
                          env=env)


def measure_scale(args, root: Path) -> dict:
    data_root = root / "cluster"
    base = args.base_port or _free_base()
    out: dict = {"count_per_node": args.scale_count, "base_port": base, "error": None}
    try:
        up = petrel("cluster", "up", "--size", "3", "--data-root", str(data_root), "--base-port", str(base))
        if up.returncode != 0:
            raise RuntimeError(f"cluster up: {up.returncode} {up.stderr[-1500:]}")
        before = sorted(p.name for p in data_root.iterdir())
        out["dirs_before"] = before
        for i in (2, 3):
            rate = fill(f"tcp://127.0.0.1:{base + 100 * (i - 1)}", args.scale_count, 1024)
            out[f"fill_node{i}_rate"] = rate
            out[f"node{i}_count"] = _count(base + 100 * (i - 1) + 2, BACKLOG)
            _progress(f"[scale] node {i} filled at {rate:,.0f} msg/s, holds {out[f'node{i}_count']}")
        out["node1_count_before"] = _count(base + 2, BACKLOG)
        t0 = time.monotonic()
        sc = petrel("cluster", "scale", "--size", "1", "--data-root", str(data_root), timeout=1800)
        out["scale_s"] = time.monotonic() - t0
        out["scale_exit"] = sc.returncode
        out["scale_output"] = (sc.stdout + sc.stderr)[-3000:]
        out["dirs_after"] = sorted(p.name for p in data_root.iterdir())
        out["node1_count_after"] = _count(base + 2, BACKLOG)
        out["moved_mb_s"] = 2 * args.scale_count * 1024 / out["scale_s"] / 1e6
        _progress(f"[scale] 3 -> 1 exit {sc.returncode} in {out['scale_s']:.1f} s; dirs {out['dirs_after']}; "
                  f"node 1 holds {out['node1_count_after']}")
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:1500]
        _progress(f"[scale] FAILED {out['error']}")
    finally:
        down = petrel("cluster", "down", "--data-root", str(data_root), timeout=120)
        out["down_exit"] = down.returncode
    return out


def _free_base() -> int:
    """A base port P with P..P+2, P+100..P+102 and P+200..P+202 free."""
    import socket
    for _ in range(100):
        p = free_port()
        if p + 300 > 32000:
            continue
        ok = True
        for port in (p + d for n in range(3) for d in (100 * n, 100 * n + 1, 100 * n + 2)):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return p
    raise RuntimeError("no free base port")


# -- report ----------------------------------------------------------------------------------------




def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def migration_table(results: list[dict]) -> str:
    head = ["backlog", "fill msgs/s", "data dir MiB", "runs ok", "drain wall s", "msgs/s (wall)", "MB/s (wall)",
            "drainer's own rate msgs/s", "start -> first progress s", "drainer CPU µs/msg, %",
            "target CPU µs/msg, %",
            "light load msgs/s before / during", "light p50 / p99 ms during", f"goal (>= {GOAL_RATE:,} msg/s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in results:
        ok = [r for r in m["runs"] if r["exit"] == 0 and r["target_count"] == m["count"]]
        rate = _med(r["rate"] for r in ok)
        goal = "–" if m["size"] > 1024 or rate is None else ("met" if rate >= GOAL_RATE else "NOT met")
        lines.append("| " + " | ".join([
            f"{m['count']:,} × {m['size'] // 1024} KiB", _fmt(m.get("fill_rate")), _fmt(m.get("data_mib")),
            f"{len(ok)}/{len(m['runs'])}" + (f" ({m['error'][:60]})" if m.get("error") else ""),
            _fmt(_med(r["wall_s"] for r in ok), 2), _fmt(rate), _fmt(_med(r["mb_s"] for r in ok)),
            _fmt(_med(r["drainer_rate"] for r in ok)), _fmt(_med(r["start_to_first_progress_s"] for r in ok), 2),
            f"{_fmt(_med(r['drainer_cpu_us_per_msg'] for r in ok))}, {_fmt(_med(r['drainer_cpu_pct'] for r in ok))}",
            f"{_fmt(_med(r['target_cpu_us_per_msg'] for r in ok))}, {_fmt(_med(r['target_cpu_pct'] for r in ok))}",
            f"{_fmt(_med(r['light_before']['rate'] for r in ok))} / {_fmt(_med(r['light_during']['rate'] for r in ok))}",
            f"{_fmt(_med(r['light_during']['p50_ms'] for r in ok), 2)} / "
            f"{_fmt(_med(r['light_during']['p99_ms'] for r in ok), 2)}", goal]) + " |")
    per_run = ["", "| backlog | run | exit | moved | wall s | msgs/s | MB/s | target holds | light during msgs/s, p99 ms |",
               "|---|---|---|---|---|---|---|---|---|"]
    for m in results:
        for i, r in enumerate(m["runs"], 1):
            per_run.append(f"| {m['count']:,} × {m['size'] // 1024} KiB | {i} | {r['exit']} | {r['moved']} | "
                           f"{_fmt(r['wall_s'], 2)} | {_fmt(r['rate'])} | {_fmt(r['mb_s'])} | {r['target_count']} | "
                           f"{_fmt(r['light_during']['rate'])}, {_fmt(r['light_during']['p99_ms'])} |")
    return "\n".join(lines + per_run)


def scale_table(s: dict) -> str:
    lines = ["| figure | value |", "|---|---|",
             f"| messages on each leaving node (nodes 2, 3) | {s.get('node2_count')}, {s.get('node3_count')} "
             f"(fill {_fmt(s.get('fill_node2_rate'))}, {_fmt(s.get('fill_node3_rate'))} msg/s) |",
             f"| `petrel cluster scale --size 1`: exit, s until it returned | {s.get('scale_exit')}, "
             f"{_fmt(s.get('scale_s'), 2)} |",
             f"| messages moved / s, MB/s (of bodies) over that time | "
             f"{_fmt(2 * s['count_per_node'] / s['scale_s'] if s.get('scale_s') else None)}, {_fmt(s.get('moved_mb_s'))} |",
             f"| directories before -> after | {', '.join(s.get('dirs_before', []))} -> "
             f"{', '.join(s.get('dirs_after', []))} |",
             f"| node 1 holds before -> after | {s.get('node1_count_before') or 0} -> {s.get('node1_count_after')} |"]
    if s.get("error"):
        lines.append(f"| error | {s['error'][:300]} |")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="100,000 x 1 KiB and 1,024 x 100 KiB")
    p.add_argument("--parts", default="migration,scale", help="comma list of migration, scale")
    p.add_argument("--sizes", default="small,large", help="comma list of small (1 KiB), large (100 KiB)")
    p.add_argument("--runs", type=int, default=3, help="drains per backlog; medians (3)")
    p.add_argument("--small-count", type=int, help="1 KiB messages (1,000,000; --quick 100,000)")
    p.add_argument("--large-count", type=int, help="100 KiB messages (10,240; --quick 1,024)")
    p.add_argument("--scale-count", type=int, default=100_000, help="1 KiB messages on each leaving node")
    p.add_argument("--base-port", type=int, help="cluster base port (default: a free one)")
    p.add_argument("--light-rate", type=float, default=500.0, help="the target's own load, persistent msg/s (500)")
    p.add_argument("--light-before", type=float, default=3.0, help="seconds of light load measured before the drain")
    p.add_argument("--profile", action="store_true", help="run the first drain of each backlog under cProfile")
    p.add_argument("--results-dir", type=Path, default=BENCH_DIR / "results")
    p.add_argument("--light-load-only", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.parts = [x for x in args.parts.split(",") if x]
    args.sizes = [x for x in args.sizes.split(",") if x]
    args.small_count = args.small_count or (100_000 if args.quick else 1_000_000)
    args.large_count = args.large_count or (1_024 if args.quick else 10_240)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.light_load_only:
        return light_load_main(args.light_load_only, args.light_rate)
    started = dt.datetime.now().astimezone()
    load_before = uptime()
    _progress(f"before: {load_before}")
    payload: dict = {"kind": "drain", "started": started.isoformat(timespec="seconds"),
                     "argv": sys.argv, "uptime_before": load_before,
                     "host": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}}
    payload["commit"] = source_state()
    with tempfile.TemporaryDirectory(prefix="petrel-bench-drain-") as tmp:
        root = Path(tmp)
        if "migration" in args.parts:
            payload["migration"] = []
            if "small" in args.sizes:
                payload["migration"].append(measure_migration("small", args.small_count, 1024, args.runs, args, root))
            if "large" in args.sizes:
                payload["migration"].append(measure_migration("large", args.large_count, 100 * 1024, args.runs, args,
                                                              root))
        if "scale" in args.parts:
            payload["scale"] = measure_scale(args, root)
    load_after = uptime()
    _progress(f"after: {load_after}")
    payload["uptime_after"] = load_after
    sections = [f"### Drain / scale-down, {started:%Y-%m-%d %H:%M %Z}", "",
                f"Host: {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}; "
                f"commit {payload['commit']}. Load before: `{load_before}`; after: `{load_after}`.", ""]
    if "migration" in payload:
        sections += [f"#### `petrel drain` of a killed broker's directory into a live broker serving "
                     f"{args.light_rate:,.0f} persistent msg/s of its own (medians of {args.runs}; filled once, "
                     f"`cp -a` of the directory per run, a fresh target per run)", "",
                     migration_table(payload["migration"]), ""]
    if "scale" in payload:
        sections += ["#### `petrel cluster scale --size 1` from 3 nodes", "", scale_table(payload["scale"]), ""]
    text = "\n".join(sections)
    payload["markdown"] = text
    outp = args.results_dir / f"drain-{started:%Y%m%d-%H%M%S}.json"
    outp.parent.mkdir(parents=True, exist_ok=True)
    outp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(text)
    print(f"results: {outp}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
