"""``python -m stompbench``: run the comparison and write the table.

Sections, in order: the generator self-test against the in-memory sink (with N
and 2N generator processes), the comparison (every workload on every broker,
``--runs`` times, medians), and the generator check (the unpaced rows again
with 2N processes: if the best figure rises, the generator was the limit).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import platform
import signal
import sys
from pathlib import Path

from .brokers import PEERS, REGISTRY, SUBJECT, BrokerUnavailable, SinkBroker
from .brokers.activemq import ActiveMQ, _dpkg_version
from .harness import Plan, run_plan
from .metrics import Measurement
from .report import comparison_table, procs_table, selftest_table, update_readme, write_json
from .workloads import UNPACED, Counts, Workload, build, generator_checks, warmup

BENCH_DIR = Path(__file__).resolve().parents[1]
DEFAULT_LABELS = {"petrel": "Petrel", "activemq": "ActiveMQ 5.17", "rabbitmq": "RabbitMQ 3.10"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="stompbench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small counts, 1 run unless --runs")
    p.add_argument("--runs", type=int, help="runs per (workload, broker); medians (default 3)")
    p.add_argument("--procs", type=int, default=1, help="generator processes (default 1)")
    p.add_argument(
        "--check-procs",
        type=int,
        help="re-run S1/S3/S4 with this many generator processes (default 2x --procs; 0: skip)",
    )
    p.add_argument("--brokers", default=",".join((SUBJECT, *PEERS)), help="comma list")
    p.add_argument("--workloads", default="S1,S2,S3,S4,S5,L2", help="comma list")
    p.add_argument("--count", action="append", default=[], metavar="NAME=N",
                   help="override a count: s1 s2 s3 s4 s5 l2_rate l2_seconds warmup window")
    p.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    p.add_argument("--self-test", action="store_true", help="only the generator self-test")
    p.add_argument("--no-self-test", action="store_true", help="skip the generator self-test")
    p.add_argument("--host", default="127.0.0.1", help="loopback address brokers listen on")
    p.add_argument("--results-dir", type=Path, default=BENCH_DIR / "results")
    p.add_argument("--readme", type=Path, default=BENCH_DIR / "README.md")
    p.add_argument("--no-readme", action="store_true", help="do not touch the README")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if args.check_procs is None:
        args.check_procs = 2 * args.procs
    if args.runs < 1 or args.procs < 1 or args.check_procs < 0 or args.size < 1:
        p.error("--runs, --procs and --size must be >= 1, --check-procs >= 0")
    if not args.host.startswith("127."):
        p.error("the bench only runs on loopback (127.0.0.0/8)")
    args.brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    unknown = [b for b in args.brokers if b not in REGISTRY or b == "sink"]
    if unknown:
        p.error(f"unknown broker(s) {unknown}; choose from {SUBJECT}, {', '.join(PEERS)}")
    args.workloads = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    return args


def _host_facts() -> dict:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split(":")[1].split()[0])
            mem = f"{kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def _raise_interrupt(signum, frame):  # SIGTERM unwinds like Ctrl-C: brokers get stopped
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)
    counts = (Counts.quick() if args.quick else Counts()).with_overrides(args.count)
    catalogue = build(counts)
    missing = [w for w in args.workloads if w not in catalogue]
    if missing:
        print(f"unknown workload(s) {missing}; choose from {', '.join(catalogue)}", file=sys.stderr)
        return 2
    workloads = [catalogue[w] for w in args.workloads]
    rows = [p.row for w in workloads for p in w.phases]
    started = dt.datetime.now().astimezone()
    payload: dict = {
        "started": started.isoformat(timespec="seconds"),
        "host": _host_facts(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "counts": vars(counts),
        "workloads": {w.key: w.title for w in workloads},
        "brokers": {},
    }
    measurements: list[Measurement] = []
    sections: list[str] = []
    try:
        if not args.no_self_test:
            sections.append(_self_test(args, counts, workloads, measurements))
        if not args.self_test:
            sections.insert(0, _compare(args, counts, workloads, rows, measurements, payload))
    except KeyboardInterrupt:
        print("interrupted: brokers stopped, writing what was measured", file=sys.stderr)
        payload["interrupted"] = True
    header = _header(args, counts, workloads, payload, started, measurements)
    markdown = "\n\n".join([header, *sections]) + "\n"
    payload["measurements"] = [m.as_dict() for m in measurements]
    payload["markdown"] = markdown
    out = args.results_dir / f"{started.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(out, payload)
    if not args.no_readme and not args.self_test and not payload.get("interrupted"):
        update_readme(args.readme, markdown)
    print(markdown)
    print(f"results: {out}", file=sys.stderr)
    return 130 if payload.get("interrupted") else 0


def _self_test(args, counts: Counts, workloads: list[Workload], measurements: list) -> str:
    sink = SinkBroker(args.host)
    gen = Workload("G", "the generator alone", tuple(generator_checks(counts)))
    # a paced row (L2) says nothing about a ceiling
    unpaced = [w for w in workloads if not any(p.rate for ph in w.phases for p in ph.producers)]
    plan_workloads = [*unpaced, gen]
    double = max(2 * args.procs, args.check_procs or 0)
    procs_list = [args.procs, double]
    print(f"self-test: sink server, {args.procs} and {double} generator processes", file=sys.stderr)
    own = run_plan(
        Plan([sink], plan_workloads, args.runs, args.procs, args.size, None, check_procs=double)
    )
    measurements.extend(own)
    rows = ["G pub", "G sub", *(p.row for w in unpaced for p in w.phases)]
    return "\n\n".join(
        [
            "#### Generator ceiling (self-test against the bench's in-memory sink server)",
            "`G pub`: one producer into a destination the sink discards; `G sub`: one consumer "
            "the sink floods with ready-made MESSAGE frames; the other rows run the workloads "
            "through the sink (which routes but stores nothing on disk). The sink itself is "
            "Python and shares the same 2 cores, so these are lower bounds of the generator's "
            "ceiling.",
            selftest_table(own, rows, procs_list),
        ]
    )


def _compare(args, counts, workloads, rows, measurements, payload) -> str:
    brokers, skipped, labels = [], {}, {}
    for name in args.brokers:
        broker = REGISTRY[name](args.host)
        try:
            broker.check()
        except BrokerUnavailable as exc:
            skipped[name] = str(exc)
            print(f"SKIPPING {name}: {exc}", file=sys.stderr)
            labels[name] = DEFAULT_LABELS[name]
            payload["brokers"][name] = {"status": f"skipped: {exc}"}
            continue
        brokers.append(broker)
        labels[name] = broker.label
        info = {"status": "measured", "label": broker.label, "version": broker.version()}
        if isinstance(broker, ActiveMQ):
            info["java"] = broker.java_version()
            info["java_opts"] = " ".join(broker.java_opts)
        if name == "rabbitmq":
            info["erlang"] = _dpkg_version("erlang-base")
        payload["brokers"][name] = info
    for name in (SUBJECT, *PEERS):
        labels.setdefault(name, DEFAULT_LABELS[name])
        if name not in args.brokers:
            skipped[name] = "not selected (--brokers)"
    plan = Plan(
        brokers,
        workloads,
        args.runs,
        args.procs,
        args.size,
        warmup(counts),
        check_procs=args.check_procs,
        check_keys=UNPACED,
    )
    runs = run_plan(plan)
    measurements.extend(runs)
    main_runs = [m for m in runs if m.procs == args.procs]
    parts = [
        comparison_table(
            main_runs, rows, SUBJECT, list(PEERS), labels, skipped, args.procs
        )
    ]
    for name, reason in skipped.items():
        parts.append(f"{labels[name]} was skipped: {reason}")
    if any(m.procs == args.check_procs for m in runs) and args.check_procs != args.procs:
        parts += [
            "#### Is the load generator the limit?",
            f"The unpaced rows also ran with {args.check_procs} generator processes instead of "
            f"{args.procs}, each right after its {args.procs}-process twin on a fresh broker: "
            "a best figure that does not rise means the brokers, not the generator, set it.",
            procs_table(runs, [r for r in rows if r in UNPACED], args.procs, args.check_procs),
        ]
    return "\n\n".join(parts)


def _header(args, counts: Counts, workloads: list[Workload], payload: dict, started, measurements) -> str:
    host = payload["host"]
    loads = sorted(m.loadavg_1m for m in measurements if m.loadavg_1m is not None)
    load = (
        f" Host load average (1 min) at the end of the phases: median {loads[len(loads) // 2]:.1f}, "
        f"max {loads[-1]:.1f}."
        if loads
        else ""
    )
    lines = [
        f"### Petrel vs peers, {started:%Y-%m-%d %H:%M %Z}",
        "",
        f"Host: {host['cpus']} CPUs ({host['cpu_model']}), {host['memory']}, Linux {host['kernel']}, "
        f"Python {host['python']}. Loopback only. Medians of {args.runs} run(s); "
        f"{args.procs} generator process(es); {args.size}-byte bodies; a fresh broker "
        "(empty data dir) per workload and run, warmed up with "
        f"{counts.warmup:,} non-persistent messages.{load}",
        "",
    ]
    for name, info in payload["brokers"].items():
        detail = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("status", "label"))
        lines.append(f"- {info.get('label', name)}: {info['status']}" + (f" ({detail})" if detail else ""))
    lines.append("")
    for w in workloads:
        lines.append(f"- **{w.key}**: {w.title}")
    return "\n".join(lines)
