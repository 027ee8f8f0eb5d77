"""Cluster benchmark: a 3-node symmetric cluster (ON_DEMAND) beside one node, persistent 1 KiB.

Two layouts, each a set of real ``petrel run`` processes (``BrokerProcess``: free loopback
ports, a data dir in a temp dir, the journal's default sync), started fresh for every run:

- ``single``: one broker; P producer processes and 3 consumer processes all on it;
- ``cluster``: three brokers with a static symmetric cluster connection (``max_hops`` 1,
  ``message_load_balancing`` ON_DEMAND, everything else at its default); the same P producers
  on node 1, one consumer process on each node.

Clients are ``bench/core_clients.py``'s CORE producer and consumer, one connection per
process, on queue ``bench.cluster``; every message carries a ``bench-id`` so each phase ends
with an accounting check (every confirmed message consumed exactly once, nothing left in a
queue or a store-and-forward backlog). Each layout runs a non-persistent warm-up, then
``paced`` (``--rate`` msg/s for ``--seconds``: latency) and ``max`` (``--count`` unpaced:
throughput). Broker CPU is ``utime + stime`` of all broker processes from the clients' release
to the last message consumed, per message. bench/README.md ("Cluster") defines every column.

    .venv/bin/python bench/cluster.py                  # 3 runs (~3 min)
    .venv/bin/python bench/cluster.py --quick --runs 1 # smoke (~1 min)
    .venv/bin/python bench/cluster.py --runs 3 --count 60000 --seconds 20 --producers 3

Results: bench/results/cluster-<timestamp>.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import multiprocessing as mp
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from array import array
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from stompbench import procstat  # noqa: E402
from stompbench.frames import body_of  # noqa: E402
from stompbench.metrics import percentile  # noqa: E402
from stompbench.workloads import ConsumerSpec, ProducerSpec  # noqa: E402
from stompbench.report import figure as _fmt  # noqa: E402
from core_clients import CONNECT_TIMEOUT, CoreConsumer, CoreProducer, now_ns, worker_main  # noqa: E402

from petrel.testing.process import BrokerProcess, wait_for  # noqa: E402

log = logging.getLogger("cluster_bench")

QUEUE = "bench.cluster"
DESTINATION = f"queue:{QUEUE}"
ID = "bench-id"
WINDOW_MESSAGES = 1_000  # unconfirmed persistent sends per producer, as stompbench's S2
BARRIER_TIMEOUT = CONNECT_TIMEOUT + 60  # workers wait for the parent, which waits for the cluster
CLUSTER_PASSWORD = "bench-cluster-secret"


@dataclass(frozen=True)
class Layout:
    name: str
    nodes: int
    consumer_nodes: tuple[int, ...]  # the node (0-based) of each consumer process


LAYOUTS = (Layout("single", 1, (0, 0, 0)), Layout("cluster", 3, (0, 1, 2)))


@dataclass(frozen=True)
class Variant:
    name: str
    count: int  # messages, all producers together
    rate: float = 0.0  # msgs/s, all producers together; 0 = unpaced
    persistent: bool = True


# -- the brokers -----------------------------------------------------------------------------------


def cluster_settings(node: BrokerProcess, others: list[BrokerProcess]) -> str:
    """A static symmetric cluster connection to ``others``; Artemis defaults for the rest."""
    statics = ", ".join(f'"tcp://127.0.0.1:{o.port}"' for o in others)
    return (f'cluster_user = "bench"\ncluster_password = "{CLUSTER_PASSWORD}"\n[[cluster_connections]]\n'
            f'name = "bench"\nconnector = "tcp://127.0.0.1:{node.port}"\nstatic_connectors = [{statics}]\n'
            'message_load_balancing = "ON_DEMAND"\nmax_hops = 1\n')


def _get(node: BrokerProcess, path: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}{path}", timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


class Brokers:
    """The broker processes of one layout, in ``root``; ``stop`` always ends them."""

    def __init__(self, layout: Layout, root: Path) -> None:
        self.layout = layout
        self.nodes = [BrokerProcess(root / f"node{i + 1}", name=f"node{i + 1}", http=True)
                      for i in range(layout.nodes)]
        if layout.nodes > 1:
            for node in self.nodes:
                with open(node.config_path, "a") as f:
                    f.write(cluster_settings(node, [o for o in self.nodes if o is not node]))

    def start(self) -> None:
        for node in self.nodes:
            node.start(wait=False)
        for node in self.nodes:
            node.wait_ready()
        if len(self.nodes) > 1:
            want = len(self.nodes) - 1
            wait_for(lambda: all(sum(b["connected"] for b in self.view(n)["bridges"]) >= want for n in self.nodes),
                     60, 0.05, "cluster bridges not connected within 60 s")

    def stop(self) -> None:
        for node in self.nodes:
            try:
                node.stop()
            except Exception as exc:  # keep stopping the others
                log.error("stopping %s: %s", node.workdir, exc)

    def url(self, index: int) -> str:
        return f"tcp://127.0.0.1:{self.nodes[index].port}"

    def cpu(self) -> list[float]:
        return [procstat.cpu_seconds(n.proc.pid) for n in self.nodes]

    def view(self, node: BrokerProcess) -> dict:
        return _get(node, "/api/v1/cluster") or {}

    def forwarded(self) -> int:
        return self.view(self.nodes[0]).get("messages_forwarded", 0) if len(self.nodes) > 1 else 0

    def remote_consumers(self) -> list[int]:
        """Node 1's view of the other nodes' ``bench.cluster`` consumers."""
        return [b["consumer_count"] for b in self.view(self.nodes[0]).get("remote_bindings", [])
                if b["name"] == QUEUE]

    def wait_remote_consumers(self, timeout: float = 60) -> None:
        want = len(self.nodes) - 1
        wait_for(lambda: sum(c >= 1 for c in self.remote_consumers()) >= want, timeout, 0.02,
                 f"node 1 did not see consumers on the other nodes within {timeout}s")

    def leftovers(self) -> dict:
        """Messages still in a queue or a store-and-forward backlog, and node 1's remote consumers."""
        counts = [(_get(n, f"/api/v1/queues/{QUEUE}") or {}).get("message_count", 0) for n in self.nodes]
        backlog = sum(b["backlog"] for n in self.nodes for b in self.view(n).get("bridges", [])) \
            if len(self.nodes) > 1 else 0
        return {"queued": counts, "backlog": backlog, "remote_consumers": sum(self.remote_consumers())}

    def settle(self, timeout: float = 20) -> dict:
        """Wait until nothing is queued, forwarded or still consuming; the last reading either way."""
        end = time.monotonic() + timeout
        while True:
            last = self.leftovers()
            if not (any(last["queued"]) or last["backlog"] or last["remote_consumers"]) or time.monotonic() > end:
                return last
            time.sleep(0.05)


