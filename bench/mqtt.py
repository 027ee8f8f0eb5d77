"""MQTT S1 (QoS 0, one producer -> one consumer) and S2 (QoS 1 both ways) on Petrel and on
mosquitto 2.0 (Debian's package), in one run, as ratios of medians.

    .venv/bin/python bench/mqtt.py [--runs 5] [--s1 100000] [--s2 20000] [--size 100]

Each broker is started here on free ports: Petrel with `petrel run` (BrokerProcess, its MQTT
port), mosquitto with a config of its own (`listener`, anonymous, max_queued_messages 0 so it
queues without dropping, max_inflight_messages 1000 like Petrel's window for 3.1.1). Each run,
for each broker in turn (the order alternates between runs): a consumer process subscribes to
a fresh topic (clean session, 3.1.1), then one producer sends COUNT PUBLISHes of SIZE bytes
built before the clock starts (S1: QoS 0 in batches of 1,000; S2: QoS 1 keeping up to 1,000
unacknowledged), and the consumer counts them (S2: PUBACKing each). The figure is COUNT / the
time from the first send to the last message received. Producer and consumer are separate
processes on raw sockets with Petrel's MQTT codec.

Not alike: Petrel answers a QoS 1 PUBLISH after the message is synced to disk; mosquitto keeps
messages in memory (its persistence file is written on its autosave interval), so S2 compares
a durable broker with one that is not.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import socket
import statistics
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


def one_run(port: int, topic: str, qos: int, count: int, size: int) -> float | None:
    ctx = mp.get_context("spawn")
    ready, result = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=consume, args=(port, topic, qos, count, ready, result))
    consumer.start()
    if not ready.wait(60):
        consumer.kill()
        return None
    t0 = produce(port, topic, qos, count, size)
    got, t1 = result.get(timeout=120 + count / 1000)
    consumer.join(30)
    return count / (t1 - t0) if got == count else None


def start_mosquitto(workdir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    conf = workdir / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n"
                    f"max_inflight_messages {WINDOW}\npersistence false\n")
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_for(up, 20, message="mosquitto did not start")
    return proc, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--s1", type=int, default=100_000)
    parser.add_argument("--s2", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        petrel_port = free_port()
        petrel = BrokerProcess(Path(tmp) / "petrel", settings=f"mqtt_port = {petrel_port}\n").start()
        mosquitto, mosquitto_port = start_mosquitto(Path(tmp))
        brokers = [("petrel", petrel_port), ("mosquitto", mosquitto_port)]
        figures: dict[tuple[str, str], list[float | None]] = {}
        try:
            for run in range(args.runs):
                order = brokers if run % 2 == 0 else brokers[::-1]
                for workload, qos, count in (("S1", 0, args.s1), ("S2", 1, args.s2)):
                    for name, port in order:
                        rate = one_run(port, f"bench/{workload}/{run}", qos, count, args.size)
                        figures.setdefault((workload, name), []).append(rate)
                        print(f"run {run + 1} {workload} {name}: "
                              f"{'incomplete' if rate is None else f'{rate:,.0f} msgs/s'}", flush=True)
        finally:
            petrel.kill9()
            mosquitto.kill()
            mosquitto.wait(10)
    print(f"\nmedians of {args.runs} runs, {args.size}-byte payloads, 3.1.1 clients, 1 producer -> 1 consumer")
    for workload in ("S1", "S2"):
        meds = {}
        for name, _ in brokers:
            done = [r for r in figures[(workload, name)] if r is not None]
            meds[name] = statistics.median(done) if done else None
        shown = ", ".join(f"{n} {m:,.0f} msgs/s" if m else f"{n} incomplete" for n, m in meds.items())
        ratio = (f"petrel/mosquitto {meds['petrel'] / meds['mosquitto']:.2f}"
                 if meds["petrel"] and meds["mosquitto"] else "")
        print(f"{workload}: {shown}; {ratio}")


if __name__ == "__main__":
    main()
