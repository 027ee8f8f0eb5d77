"""AMQP 1.0 S1 (non-persistent, pre-settled) and S2 (persistent, at-least-once) on Petrel and on
RabbitMQ 3.10's AMQP 1.0 plugin (Debian's `rabbitmq-server`), in one run, as ratios of medians.

    .venv/bin/python bench/amqp.py [--runs 5] [--s1 50000] [--s2 20000] [--size 1024]
                                   [--brokers petrel,rabbitmq] [--generator proton|raw]

ActiveMQ 5.17's AMQP transport cannot run here: Debian's `activemq` has no activemq-amqp jar and
Debian has no proton-j, which it needs (`activemq` in --brokers says so and is skipped).

The brokers: Petrel with `petrel run` (BrokerProcess, its `amqp_port`, security off); RabbitMQ as
stompbench starts it (bench/stompbench/brokers/rabbitmq.py: the package's server in the
foreground, everything in a temp dir, defaults) with `rabbitmq_amqp1_0` enabled beside
`rabbitmq_stomp` and `listeners.tcp.default` on a free port (the plugin shares the AMQP port).
Addresses: `queue://bench.<row>.<run>` on Petrel, `/queue/bench-<row>-<run>` on RabbitMQ (the
plugin declares the queue).

The load generator is the same for both: python-qpid-proton's reactor (the C engine does the
framing), one consumer process and one producer process (spawned), each one connection and one
link. The producer encodes the message once and streams the same bytes as each delivery (no
per-message Message object); the consumer reads the delivery's bytes without decoding them,
with a credit window of 1,000 (proton's prefetch).
- S1: SIZE-byte body, `durable` false, both links at-most-once (sender settles), COUNT messages
  as fast as credit allows.
- S2: `durable` true, both links at-least-once: the producer keeps up to 1,000 unsettled and
  counts `accepted` dispositions, the consumer accepts and settles each delivery.
`--generator raw` puts bench/amqp_raw.py's clients in the same two processes instead: raw
sockets, Petrel's codec for the handshake, transfer frames from a template, transfers counted
undecoded, a credit top-up at half the window and (at-least-once) one accepting disposition per
read covering its range; a few µs of CPU per message where proton's handlers take about 50.
msgs/s = COUNT / (the producer's first send to the consumer's last receive). Each run also reads
the broker process's CPU time per message, each generator process's CPU share (CPU time /
wall time: near 100 % means the generator, not the broker, was the limit) and the broker's
run-queue wait (the time its threads were runnable but had no CPU, summed over the threads, as a
share of the run: other load; over 100 % when several threads waited at once, as RabbitMQ's do). Runs are interleaved
(the first broker alternates). Results: bench/results/amqp-<time>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import subprocess
import tempfile
import time
from pathlib import Path

import benchstats as bs
from stompbench import procstat
from stompbench.brokers.rabbitmq import RabbitMQ
from stompbench.brokers.base import free_port

WINDOW = 1000
SUBJECT = "petrel"
BROKERS = ("petrel", "rabbitmq", "activemq")
WORKLOADS = (("S1", False), ("S2", True))


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def consume(url: str, address: str, durable: bool, count: int, ready, result) -> None:
    from proton import Delivery
    from proton.handlers import MessagingHandler
    from proton.reactor import AtLeastOnce, AtMostOnce, Container

    class Consumer(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=WINDOW, auto_accept=False, auto_settle=False)
            self.got = 0
            self.last = 0.0
            self.first = 0.0

        def on_start(self, event) -> None:
            conn = event.container.connect(url, sasl_enabled=True, allowed_mechs="ANONYMOUS")
            event.container.create_receiver(conn, address, options=AtLeastOnce() if durable else AtMostOnce())

        def on_link_opened(self, event) -> None:
            if event.receiver:
                ready.set()

        def on_delivery(self, event) -> None:  # the bytes, not decoded: the generator's cost stays small
            dlv = event.delivery
            if dlv.partial:
                return
            dlv.link.recv(dlv.pending)
            dlv.link.advance()
            if durable:
                dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            self.got += 1
            if self.got == 1:
                self.first = time.perf_counter()
            if self.got >= count:
                self.last = time.perf_counter()
                event.connection.close()

    c = Consumer()
    w0, cpu0 = time.perf_counter(), _cpu()
    try:
        Container(c).run()
    except Exception as exc:  # noqa: BLE001 - reported as an incomplete run
        print(f"consumer: {exc!r}", flush=True)
    cpu = _cpu() - cpu0
    result.put((c.got, c.last, cpu / max(1e-9, time.perf_counter() - w0), cpu))


def produce(url: str, address: str, durable: bool, count: int, size: int) -> tuple[float, int, float, float]:
    """(time of the first send, messages sent (S1) or accepted (S2), CPU share, CPU seconds)."""
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import AtLeastOnce, AtMostOnce, Container

    data = Message(body=b"x" * size, durable=durable).encode()

    class Producer(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(auto_settle=True)
            self.sent = self.confirmed = 0
            self.t0 = 0.0

        def on_start(self, event) -> None:
            conn = event.container.connect(url, sasl_enabled=True, allowed_mechs="ANONYMOUS")
            event.container.create_sender(conn, address, options=AtLeastOnce() if durable else AtMostOnce())

        def on_sendable(self, event) -> None:
            link = event.sender
            if not self.t0:
                self.t0 = time.perf_counter()
            while link.credit > 0 and self.sent < count and (not durable or self.sent - self.confirmed < WINDOW):
                dlv = link.delivery(str(self.sent).encode())
                link.stream(data)
                link.advance()
                if not durable:
                    dlv.settle()
                self.sent += 1
            if not durable and self.sent >= count:
                self.confirmed = self.sent
                event.connection.close()

        def on_accepted(self, event) -> None:
            self.confirmed += 1
            if self.confirmed >= count:
                event.connection.close()
            elif self.sent < count:
                self.on_sendable(event)

        def on_rejected(self, event) -> None:
            event.connection.close()

    p = Producer()
    w0, cpu0 = time.perf_counter(), _cpu()
    Container(p).run()
    cpu = _cpu() - cpu0
    return p.t0, p.confirmed, cpu / max(1e-9, time.perf_counter() - w0), cpu


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def consume_raw_main(url: str, address: str, durable: bool, count: int, ready, result) -> None:
    from amqp_raw import consume_raw

    w0, cpu0 = time.perf_counter(), _cpu()
    got, last = 0, 0.0
    try:
        got, last = consume_raw(_port(url), address, durable, count, ready)
    except Exception as exc:  # noqa: BLE001 - reported as an incomplete run
        print(f"consumer: {exc!r}", flush=True)
    cpu = _cpu() - cpu0
    result.put((got, last, cpu / max(1e-9, time.perf_counter() - w0), cpu))


def produce_raw(url: str, address: str, durable: bool, count: int, size: int) -> tuple[float, int, float, float]:
    from amqp_raw import produce_raw as produce_

    w0, cpu0 = time.perf_counter(), _cpu()
    t0, confirmed = produce_(_port(url), address, durable, count, size)
    cpu = _cpu() - cpu0
    return t0, confirmed, cpu / max(1e-9, time.perf_counter() - w0), cpu


GENERATORS = {"proton": (consume, produce), "raw": (consume_raw_main, produce_raw)}


def _producer_main(url, address, durable, count, size, result, generator="proton") -> None:
    try:
        result.put(GENERATORS[generator][1](url, address, durable, count, size))
    except Exception as exc:  # noqa: BLE001
        print(f"producer: {exc!r}", flush=True)
        result.put((0.0, 0, 0.0, 0.0))


def one_run(url: str, address: str, durable: bool, count: int, size: int, pid: int = 0,
            generator: str = "proton") -> dict:
    """One measurement: msgs/s, broker CPU µs/msg, the generator processes' CPU shares."""
    ctx = mp.get_context("spawn")
    ready, cres, pres = ctx.Event(), ctx.Queue(), ctx.Queue()
    consumer = ctx.Process(target=GENERATORS[generator][0], args=(url, address, durable, count, ready, cres))
    consumer.start()
    out: dict = {"rate": None, "cpu_us_per_msg": None, "producer_cpu": None, "consumer_cpu": None,
                 "generator_us_per_msg": None}
    if not ready.wait(60):
        consumer.kill()
        out["error"] = "consumer not attached"
        return out
    cpu0 = procstat.cpu_seconds(pid) if pid else None
    wait0, wall0 = (procstat.run_queue_wait_ns(pid) if pid else 0), time.perf_counter()
    producer = ctx.Process(target=_producer_main, args=(url, address, durable, count, size, pres, generator))
    producer.start()
    deadline = 120 + count / 500
    try:
        t0, confirmed, out["producer_cpu"], pcpu = pres.get(timeout=deadline)
        got, t1, out["consumer_cpu"], ccpu = cres.get(timeout=deadline)
    except Exception:  # noqa: BLE001 - queue.Empty: late
        out["error"] = "late"
        return out
    finally:
        for proc in (producer, consumer):
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    if got != count or confirmed != count:
        out["error"] = f"incomplete: received {got}, confirmed {confirmed} of {count}"
        return out
    out["rate"] = count / (t1 - t0)
    out["generator_us_per_msg"] = max(pcpu, ccpu) * 1e6 / count  # the busier generator process
    if cpu0 is not None:
        out["cpu_us_per_msg"] = (procstat.cpu_seconds(pid) - cpu0) * 1e6 / count
        # the share of the run the broker's threads were runnable but had no CPU (a loaded machine)
        out["broker_runq_wait"] = (procstat.run_queue_wait_ns(pid) - wait0) / 1e9 / (time.perf_counter() - wall0)
    return out