# -- the clients -----------------------------------------------------------------------------------


class _Stamping:
    """An AsyncProducer whose sends carry consecutive ``bench-id`` values."""

    def __init__(self, producer, first_id: int) -> None:
        self._producer, self._next = producer, first_id

    def send(self, message):
        message.properties[ID] = self._next
        self._next += 1
        return self._producer.send(message)


class IdProducer(CoreProducer):
    def __init__(self, spec: ProducerSpec, body: bytes, window_bytes: int, first_id: int) -> None:
        super().__init__(spec, body, window_bytes)
        self.first_id = first_id

    async def connect(self, url: str) -> None:
        await super().connect(url)
        self.producer = _Stamping(self.producer, self.first_id)


class IdConsumer(CoreConsumer):
    """Records every ``bench-id``, publishes its count in ``counter[slot]`` and ends when the
    parent sets ``stop`` (it alone knows when the consumers together have everything)."""

    def __init__(self, spec: ConsumerSpec, counter, slot: int, stop) -> None:
        super().__init__(spec, latency=True)
        self.ids = array("q")
        self._counter, self._slot, self._stop = counter, slot, stop

    def _on_message(self, message) -> None:
        self.ids.append(message.properties.get(ID, -1))
        super()._on_message(message)
        self._counter[self._slot] = self.result.received

    async def run(self, deadline_ns: int):
        watcher = asyncio.ensure_future(self._watch())
        try:
            return await super().run(deadline_ns)
        finally:
            watcher.cancel()

    async def _watch(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(0.005)
        if not self._done.done():
            self._done.set_result(None)


def first_id(tag: int, producer: int) -> int:
    return (tag << 40) | (producer << 32)


async def _run_client(role, spec, url, size, slot, tag, counter, stop, barrier, timeout_s):
    if role == "producer":
        window = WINDOW_MESSAGES * size if spec.persistent else 1024 * 1024
        client = IdProducer(spec, body_of(size), window, first_id(tag, slot))
    else:
        client = IdConsumer(spec, counter, slot, stop)
    try:
        try:
            await client.connect(url)
            if role == "consumer":
                await client.subscribe()
        except BaseException:
            barrier.abort()
            raise
        await asyncio.get_running_loop().run_in_executor(None, barrier.wait, BARRIER_TIMEOUT)
        result = await client.run(now_ns() + int(timeout_s * 1e9))
    finally:
        await client.close()
    return result, (client.ids.tobytes() if role == "consumer" else b"")


def _worker(index, role, spec, url, size, slot, tag, counter, stop, barrier, results, timeout_s) -> None:
    async def run():
        result, ids = await _run_client(role, spec, url, size, slot, tag, counter, stop, barrier, timeout_s)
        return index, result, ids, None

    worker_main(run, barrier, results, lambda why: (index, None, b"", f"{role} {slot} on {url}: {why}"))


# -- one phase -------------------------------------------------------------------------------------


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _collect(results, reports: dict, end: float, more) -> None:
    """The workers' reports into ``reports``, while ``more()`` and before ``end`` (monotonic)."""
    while more() and time.monotonic() < end:
        try:
            index, result, ids, error = results.get(timeout=0.01)
        except queue.Empty:
            continue
        reports[index] = (result, ids, error)


def run_phase(brokers: Brokers, variant: Variant, producers: int, size: int, tag: int) -> dict:
    """Run ``variant`` on ``brokers``: consumers per the layout, producers on node 1; the figures."""
    layout = brokers.layout
    per_rate = variant.rate / producers if variant.rate else 0.0
    window = WINDOW_MESSAGES if variant.persistent else 0
    clients = [("consumer", ConsumerSpec(DESTINATION, variant.count), brokers.url(node), slot)
               for slot, node in enumerate(layout.consumer_nodes)]
    clients += [("producer", ProducerSpec(DESTINATION, n, persistent=variant.persistent, window=window,
                                          rate=per_rate), brokers.url(0), i)
                for i, n in enumerate(_shares(variant.count, producers))]
    timeout_s = 60.0 + variant.count / 500.0 + (variant.count / variant.rate if variant.rate else 0.0)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(clients) + 1)
    results = ctx.Queue()
    counter = ctx.Array("q", len(layout.consumer_nodes), lock=False)
    stop = ctx.Event()
    workers = [ctx.Process(target=_worker, daemon=True, name=f"cluster-bench-{role}-{slot}",
                           args=(i, role, spec, url, size, slot, tag, counter, stop, barrier, results, timeout_s))
               for i, (role, spec, url, slot) in enumerate(clients)]
    errors: list[str] = []
    reports: dict[int, tuple] = {}
    cpu0 = cpu1 = None
    fwd0 = 0
    producer_indexes = [i for i, c in enumerate(clients) if c[0] == "producer"]

    def consuming() -> bool:
        """Until the consumers together have every message (every confirmed one, if a producer failed)."""
        target = variant.count
        if all(i in reports for i in producer_indexes):
            target = min(target, sum(reports[i][0].receipts if reports[i][0] else 0 for i in producer_indexes))
        return sum(counter) < target and len(reports) < len(clients)

    for w in workers:
        w.start()
    try:
        try:
            if layout.nodes > 1:
                brokers.wait_remote_consumers()
            fwd0 = brokers.forwarded()  # before the release: the producers start at once
            barrier.wait(BARRIER_TIMEOUT)
        except (TimeoutError, threading.BrokenBarrierError) as exc:
            barrier.abort()
            errors.append(f"clients not ready: {exc or 'barrier broken'}")
        else:
            cpu0 = brokers.cpu()
            _collect(results, reports, time.monotonic() + timeout_s, consuming)
            cpu1 = brokers.cpu()
            if sum(counter) < variant.count:
                errors.append(f"consumed {sum(counter)}/{variant.count} before the deadline")
        stop.set()
        _collect(results, reports, time.monotonic() + CONNECT_TIMEOUT + 15, lambda: len(reports) < len(clients))
        if len(reports) < len(clients):
            errors.append(f"{len(clients) - len(reports)} client(s) did not report in time")
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                log.warning("terminating %s", w.name)
                w.terminate()
                w.join(timeout=5)
    errors += [e for _, _, e in reports.values() if e]
    errors += [f"{r.role} {r.destination}: {r.error}" for r, _, _ in reports.values() if r is not None and r.error]
    leftovers = brokers.settle()
    fwd1 = brokers.forwarded() if cpu0 is not None else fwd0  # after settling: every confirmation counted
    return figures(layout, variant, clients, reports, errors, tag, cpu0, cpu1, fwd1 - fwd0, leftovers)


