"""JMS S1 (non-persistent) and S2 (persistent) through OpenWire, one producer -> one consumer on
a queue, 1 KiB messages, with ActiveMQ's own JMS client, on Petrel and ActiveMQ 5.17 (Debian's
package) in one run, as ratios of medians.

    .venv/bin/python bench/jms.py [--runs 5] [--s1 100000] [--s2 5000] [--size 1024]
                                  [--brokers petrel,activemq,activemq-storesync] [--warmup 20000]

bench/java/JmsBench.java is compiled here with `javac` against the jars the OpenWire tests use
(Debian's libactivemq-java and libgeronimo-jms-1.1-spec-java: tests/system/jms.py). Each broker
is started here on free ports: Petrel with `petrel run` (BrokerProcess: OpenWire on its
all-protocols port), ActiveMQ as stompbench starts it (bench/stompbench/brokers/activemq.py: the
package's JVM and memory options, KahaDB defaults) with an OpenWire `tcp://` transport connector.
Each run, for each broker in turn (the order alternates between runs), one JVM runs a consumer
(its own connection, auto-acknowledge, a listener, the client's default prefetch of 1,000) and a
producer (its own connection) sending COUNT BytesMessages; the figure is COUNT / the time from
the first send to the last message received. S1's sends are non-persistent (the client sends
them without waiting: no producer window), S2's persistent (each send waits for the broker's
response: Petrel's once the message is on disk; ActiveMQ's, with KahaDB's defaults, once it is on
disk or once its consumer has acknowledged it, whichever comes first (concurrentStoreAndDispatch:
a message acknowledged before KahaDB writes it is never written). "activemq-storesync" is
ActiveMQ with concurrentStoreAndDispatchQueues off, every persistent send on disk before its
response, as on Petrel. The goal's peer is ActiveMQ as it ships.

Before run 1 each broker gets --warmup S1 messages, not counted. Besides msgs/s, each run reads
the broker process's CPU time (utime + stime of /proc/<pid>/stat around the JVM's run, its
connection set-up included) per message, and at the end its peak RSS (VmHWM) over the whole
session. Goals (issue 15): Petrel at least ActiveMQ's msgs/s on S2, and its peak RSS at most a
quarter of ActiveMQ's. Results: bench/results/jms-<time>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import subprocess
import tempfile
from pathlib import Path

from petrel.testing.process import BrokerProcess, free_port, wait_for

import benchstats as bs
from stompbench import procstat
from stompbench.brokers.activemq import ActiveMQ

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("openwire_jms", HERE.parent / "tests" / "system" / "jms.py")
_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tests)  # the OpenWire tests' jar list (tests/system/jms.py: not this module's name)
JARS, JAVA_DIR = _tests.JARS, _tests.JAVA_DIR

BROKERS = ("petrel", "activemq", "activemq-storesync")
PEERS = BROKERS[1:]


class ActiveMQStoreSync(ActiveMQ):
    """ActiveMQ with KahaDB's concurrentStoreAndDispatchQueues off: by default a persistent
    message that its consumer acknowledges before KahaDB has written it is never written (its
    store task is cancelled, and the send is answered all the same); with it off, every persistent
    send is on disk before its response, as on Petrel."""

    def command(self, workdir: Path) -> list[str]:
        cmd = super().command(workdir)
        xml = workdir / "conf" / "activemq.xml"
        xml.write_text(xml.read_text().replace("<kahaDB ", '<kahaDB concurrentStoreAndDispatchQueues="false" '))
        return cmd
WORKLOADS = (("S1", False), ("S2", True))


def compile_bench(out: Path) -> str:
    """javac bench/java/JmsBench.java into `out`; the class path to run it with."""
    missing = [jar for jar in JARS if not (JAVA_DIR / jar).exists()]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)} in {JAVA_DIR}: apt-get install libactivemq-java "
                         "libgeronimo-jms-1.1-spec-java")
    classpath = ":".join([str(out), *(str(JAVA_DIR / jar) for jar in JARS)])
    subprocess.run(["javac", "-d", str(out), "-cp", classpath, str(HERE / "java" / "JmsBench.java")],
                   check=True, timeout=300)
    return classpath


def one_run(classpath: str, port: int, queue: str, count: int, size: int, persistent: bool,
            pid: int) -> tuple[float | None, float | None]:
    """(msgs/s, broker CPU µs per message) of one run; (None, None) when it did not complete."""
    cpu0 = procstat.cpu_seconds(pid)
    proc = subprocess.run(["java", "-cp", classpath, "JmsBench", f"tcp://127.0.0.1:{port}", queue, str(count),
                           str(size), str(persistent).lower()], capture_output=True, text=True,
                          timeout=300 + count / 100)
    cpu = procstat.cpu_seconds(pid) - cpu0
    result = [line.split() for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not result:
        print(f"  incomplete: {proc.stdout[-300:]} {proc.stderr[-500:]}", flush=True)
        return None, None
    return count / float(result[0][2]), cpu * 1e6 / count


def summary(figures: dict[tuple[str, str], list[tuple[float | None, float | None]]], names: list[str],
            rss: dict[str, float]) -> list[dict]:
    """One row per workload: medians per broker, Petrel / ActiveMQ (of the medians, and the median
    of the per-run ratios), CPU per message, and the goal where there is one."""
    rows = []
    for workload, _ in WORKLOADS:
        rates = {b: [r for r, _ in figures.get((workload, b), [])] for b in names}
        med = {b: bs.median(rates[b]) for b in names}
        ratio = bs.ratio(med.get("petrel"), med.get("activemq"))
        rows.append({
            "workload": workload, "median": med, "runs": rates, "ratio": ratio,
            "ratios": {p: bs.ratio(med.get("petrel"), med.get(p)) for p in PEERS if p in names},
            "paired": {p: bs.paired_ratio(rates.get("petrel", []), rates[p]) for p in PEERS if p in names},
            "cpu_us_per_msg": {b: bs.median(c for _, c in figures.get((workload, b), [])) for b in names},
            "goal_met": None if workload != "S2" or ratio is None else ratio >= 1.0,
        })
    rows.append({"workload": "peak RSS MiB", "rss_mib": rss,
                 "ratio": bs.ratio(rss.get("petrel"), rss.get("activemq")),
                 "ratios": {p: bs.ratio(rss.get("petrel"), rss.get(p)) for p in PEERS if p in names},
                 "goal_met": None if "petrel" not in rss or "activemq" not in rss
                 else rss["petrel"] <= rss["activemq"] / 4})
    return rows


def table(rows: list[dict], names: list[str]) -> str:
    peers = [p for p in PEERS if p in names]
    head = ("| row | " + " | ".join(f"{b} msgs/s" for b in names) + " | "
            + " | ".join(f"Petrel / {p} (per-run)" for p in peers) + " | "
            + " | ".join(f"{b} CPU µs/msg" for b in names) + " | goal |")
    lines = [head, "|" + "---|" * (2 * len(names) + len(peers) + 2)]
    for r in rows:
        goal = "–" if r["goal_met"] is None else ("met" if r["goal_met"] else "NOT met")
        if "rss_mib" in r:
            lines.append(f"| {r['workload']} | " + " | ".join(bs.fmt(r["rss_mib"].get(b), 1) for b in names) + " | "
                         + " | ".join(bs.fmt(r["ratios"][p], 2) for p in peers) + " | "
                         + " | ".join("" for _ in names) + f" | {goal} |")
            continue
        lines.append(f"| {r['workload']} | " + " | ".join(bs.fmt(r["median"][b]) for b in names) + " | "
                     + " | ".join(f"{bs.fmt(r['ratios'][p], 2)} ({bs.fmt(r['paired'][p], 2)})" for p in peers)
                     + " | " + " | ".join(bs.fmt(r["cpu_us_per_msg"][b], 1) for b in names) + f" | {goal} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--s1", type=int, default=100_000)
    parser.add_argument("--s2", type=int, default=5_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--warmup", type=int, default=20_000, help="S1 messages per broker first, not counted")
    args = parser.parse_args()
    wanted = [b for b in args.brokers.split(",") if b in BROKERS]
    started = dt.datetime.now(dt.timezone.utc)
    load_before = bs.loadavg()
    commit = bs.head_commit()
    counts = {"S1": args.s1, "S2": args.s2}
    with tempfile.TemporaryDirectory() as tmp:
        classpath = compile_bench(Path(tmp) / "classes")
        brokers: list[tuple[str, int, int]] = []  # (name, OpenWire port, measured pid)
        stops = []
        rss: dict[str, float] = {}
        try:
            if "petrel" in wanted:
                petrel = BrokerProcess(Path(tmp) / "petrel").start()
                stops.append(petrel.kill9)
                brokers.append(("petrel", petrel.port, petrel.proc.pid))
            for name, cls in (("activemq", ActiveMQ), ("activemq-storesync", ActiveMQStoreSync)):
                if name in wanted:
                    port = free_port()
                    broker = cls(transports={"tcp": port})
                    broker.check()
                    broker.start()
                    stops.append(broker.stop)
                    wait_for(lambda: bs.accepts(port), 60, message=f"{name}'s OpenWire port did not open")
                    brokers.append((name, port, broker.pid))
            figures: dict[tuple[str, str], list[tuple[float | None, float | None]]] = {}
            for name, port, pid in brokers if args.warmup else ():  # JIT compilers and caches warm
                one_run(classpath, port, "bench.warmup", args.warmup, args.size, False, pid)
            for run in range(args.runs):
                shift = run % len(brokers)
                for workload, persistent in WORKLOADS:
                    for name, port, pid in brokers[shift:] + brokers[:shift]:  # each broker first in turn
                        rate, cpu = one_run(classpath, port, f"bench.{workload}.{run}", counts[workload], args.size,
                                            persistent, pid)
                        figures.setdefault((workload, name), []).append((rate, cpu))
                        print(f"run {run + 1} {workload} {name}: "
                              f"{'incomplete' if rate is None else f'{rate:,.0f} msgs/s, {cpu:.1f} µs/msg'}"
                              f" (load {bs.loadavg()})", flush=True)
            rss = {name: procstat.peak_rss_mib(pid) for name, _, pid in brokers}
        finally:
            for stop in reversed(stops):
                stop()
    names = [b for b, _, _ in brokers]
    rows = summary(figures, names, rss)
    load_after = bs.loadavg()
    print(f"\n{started:%Y-%m-%d %H:%M} UTC, commit {commit}, medians of {args.runs} runs, S1 {args.s1:,} "
          f"non-persistent, S2 {args.s2:,} persistent, {args.size}-byte BytesMessages, ActiveMQ's JMS client, "
          f"1 producer -> 1 consumer on a queue; load average before {load_before}, after {load_after}\n")
    print(table(rows, names))
    out = bs.save_results("jms", started, {"started": started.isoformat(), "commit": commit, "args": vars(args),
                                          "load_before": load_before, "load_after": load_after, "summary": rows})
    print(f"results: {out}")


if __name__ == "__main__":
    main()
