"""STOMP and CORE S1/S2 on two trees of Petrel, interleaved: did the server-session seam cost more
than 5 %?

    D=$(mktemp -d) && git worktree add $D/before 03c2017 && git worktree add $D/head HEAD
    .venv/bin/python bench/seam_regress.py --before $D/before --after $D/head [--runs 5]

(private directories: a fixed name under /tmp may be another engineer's, and was replaced once
in the middle of a run)

Each run invokes, for each variant in turn (the order alternates between runs), stompbench
(`--brokers petrel --workloads S1,S2 --runs 1`, its counts and warm-up) and bench/core_rows.py
(`--workloads S1,S2 --runs 1`), with PYTHONPATH putting that tree's `src` first: the broker
(`petrel run` of this venv's console script) and the CORE client come from that tree, the load
generators from this checkout's bench/. "head" is this checkout's src, or --after's (a worktree of a commit: nothing uncommitted). The figure per (suite, row,
variant) is the median of the runs' msgs/s and broker CPU µs/msg; the ratio is head / before
(>= 0.95 means no regression beyond 5 % of msgs/s), with the median of the per-run ratios beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import benchstats as bs

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SUITES = ("stomp", "core")
ROWS = ("S1", "S2")
LIMIT = 0.95


def command(suite: str, results: Path) -> list[str]:
    if suite == "stomp":
        return [sys.executable, "-m", "stompbench", "--brokers", "petrel", "--workloads", "S1,S2",
                "--runs", "1", "--no-self-test", "--check-procs", "0", "--no-readme",
                "--results-dir", str(results)]
    return [sys.executable, str(BENCH / "core_rows.py"), "--workloads", "S1,S2", "--runs", "1",
            "--no-run-peers", "--results-dir", str(results)]


def measure(suite: str, src: Path) -> dict[str, dict]:
    """One invocation: {row: {"rate", "cpu_us_per_msg", "loadavg_1m"}} of the broker "petrel"."""
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{BENCH}")
    with tempfile.TemporaryDirectory(prefix="seam-") as tmp:
        proc = subprocess.run(command(suite, Path(tmp)), env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=900)
        files = sorted(Path(tmp).glob("*.json"))
        if not files:
            print(proc.stderr[-2000:], file=sys.stderr)
            return {}
        payload = json.loads(files[-1].read_text())
    return {m["row"]: {k: m.get(k) for k in ("rate", "cpu_us_per_msg", "loadavg_1m", "error")}
            for m in payload["measurements"]
            if m.get("broker") == "petrel" and m.get("procs", 1) == 1 and m.get("row") in ROWS}


def summary(figures: dict[tuple[str, str, str], list[dict]]) -> list[dict]:
    """figures[(suite, row, variant)] = one dict per run (None fields when that run failed)."""
    out = []
    for suite in SUITES:
        for row in ROWS:
            head = figures.get((suite, row, "head"), [])
            before = figures.get((suite, row, "before"), [])
            if not head and not before:
                continue
            r = {k: [None if m.get("error") else m.get(k) for m in runs]
                 for k, runs in (("head", head), ("before", before))}
            c = {k: [None if m.get("error") else m.get("cpu_us_per_msg") for m in runs]
                 for k, runs in (("head", head), ("before", before))}
            hr = [None if m.get("error") else m.get("rate") for m in head]
            br = [None if m.get("error") else m.get("rate") for m in before]
            ratio = bs.ratio(bs.median(hr), bs.median(br))
            out.append({
                "suite": suite, "row": row,
                "head": bs.median(hr), "before": bs.median(br), "ratio": ratio,
                "paired": bs.paired_ratio(hr, br),
                "cpu_head": bs.median(c["head"]), "cpu_before": bs.median(c["before"]),
                "cpu_ratio": bs.ratio(bs.median(c["head"]), bs.median(c["before"])),
                "runs_head": r["head"], "runs_before": r["before"],
                "within_5pct": None if ratio is None else ratio >= LIMIT,
            })
    return out


def table(rows: list[dict]) -> str:
    lines = ["| suite | row | msgs/s head | msgs/s before | head / before | median of per-run ratios "
             "| CPU µs/msg head | before | head / before | within 5 % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "–" if r["within_5pct"] is None else ("yes" if r["within_5pct"] else "NO")
        lines.append(f"| {r['suite'].upper()} | {r['row']} | {bs.fmt(r['head'])} | {bs.fmt(r['before'])} "
                     f"| {bs.fmt(r['ratio'], 3)} | {bs.fmt(r['paired'], 3)} | {bs.fmt(r['cpu_head'], 1)} "
                     f"| {bs.fmt(r['cpu_before'], 1)} | {bs.fmt(r['cpu_ratio'], 3)} | {verdict} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="a worktree of the commit before the seam")
    p.add_argument("--after", type=Path, default=ROOT,
                   help="the tree measured as head (default this checkout, with whatever is uncommitted in it)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--suites", default=",".join(SUITES))
    args = p.parse_args()
    variants = [("head", args.after.resolve() / "src"), ("before", args.before.resolve() / "src")]
    suites = [s for s in args.suites.split(",") if s in SUITES]
    started = dt.datetime.now(dt.timezone.utc)
    load_before = bs.loadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.after, capture_output=True,
                            text=True).stdout.strip()
    before_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.before,
                                   capture_output=True, text=True).stdout.strip()
    figures: dict[tuple[str, str, str], list[dict]] = {}
    for run in range(args.runs):
        order = variants if run % 2 == 0 else variants[::-1]
        for suite in suites:
            for name, src in order:
                got = measure(suite, src)
                for row in ROWS:
                    m = got.get(row) or {"error": "no result"}
                    figures.setdefault((suite, row, name), []).append(m)
                    print(f"run {run + 1} {suite} {row} {name}: {bs.fmt(m.get('rate'))} msgs/s, "
                          f"{bs.fmt(m.get('cpu_us_per_msg'), 1)} µs/msg, load {m.get('loadavg_1m')}"
                          f"{' ' + m['error'] if m.get('error') else ''}", flush=True)
    rows = summary(figures)
    text = table(rows)
    load_after = bs.loadavg()
    print(f"\n{started:%Y-%m-%d %H:%M} UTC, head {commit}, before {before_commit}, medians of {args.runs} "
          f"runs; load average before {load_before}, after {load_after}\n")
    print(text)
    out = BENCH / "results" / f"seam-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"started": started.isoformat(), "head": commit, "before": before_commit,
                               "load_before": load_before, "load_after": load_after, "summary": rows,
                               "figures": {"/".join(k): v for k, v in figures.items()}}, indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