def figures(layout, variant, clients, reports, errors, tag, cpu0, cpu1, forwarded, leftovers) -> dict:
    results = {i: r for i, (r, _, _) in reports.items() if r is not None}
    consumers = [(i, c) for i, c in enumerate(clients) if c[0] == "consumer"]
    producers = [results[i] for i, c in enumerate(clients) if c[0] == "producer" and i in results]
    split = [results[i].received if i in results else None for i, _ in consumers]
    received = sum(s or 0 for s in split)
    starts = [r.first_send_ns for r in producers if r.first_send_ns]
    ends = [results[i].last_recv_ns for i, _ in consumers if i in results and results[i].last_recv_ns]
    rate = received / ((max(ends) - min(starts)) / 1e9) if starts and ends and max(ends) > min(starts) else None
    lat, ids = array("q"), array("q")  # latencies; every bench-id the consumers got
    for i, _ in consumers:
        if i in results:
            lat.frombytes(results[i].latencies)
            ids.frombytes(reports[i][1])
    ordered = sorted(lat)
    cpu = [b - a for a, b in zip(cpu0, cpu1)] if cpu0 and cpu1 else None
    # accounting: the ids every producer had confirmed against the ids the consumers got
    current = [x for x in ids if x >> 40 == tag]
    expected = {first_id(tag, slot) + k for i, (role, _, _, slot) in enumerate(clients)
                if role == "producer" and i in results for k in range(results[i].receipts)}
    unique = set(current)
    accounting = {
        "confirmed": len(expected), "received": len(ids), "unique": len(unique),
        "duplicates": len(current) - len(unique), "missing": len(expected - unique),
        "unconfirmed_received": len(unique - expected), "stale": len(ids) - len(current),
        **leftovers,
    }
    accounting["exactly_once"] = bool(expected) and not any(
        [accounting["missing"], accounting["duplicates"], accounting["stale"], *leftovers["queued"], leftovers["backlog"]])
    return {
        "layout": layout.name, "variant": variant.name, "messages": received, "expected": variant.count,
        "rate": rate,
        "p50_ms": percentile(ordered, 0.50) / 1e6 if ordered else None,
        "p99_ms": percentile(ordered, 0.99) / 1e6 if ordered else None,
        "cpu_s": cpu, "cpu_us_per_msg": sum(cpu) / received * 1e6 if cpu and received else None,
        "split": split, "split_nodes": list(layout.consumer_nodes), "forwarded": forwarded,
        "accounting": accounting, "errors": errors, "ok": not errors and accounting["exactly_once"],
    }


