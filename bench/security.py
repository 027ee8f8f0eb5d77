"""The cost of security (issue 13): S1 and S2 on Petrel with security off, on, and on over TLS.

Three variants of the same broker, each a fresh ``petrel run`` process
(``petrel.testing.process.BrokerProcess``, empty data directory) per measurement:

- ``off``: ``PETREL_SECURITY_ENABLED=false`` (what stompbench's ``petrel`` measures); clients
  send no credentials;
- ``auth``: security on (``security_enabled = true``): a users file with the user ``bench``
  (role ``bench``), ``[security_settings."bench.#"]`` granting ``bench`` send, consume,
  createAddress and createDurableQueue; every client logs in with ``login``/``passcode``, every
  SEND and SUBSCRIBE is checked;
- ``tls``: ``auth`` plus ``ssl_enabled = true`` (a server certificate from a CA made at run time
  with ``petrel.testing.certs`` in a temp dir): the STOMP port speaks TLS only and the load
  generator connects with TLS, verifying the certificate against that CA.

The rows are stompbench's S1 (1 -> 1, one queue, 1 KiB, non-persistent) and S2 (the same,
persistent, a receipt per SEND, <= 1,000 unconfirmed), driven by its pipelined STOMP 1.2
generator, after a non-persistent warm-up on the same connection settings. Runs are
interleaved (run 1: S1 off, auth, tls, S2 off, auth, tls; then run 2 ...) so that the noise of a
shared machine hits the variants alike; ``--rotate`` starts run k with the k-th variant (off,
auth, tls; auth, tls, off; ...), so that no variant always runs first. Reported: medians of msgs/s
and broker CPU µs/msg, the ratios auth/off and tls/off (tls includes auth), and the issue's goals: authorization
costs under 5 % (auth/off >= 0.95), TLS under 30 % on S1 (tls/off >= 0.70).

    .venv/bin/python bench/security.py              # S1 200,000, S2 50,000, 3 runs (~4 min)
    .venv/bin/python bench/security.py --quick      # S1 20,000, S2 5,000, 3 runs (~1.5 min)
    .venv/bin/python bench/security.py --runs 5 --count s1=500000

Results: bench/results/security-<timestamp>.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from petrel.testing.certs import make_pki  # noqa: E402
from petrel.testing.process import OWN_SECURITY, BrokerProcess  # noqa: E402
from petrel.security.users import UserStore  # noqa: E402
from stompbench.brokers import BrokerFailed  # noqa: E402
from stompbench.dialect import PETREL, Dialect  # noqa: E402
from stompbench.harness import Plan, describe, measure_workload  # noqa: E402
from stompbench.metrics import Measurement  # noqa: E402
from stompbench.report import figure, source_state, write_json  # noqa: E402
from stompbench.workloads import Counts, build, warmup  # noqa: E402

VARIANTS = ("off", "auth", "tls")
ROWS = ("S1", "S2")
USER, PASSWORD, ROLE = "bench", "bench-password", "bench"
GRANTS = ("send", "consume", "createAddress", "createDurableQueue")
AUTH_GOAL = 0.95  # auth/off: authorization costs under 5 %
TLS_GOAL = 0.70  # tls/off on S1: TLS under 30 %

LOGGED_IN = Dialect(
    connect_headers=(("host", "localhost"), ("login", USER), ("passcode", PASSWORD)),
    subscribe_headers=PETREL.subscribe_headers,
)


def settings(variant: str, workdir: Path, pki) -> tuple[str, dict]:
    """``broker.toml`` lines (after BrokerProcess's own) and the environment of ``variant``."""
    if variant == "off":
        return "", {"PETREL_SECURITY_ENABLED": "false"}
    users = UserStore(workdir / "users.toml")
    users.add(USER, PASSWORD, [ROLE])
    users.save()
    top = "security_enabled = true\n"
    if variant == "tls":
        top += f'ssl_enabled = true\nssl_cert = "{pki.server.cert}"\nssl_key = "{pki.server.key}"\n'
    grants = "".join(f'{permission} = ["{ROLE}"]\n' for permission in GRANTS)
    return (f'{top}\n[security]\nusers_file = "{workdir / "users.toml"}"\n\n'
            f'[security_settings."bench.#"]\n{grants}'), dict(OWN_SECURITY)


class Variant:
    """One variant as stompbench's harness drives a broker: ``start`` a fresh ``petrel run``
    (BrokerProcess) in a directory of its own, ``stop`` it and remove the directory."""

    host = "127.0.0.1"

    def __init__(self, name: str, scratch: Path, pki) -> None:
        self.name = name
        self.scratch = scratch
        self.pki = pki
        self.dialect = PETREL if name == "off" else LOGGED_IN
        if name == "tls":
            self.dialect = Dialect(connect_headers=LOGGED_IN.connect_headers,
                                   subscribe_headers=LOGGED_IN.subscribe_headers, tls_ca=str(pki.ca.cert))
        self.port = 0
        self.pid = 0
        self.process: BrokerProcess | None = None
        self.workdir: Path | None = None

    def start(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=self.scratch))
        lines, env = settings(self.name, self.workdir, self.pki)
        self.process = BrokerProcess(self.workdir, settings=lines, env=env, name=f"bench-{self.name}")
        try:
            self.process.start()
        except (RuntimeError, TimeoutError) as exc:
            self.stop()
            raise BrokerFailed(str(exc)[-500:]) from exc
        self.port, self.pid = self.process.stomp_port, self.process.proc.pid

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        self.pid = 0


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def busiest() -> list[str]:
    """The five busiest processes (``ps``'s CPU share over their lifetime): who else shares the host."""
    out = subprocess.run(["ps", "-eo", "pcpu,etime,comm", "--sort=-pcpu"], capture_output=True, text=True,
                         timeout=10).stdout.splitlines()
    return [" ".join(line.split()) for line in out[1:6]]