class RabbitAmqp(RabbitMQ):
    """stompbench's RabbitMQ with the AMQP 1.0 plugin and an AMQP listener on ``amqp_port``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.amqp_port = free_port(host)

    def check(self) -> None:
        super().check()
        plugin_dirs = list(Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*/plugins"))
        if not any(any(d.glob("rabbitmq_amqp1_0-*")) for d in plugin_dirs):
            from stompbench.brokers.base import BrokerUnavailable

            raise BrokerUnavailable("the rabbitmq_amqp1_0 plugin is missing")

    def environment(self, workdir: Path) -> dict[str, str]:
        env = super().environment(workdir)
        (workdir / "enabled_plugins").write_text("[rabbitmq_stomp,rabbitmq_amqp1_0].\n")
        with open(workdir / "rabbitmq.conf", "a") as f:
            f.write(f"listeners.tcp.default = {self.host}:{self.amqp_port}\n")
        return env


def summary(figures: dict[tuple[str, str], list[dict]], brokers: list[str]) -> list[dict]:
    """figures[(workload, broker)] = one dict per run -> per workload: medians, Petrel / better peer."""
    rows = []
    for workload, _ in WORKLOADS:
        runs = {b: figures.get((workload, b), []) for b in brokers}
        rates = {b: [r.get("rate") for r in runs[b]] for b in brokers}
        med = {b: bs.median(rates[b]) for b in brokers}
        peer, peer_med = bs.best_peer(med, SUBJECT)
        ratio = bs.ratio(med.get(SUBJECT), peer_med)
        rows.append({
            "workload": workload, "median": med, "runs": rates, "best_peer": peer, "ratio": ratio,
            "paired": bs.paired_ratio(rates.get(SUBJECT, []), rates[peer]) if peer else None,
            "cpu_us_per_msg": {b: bs.median(r.get("cpu_us_per_msg") for r in runs[b]) for b in brokers},
            "generator_us_per_msg": {b: bs.median(r.get("generator_us_per_msg") for r in runs[b])
                                     for b in brokers},
            "broker_runq_wait": {b: bs.median(r.get("broker_runq_wait") for r in runs[b]) for b in brokers},
            "generator_cpu": {b: max((bs.median(r.get(k) for r in runs[b]) or 0.0)
                                     for k in ("producer_cpu", "consumer_cpu")) for b in brokers},
            "goal_met": None if ratio is None else ratio >= 1.0,
        })
    return rows


def table(rows: list[dict], brokers: list[str]) -> str:
    lines = ["| row | " + " | ".join(f"{b} msgs/s" for b in brokers)
             + " | Petrel / better peer (median per-run ratio) | "
             + " | ".join(f"{b} CPU µs/msg" for b in brokers)
             + " | busiest generator process CPU % (CPU µs/msg) | goal |",
             "|" + "---|" * (2 * len(brokers) + 4)]
    for r in rows:
        goal = "–" if r["goal_met"] is None else ("met" if r["goal_met"] else "NOT met")
        gen = " / ".join(f"{r['generator_cpu'][b] * 100:.0f} ({bs.fmt(r['generator_us_per_msg'][b], 1)})"
                         for b in brokers)
        lines.append(f"| {r['workload']} | " + " | ".join(bs.fmt(r["median"][b]) for b in brokers)
                     + f" | {bs.fmt(r['ratio'], 2)} ({bs.fmt(r['paired'], 2)}) | "
                     + " | ".join(bs.fmt(r["cpu_us_per_msg"][b], 1) for b in brokers) + f" | {gen} | {goal} |")
    return "\n".join(lines)


def main() -> None:
    from petrel.testing.process import BrokerProcess

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--s1", type=int, default=50_000)
    parser.add_argument("--s2", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=10_000, help="S1 messages per broker first, not counted")
    parser.add_argument("--brokers", default="petrel,rabbitmq")
    parser.add_argument("--generator", choices=sorted(GENERATORS), default="proton",
                        help="proton's reactor, or raw sockets on Petrel's codec (bench/amqp_raw.py)")
    args = parser.parse_args()
    names = [b for b in args.brokers.split(",") if b in BROKERS]
    if "activemq" in names:
        print("activemq: skipped, Debian's package has no AMQP transport (no activemq-amqp jar, no proton-j)")
        names.remove("activemq")
    started = dt.datetime.now(dt.timezone.utc)
    load_before = bs.loadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                            capture_output=True, text=True).stdout.strip()  # at the start: others commit meanwhile
    counts = {"S1": args.s1, "S2": args.s2}
    brokers: list[tuple[str, str, int, str]] = []  # (name, url, measured pid, address pattern)
    stops = []
    figures: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if "petrel" in names:
                port = free_port()
                petrel = BrokerProcess(Path(tmp) / "petrel", settings=f"amqp_port = {port}\n").start()
                stops.append(petrel.kill9)
                brokers.append(("petrel", f"amqp://127.0.0.1:{port}", petrel.proc.pid, "queue://bench.{w}.{r}"))
            if "rabbitmq" in names:
                rabbit = RabbitAmqp()
                rabbit.check()
                rabbit.start()
                stops.append(rabbit.stop)
                brokers.append(("rabbitmq", f"amqp://127.0.0.1:{rabbit.amqp_port}", rabbit.pid,
                                "/queue/bench-{w}-{r}"))
            for name, url, pid, pattern in brokers if args.warmup else ():
                w = one_run(url, pattern.format(w="warmup", r=0), False, args.warmup, args.size, pid, args.generator)
                print(f"warm-up {name}: {bs.fmt(w.get('rate'))} msgs/s {w.get('error') or ''}", flush=True)
            for run in range(args.runs):
                order = brokers if run % 2 == 0 else brokers[::-1]
                for workload, durable in WORKLOADS:
                    for name, url, pid, pattern in order:
                        m = one_run(url, pattern.format(w=workload.lower(), r=run), durable,
                                    counts[workload], args.size, pid, args.generator)
                        m["loadavg"] = bs.loadavg()
                        figures.setdefault((workload, name), []).append(m)
                        print(f"run {run + 1} {workload} {name}: {bs.fmt(m['rate'])} msgs/s, "
                              f"{bs.fmt(m['cpu_us_per_msg'], 1)} µs/msg, generator CPU "
                              f"{(m['producer_cpu'] or 0) * 100:.0f} % / {(m['consumer_cpu'] or 0) * 100:.0f} %, "
                              f"{bs.fmt(m['generator_us_per_msg'], 1)} µs/msg, broker run-queue wait "
                              f"{(m.get('broker_runq_wait') or 0) * 100:.0f} % of the run"
                              f" (load {m['loadavg']}) {m.get('error') or ''}", flush=True)
        finally:
            for stop in reversed(stops):
                stop()
    shown = [b for b, _, _, _ in brokers]
    rows = summary(figures, shown)
    load_after = bs.loadavg()
    print(f"\n{started:%Y-%m-%d %H:%M} UTC, commit {commit}, medians of {args.runs} runs, S1 {args.s1:,} "
          f"pre-settled non-durable, S2 {args.s2:,} durable at-least-once, {args.size}-byte bodies, "
          f"1 producer -> 1 consumer ({args.generator}); load average before {load_before}, after {load_after}\n")
    print(table(rows, shown))
    out = Path(__file__).parent / "results" / f"amqp-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"started": started.isoformat(), "commit": commit, "args": vars(args),
                               "load_before": load_before, "load_after": load_after, "summary": rows,
                               "figures": {"/".join(k): v for k, v in figures.items()}}, indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