# -- runs and report -------------------------------------------------------------------------------


def run_layout(layout: Layout, variants: list[Variant], warm: Variant | None, args, run: int, tags) -> list[dict]:
    """Fresh brokers in a temp dir, the warm-up, every variant; the brokers always stopped."""
    out = []
    with tempfile.TemporaryDirectory(prefix=f"petrel-bench-{layout.name}-") as root:
        brokers = Brokers(layout, Path(root))
        try:
            brokers.start()
            if warm is not None:
                w = run_phase(brokers, warm, args.producers, args.size, next(tags))
                if not w["ok"]:
                    raise RuntimeError(f"warm-up failed: {w['errors']} {w['accounting']}")
            for variant in variants:
                f = run_phase(brokers, variant, args.producers, args.size, next(tags))
                f["run"] = run
                out.append(f)
                print(f"[run {run}] {describe(f)}", file=sys.stderr, flush=True)
        except (RuntimeError, TimeoutError) as exc:
            print(f"[run {run}] {layout.name}: FAILED {exc}", file=sys.stderr, flush=True)
            out.append({"layout": layout.name, "variant": "*", "run": run, "ok": False, "errors": [str(exc)]})
        finally:
            brokers.stop()
    return out




def describe(f: dict) -> str:
    a = f["accounting"]
    once = "exactly once" if a["exactly_once"] else f"ACCOUNTING {a}"
    err = f" ERRORS {f['errors']}" if f["errors"] else ""
    return (f"{f['layout']:7} {f['variant']:5} {_fmt(f['rate'])} msgs/s p50 {_fmt(f['p50_ms'], 2)} ms "
            f"p99 {_fmt(f['p99_ms'], 2)} ms broker {_fmt(f['cpu_us_per_msg'])} us/msg split {f['split']} "
            f"forwarded {f['forwarded']} {once}{err}")


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summary(measured: list[dict]) -> dict:
    """(variant, layout) -> medians over the good runs of each figure."""
    out = {}
    for f in measured:
        out.setdefault((f["variant"], f["layout"]), []).append(f)
    table = {}
    for key, fs in out.items():
        good = [f for f in fs if f.get("ok")]
        cpu = [f["cpu_s"] for f in good if f.get("cpu_s")]
        table[key] = {
            "runs": len(fs), "ok": len(good),
            **{k: _median(f[k] for f in good) for k in ("rate", "p50_ms", "p99_ms", "cpu_us_per_msg",
                                                         "messages", "forwarded")},
            "node_cpu_s": [_median(c[i] for c in cpu) for i in range(len(cpu[0]))] if cpu else [],
            "split": [_median(f["split"][i] for f in good) for i in range(len(good[0]["split"]))] if good else [],
            "split_nodes": good[0]["split_nodes"] if good else [],
            "exactly_once": f"{sum(f['accounting']['exactly_once'] for f in fs if 'accounting' in f)}/{len(fs)}",
        }
    return table