def median_of(ms: list[Measurement], variant: str, row: str, metric: str) -> float | None:
    values = [getattr(m, metric) for m in ms if m.broker == variant and m.row == row and m.ok
              and getattr(m, metric) is not None]
    return statistics.median(values) if values else None


def paired(ms: list[Measurement], row: str) -> dict[str, float | None]:
    """auth/off and tls/off msgs/s within each run, the median over the runs: the machine's drift
    from run to run (which moves all three variants) cancels out."""
    rate = {(m.broker, m.run): m.rate for m in ms if m.row == row and m.ok}
    out = {}
    for v in ("auth", "tls"):
        ratios = [rate[v, run] / off for (name, run), off in rate.items() if name == "off" and (v, run) in rate]
        out[v] = statistics.median(ratios) if ratios else None
    return out


def summary(ms: list[Measurement]) -> dict:
    """row -> medians per variant and metric, the ratios and the goals."""
    out = {}
    for row in ROWS:
        med = {v: {k: median_of(ms, v, row, k) for k in ("rate", "cpu_us_per_msg", "p50_ms", "generator_cpu_pct")}
               for v in VARIANTS}
        off = med["off"]["rate"]
        ratios = {v: (med[v]["rate"] / off if off and med[v]["rate"] else None) for v in ("auth", "tls")}
        goals = {"auth": None if ratios["auth"] is None else ratios["auth"] >= AUTH_GOAL}
        if row == "S1":
            goals["tls"] = None if ratios["tls"] is None else ratios["tls"] >= TLS_GOAL
        runs = {v: [m.rate for m in ms if m.broker == v and m.row == row] for v in VARIANTS}
        out[row] = {"median": med, "ratio": ratios, "goal_met": goals, "runs": runs, "paired": paired(ms, row)}
    return out


def _ratio(r: float | None) -> str:
    return "–" if r is None else f"{r:.3f}"


def _goal(met: bool | None, text: str) -> str:
    return "–" if met is None else f"{text}: {'met' if met else 'NOT met'}"


