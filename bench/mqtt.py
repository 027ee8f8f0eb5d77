"""MQTT S1 (QoS 0, one producer -> one consumer) and S2 (QoS 1 both ways) on Petrel, mosquitto 2.0
and ActiveMQ 5.17's MQTT transport (Debian's packages), in one run, as ratios of medians.

    .venv/bin/python bench/mqtt.py [--runs 5] [--s1 100000] [--s2 20000] [--size 100]
                                   [--brokers petrel,mosquitto,activemq]

Each broker is started here on free ports: Petrel with `petrel run` (BrokerProcess, its MQTT
port), mosquitto with a config of its own (`listener`, anonymous, max_queued_messages 0 so it
queues without dropping, max_inflight_messages 1000 like Petrel's window for 3.1.1), ActiveMQ as
stompbench starts it (bench/stompbench/brokers/activemq.py: the package's JVM and options, KahaDB
defaults) with an `mqtt://` transport connector beside its STOMP one (the jars of Debian's
`libmqtt-client-java` on its class path). Each run,
for each broker in turn (the order alternates between runs): a consumer process subscribes to
a fresh topic (clean session, 3.1.1), then one producer sends COUNT PUBLISHes of SIZE bytes
built before the clock starts (S1: QoS 0 in batches of 1,000; S2: QoS 1 keeping up to 1,000
unacknowledged), and the consumer counts them (S2: PUBACKing each). The figure is COUNT / the
time from the first send to the last message received. Producer and consumer are separate
processes on raw sockets with Petrel's MQTT codec.

Not alike: Petrel answers a QoS 1 PUBLISH after the message is synced to disk; mosquitto keeps
messages in memory (its persistence file is written on its autosave interval); ActiveMQ makes a
QoS 1 PUBLISH a persistent JMS message, but a topic with only a clean-session (non-durable)
subscriber stores nothing, so neither peer syncs per message in S2.

Before run 1, each broker gets a warm-up of --warmup (20,000) QoS 0 messages, not counted.
Besides msgs/s, each run reads the broker process's CPU time (utime + stime of /proc/<pid>/stat
over the run) per message. The ratio is Petrel / the better peer (the higher median), and the
median of the per-run ratios beside it. Results: bench/results/mqtt-<time>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from petrel.codec.mqtt import (
    NEED_DATA,
    Connect,
    MqttConnection,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
)
from petrel.codec.roles import Role
from petrel.testing.process import BrokerProcess, free_port, wait_for

import benchstats as bs
from stompbench import procstat
from stompbench.brokers.activemq import ActiveMQ

BATCH = 1000
WINDOW = 1000


class Client:
    def __init__(self, port: int, client_id: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.codec = MqttConnection(Role.CLIENT)
        self.sock.sendall(self.codec.send(Connect(client_id, 4, keep_alive=0)))
        self.next()

    def next(self, timeout: float = 60.0):
        while (event := self.codec.next_event()) is NEED_DATA:
            self.sock.settimeout(timeout)
            data = self.sock.recv(262144)
            if not data:
                raise ConnectionError("closed by the broker")
            self.codec.receive_data(data)
        return event


def consume(port: int, topic: str, qos: int, count: int, ready, result) -> None:
    c = Client(port, f"bench-sub-{topic}")
    c.sock.sendall(c.codec.send(Subscribe(1, (Subscription(topic, qos),))))
    assert isinstance(c.next(), Suback)
    ready.set()
    got = 0
    acks = []
    try:
        while got < count:
            p = c.next()
            if isinstance(p, Publish):
                got += 1
                if p.qos:
                    acks.append(c.codec.send(Puback(p.packet_id)))
                    if len(acks) >= 64 or c.codec.buffered_bytes == 0:
                        c.sock.sendall(b"".join(acks))
                        acks.clear()
    except (OSError, ConnectionError):
        pass
    result.put((got, time.perf_counter()))


def produce(port: int, topic: str, qos: int, count: int, size: int) -> float:
    c = Client(port, f"bench-pub-{topic}")
    body = b"x" * size
    packets = [c.codec.send(Publish(topic, body, qos, packet_id=(i % 65535) + 1 if qos else None))
               for i in range(min(count, 65535 if qos else BATCH))]
    t0 = time.perf_counter()
    if not qos:
        batch = b"".join(packets)
        for _ in range(count // BATCH):
            c.sock.sendall(batch)
        return t0
    sent = acked = 0
    while acked < count:
        n = min(count - sent, WINDOW - (sent - acked))
        if n > 0:
            c.sock.sendall(b"".join(packets[(sent + i) % len(packets)] for i in range(n)))
            sent += n
        p = c.next()
        if isinstance(p, Puback):
            acked += 1
            while c.codec.buffered_bytes and acked < count:
                if isinstance(c.next(), Puback):
                    acked += 1
    return t0


def one_run(port: int, topic: str, qos: int, count: int, size: int, pid: int = 0) -> tuple[float | None, float | None]:
    """(msgs/s, broker CPU µs per message) of one run; None when it did not complete."""
    ctx = mp.get_context("spawn")
    ready, result = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=consume, args=(port, topic, qos, count, ready, result))
    consumer.start()
    if not ready.wait(60):
        consumer.kill()
        return None, None
    cpu0 = procstat.cpu_seconds(pid) if pid else None
    t0 = produce(port, topic, qos, count, size)
    got, t1 = result.get(timeout=120 + count / 1000)
    cpu = procstat.cpu_seconds(pid) - cpu0 if cpu0 is not None else None
    consumer.join(30)
    if got != count:
        return None, None
    return count / (t1 - t0), (cpu * 1e6 / count if cpu is not None else None)


def start_mosquitto(workdir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    conf = workdir / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n"
                    f"max_inflight_messages {WINDOW}\npersistence false\n")
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: _accepts(port), 20, message="mosquitto did not start")
    return proc, port


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


BROKERS = ("petrel", "mosquitto", "activemq")
SUBJECT = "petrel"
WORKLOADS = (("S1", 0), ("S2", 1))


def summary(figures: dict[tuple[str, str], list[tuple[float | None, float | None]]],
            brokers: list[str]) -> list[dict]:
    """figures[(workload, broker)] = [(msgs/s, CPU µs/msg) per run] -> one row per workload: medians
    per broker, the better peer, Petrel / that peer (of the medians and the median per-run ratio)."""
    rows = []
    for workload, _ in WORKLOADS:
        rates = {b: [r for r, _ in figures.get((workload, b), [])] for b in brokers}
        cpus = {b: [c for _, c in figures.get((workload, b), [])] for b in brokers}
        med = {b: bs.median(rates[b]) for b in brokers}
        peer, peer_med = bs.best_peer(med, SUBJECT)
        ratio = bs.ratio(med.get(SUBJECT), peer_med)
        rows.append({
            "workload": workload, "median": med, "cpu_us_per_msg": {b: bs.median(cpus[b]) for b in brokers},
            "runs": rates, "best_peer": peer, "ratio": ratio,
            "paired": bs.paired_ratio(rates.get(SUBJECT, []), rates[peer]) if peer else None,
            "ratios": {b: bs.ratio(med.get(SUBJECT), med[b]) for b in brokers if b != SUBJECT},
            "goal_met": None if ratio is None else ratio >= 1.0,
        })
    return rows


def table(rows: list[dict], brokers: list[str]) -> str:
    peers = [b for b in brokers if b != SUBJECT]
    head = ("| row | " + " | ".join(f"{b} msgs/s" for b in brokers) + " | "
            + " | ".join(f"Petrel / {b}" for b in peers) + " | Petrel / better peer (per-run) | "
            + " | ".join(f"{b} CPU µs/msg" for b in brokers) + " | goal |")
    lines = [head, "|" + "---|" * (2 * len(brokers) + len(peers) + 3)]
    for r in rows:
        goal = "–" if r["goal_met"] is None else ("met" if r["goal_met"] else "NOT met")
        lines.append(
            f"| {r['workload']} | " + " | ".join(bs.fmt(r["median"][b]) for b in brokers) + " | "
            + " | ".join(bs.fmt(r["ratios"][b], 2) for b in peers)
            + f" | {bs.fmt(r['ratio'], 2)} ({bs.fmt(r['paired'], 2)}) | "
            + " | ".join(bs.fmt(r["cpu_us_per_msg"][b], 1) for b in brokers) + f" | {goal} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--s1", type=int, default=100_000)
    parser.add_argument("--s2", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--warmup", type=int, default=20_000, help="QoS 0 messages per broker first, not counted")
    args = parser.parse_args()
    names = [b for b in args.brokers.split(",") if b in BROKERS]
    started = dt.datetime.now(dt.timezone.utc)
    load_before = bs.loadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                            capture_output=True, text=True).stdout.strip()  # at the start: others commit meanwhile
    counts = {"S1": args.s1, "S2": args.s2}
    with tempfile.TemporaryDirectory() as tmp:
        brokers: list[tuple[str, int, int]] = []  # (name, MQTT port, measured pid)
        stops = []
        try:
            if "petrel" in names:
                port = free_port()
                petrel = BrokerProcess(Path(tmp) / "petrel", settings=f"mqtt_port = {port}\n").start()
                stops.append(petrel.kill9)
                brokers.append(("petrel", port, petrel.proc.pid))
            if "mosquitto" in names:
                mosquitto, port = start_mosquitto(Path(tmp))
                stops.append(lambda: (mosquitto.kill(), mosquitto.wait(10)))
                brokers.append(("mosquitto", port, mosquitto.pid))
            if "activemq" in names:
                port = free_port()
                activemq = ActiveMQ(transports={"mqtt": port})
                activemq.check()
                activemq.start()
                stops.append(activemq.stop)
                wait_for(lambda: _accepts(port), 60, message="ActiveMQ's MQTT port did not open")
                brokers.append(("activemq", port, activemq.pid))
            figures: dict[tuple[str, str], list[tuple[float | None, float | None]]] = {}
            for name, port, pid in brokers if args.warmup else ():  # JIT compilers and caches warm
                one_run(port, "bench/warmup", 0, args.warmup, args.size, pid)
            for run in range(args.runs):
                shift = run % len(brokers)
                order = brokers[shift:] + brokers[:shift]  # each broker first in turn
                for workload, qos in WORKLOADS:
                    for name, port, pid in order:
                        rate, cpu = one_run(port, f"bench/{workload}/{run}", qos, counts[workload], args.size, pid)
                        figures.setdefault((workload, name), []).append((rate, cpu))
                        print(f"run {run + 1} {workload} {name}: "
                              f"{'incomplete' if rate is None else f'{rate:,.0f} msgs/s, {cpu:.1f} µs/msg'}"
                              f" (load {bs.loadavg()})", flush=True)
        finally:
            for stop in reversed(stops):
                stop()
    rows = summary(figures, [b for b, _, _ in brokers])
    load_after = bs.loadavg()
    print(f"\n{started:%Y-%m-%d %H:%M} UTC, commit {commit}, medians of {args.runs} runs, S1 {args.s1:,} "
          f"QoS 0, S2 {args.s2:,} QoS 1, {args.size}-byte payloads, 3.1.1 clients, 1 producer -> 1 consumer; "
          f"load average before {load_before}, after {load_after}\n")
    print(table(rows, [b for b, _, _ in brokers]))
    out = Path(__file__).parent / "results" / f"mqtt-{started:%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"started": started.isoformat(), "commit": commit, "args": vars(args),
                               "load_before": load_before, "load_after": load_after, "summary": rows},
                              indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