def markdown(table: dict, variants: list[Variant]) -> str:
    head = ["variant", "layout", "msgs/s", "p50 ms", "p99 ms", "broker CPU µs/msg (all nodes)",
            "per-node split (messages per consumer)", "exactly once (runs)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in variants:
        for layout in LAYOUTS:
            c = table.get((v.name, layout.name))
            if c is None:
                continue
            split = " · ".join(f"n{n + 1} {_fmt(s)}" for n, s in zip(c["split_nodes"], c["split"]))
            rate = _fmt(c["rate"]) + ("" if c["ok"] == c["runs"] else f" ({c['ok']}/{c['runs']} runs)")
            lines.append("| " + " | ".join([v.name, layout.name, rate, _fmt(c["p50_ms"], 2), _fmt(c["p99_ms"], 2),
                                            _fmt(c["cpu_us_per_msg"]), split, c["exactly_once"]]) + " |")
    lines += ["", "| variant | msgs/s cluster / single | p50 cluster / single | p99 cluster / single "
              "| CPU µs/msg cluster / single | forwarding overhead µs/msg (cluster - single) "
              "| node 1 µs/msg | node 1 µs per forwarded msg (raw) | node 1 extra µs per forwarded msg "
              "| nodes 2+3 µs per received msg |", "|" + "---|" * 10]
    for v in variants:
        s, c = table.get((v.name, "single")), table.get((v.name, "cluster"))
        if not s or not c:
            continue

        def ratio(k: str) -> str:
            return f"{c[k] / s[k]:.2f}×" if c[k] is not None and s[k] else "–"

        overhead = (c["cpu_us_per_msg"] - s["cpu_us_per_msg"]
                    if c["cpu_us_per_msg"] is not None and s["cpu_us_per_msg"] is not None else None)
        n1 = raw = extra = peers = None
        if c["node_cpu_s"] and c["messages"]:
            n1 = c["node_cpu_s"][0] / c["messages"] * 1e6
            fwd = c["forwarded"]
            if fwd:
                raw = c["node_cpu_s"][0] / fwd * 1e6
                if s["cpu_us_per_msg"] is not None:
                    extra = (c["node_cpu_s"][0] * 1e6 - s["cpu_us_per_msg"] * c["messages"]) / fwd
                peers = sum(c["node_cpu_s"][1:]) / fwd * 1e6
        lines.append("| " + " | ".join([v.name, ratio("rate"), ratio("p50_ms"), ratio("p99_ms"),
                                        ratio("cpu_us_per_msg"), _fmt(overhead), _fmt(n1), _fmt(raw),
                                        _fmt(extra), _fmt(peers)]) + " |")
    return "\n".join(lines)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average {os.getloadavg()}"


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller counts: --count 10000 --seconds 4 --warmup 1000")
    p.add_argument("--runs", type=int, default=3, help="runs of each layout; medians (default 3)")
    p.add_argument("--count", type=int, help="messages of the unpaced variant (default 50,000)")
    p.add_argument("--rate", type=int, default=2_000, help="msg/s of the paced variant, all producers (2,000)")
    p.add_argument("--seconds", type=float, help="duration of the paced variant (default 15)")
    p.add_argument("--producers", type=int, default=2, help="producer processes, all on node 1 (default 2)")
    p.add_argument("--warmup", type=int, help="non-persistent warm-up messages per layout (default 2,000)")
    p.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    p.add_argument("--results-dir", type=Path, default=BENCH_DIR / "results")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    args.count = args.count or (10_000 if args.quick else 50_000)
    args.seconds = args.seconds or (4.0 if args.quick else 15.0)
    args.warmup = args.warmup if args.warmup is not None else (1_000 if args.quick else 2_000)
    if min(args.runs, args.count, args.rate, args.producers, args.size) < 1:
        p.error("--runs, --count, --rate, --producers and --size must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    variants = [Variant("paced", int(args.rate * args.seconds), rate=float(args.rate)), Variant("max", args.count)]
    warm = Variant("warmup", args.warmup, persistent=False) if args.warmup else None
    started = dt.datetime.now().astimezone()
    load_before = uptime()
    print(f"before: {load_before}", file=sys.stderr, flush=True)
    tags = iter(range(1, 1 << 20))
    measured: list[dict] = []
    interrupted = False
    try:
        for run in range(1, args.runs + 1):
            for layout in LAYOUTS:
                measured += run_layout(layout, variants, warm, args, run, tags)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: brokers stopped, reporting what was measured", file=sys.stderr)
    load_after = uptime()
    print(f"after: {load_after}", file=sys.stderr, flush=True)
    table = summary([f for f in measured if f.get("variant") != "*"])
    text = "\n".join([
        f"### Cluster: 3 nodes ON_DEMAND vs 1 node, {started:%Y-%m-%d %H:%M %Z}",
        "",
        f"Host: {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}. "
        f"Medians of {args.runs} run(s); {args.producers} producer process(es) on node 1, 3 consumer processes "
        f"(single: all on node 1; cluster: one per node); persistent {args.size}-byte bodies on `{QUEUE}`; "
        f"paced: {args.rate:,} msg/s for {args.seconds:g} s ({variants[0].count:,} messages); "
        f"max: {args.count:,} messages unpaced; warm-up {args.warmup:,} non-persistent.",
        f"Load before: `{load_before}`; after: `{load_after}`.",
        "",
        markdown(table, variants),
    ])
    payload = {
        "kind": "cluster", "started": started.isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        "args": {k: str(v) for k, v in vars(args).items()}, "uptime_before": load_before,
        "uptime_after": load_after, "measurements": measured,
        "summary": {f"{v}/{layout}": c for (v, layout), c in table.items()},
        "markdown": text, "interrupted": interrupted,
    }
    out = args.results_dir / f"cluster-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(text)
    print(f"results: {out}", file=sys.stderr)
    failed = any(not f.get("ok") for f in measured)
    return 130 if interrupted else (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