def table(s: dict) -> str:
    head = ("| row | metric (median of runs) | off | auth | tls (auth + TLS) | auth / off | tls / off | goal |\n"
            "|---|---|---|---|---|---|---|---|\n")
    lines = []
    for row in ROWS:
        med, ratio, goals = s[row]["median"], s[row]["ratio"], s[row]["goal_met"]
        goal = _goal(goals["auth"], "auth >= 0.95")
        if "tls" in goals:
            goal += "; " + _goal(goals["tls"], "tls >= 0.70")
        lines.append(f"| {row} | msgs/s | " + " | ".join(figure(med[v]["rate"]) for v in VARIANTS)
                     + f" | {_ratio(ratio['auth'])} | {_ratio(ratio['tls'])} | {goal} |")
        lines.append(f"| {row} | msgs/s, median of the per-run ratios | – | – | – | "
                     f"{_ratio(s[row]['paired']['auth'])} | {_ratio(s[row]['paired']['tls'])} | – |")
        cpu = [med[v]["cpu_us_per_msg"] for v in VARIANTS]
        cpu_ratios = [c / cpu[0] if c and cpu[0] else None for c in cpu[1:]]
        lines.append(f"| {row} | broker CPU µs/msg | " + " | ".join(figure(c) for c in cpu)
                     + " | " + " | ".join(_ratio(r) for r in cpu_ratios) + " | – |")
        gen = " / ".join("–" if (g := med[v]["generator_cpu_pct"]) is None else f"{g:.0f}" for v in VARIANTS)
        lines.append(f"| {row} | msgs/s per run (off / auth / tls) | "
                     + " | ".join(", ".join(figure(r) for r in s[row]["runs"][v]) for v in VARIANTS)
                     + f" | – | – | generator CPU % {gen} |")
    return head + "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="S1 20,000, S2 5,000, warm-up 3,000 (still 3 runs)")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs of every variant (default 3)")
    parser.add_argument("--procs", type=int, default=1, help="generator processes (default 1)")
    parser.add_argument("--count", action="append", default=[], metavar="NAME=N",
                        help="s1=, s2=, warmup=, window= (stompbench's counts)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    parser.add_argument("--rotate", action="store_true", help="run k starts with the k-th variant")
    args = parser.parse_args()
    counts = (Counts.quick() if args.quick else Counts()).with_overrides(args.count)
    workloads = [build(counts)[row] for row in ROWS]
    plan = Plan(brokers=[], workloads=workloads, runs=args.runs, procs=args.procs, body_size=args.size,
                warmup=warmup(counts))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the broker in the finally below

    started = dt.datetime.now(dt.timezone.utc)
    env = {"started": started.isoformat(timespec="seconds"), "commit": source_state(), "argv": sys.argv,
           "host": f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
           "loadavg_before": loadavg(), "busiest_before": busiest()}
    print(f"{env['started']} commit {env['commit']}\nload average before: {env['loadavg_before']} "
          f"({os.cpu_count()} cores, shared: other agents' tests may be running)", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="petrel-bench-security-"))
    measurements: list[Measurement] = []
    try:
        pki = make_pki(scratch / "pki")
        variants = [Variant(name, scratch, pki) for name in VARIANTS]
        for run in range(1, args.runs + 1):
            for workload in workloads:
                shift = (run - 1) % len(variants) if args.rotate else 0
                for variant in variants[shift:] + variants[:shift]:
                    for m in measure_workload(variant, workload, run, plan, args.procs):
                        measurements.append(m)
                        print(f"[run {run}/{args.runs}] {describe(m)} load {m.loadavg_1m}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    env["loadavg_after"], env["busiest_after"] = loadavg(), busiest()
    s = summary(measurements)
    loads = [m.loadavg_1m for m in measurements if m.loadavg_1m is not None]
    text = (f"### Security cost, {started:%Y-%m-%d %H:%M} UTC\n\n"
            f"`{' '.join(['.venv/bin/python', 'bench/security.py', *sys.argv[1:]])}`: S1 {counts.s1:,}, "
            f"S2 {counts.s2:,} ({counts.window:,} in flight), warm-up {counts.warmup:,}, {args.size}-byte bodies, "
            f"{args.procs} generator process(es), medians of {args.runs} interleaved runs"
            f"{' (rotated order)' if args.rotate else ''}, a fresh broker each; "
            f"commit {env['commit']}.\nHost: {env['host']}, shared with other agents' test runs. Load average "
            f"before {env['loadavg_before']}, after {env['loadavg_after']}; 1-min load at the end of each "
            f"measurement: median {statistics.median(loads) if loads else float('nan'):.1f}, "
            f"max {max(loads, default=float('nan')):.1f}.\n\n" + table(s))
    failed = [describe(m) for m in measurements if not m.ok]
    if failed:
        text += "\n\nFailed measurements:\n" + "\n".join(f"- {line}" for line in failed)
    print("\n" + text, flush=True)
    path = BENCH_DIR / "results" / f"security-{started:%Y%m%d-%H%M%S}.json"
    write_json(path, {"env": env, "counts": dataclasses.asdict(counts), "runs": args.runs, "procs": args.procs,
                      "size": args.size, "summary": s, "measurements": [m.as_dict() for m in measurements],
                      "table": text})
    print(f"\n{path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
