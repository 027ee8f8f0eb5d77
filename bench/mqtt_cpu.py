"""Broker CPU per message on the MQTT path, in-process, without sockets.

Feeds pre-encoded PUBLISH packets (100-byte payloads, one topic) to one MQTT adapter in 64 KiB
reads while another adapter's clean-session 3.1.1 subscriber receives them (bench/mqtt.py's S1 and
S2, without the sockets): QoS 0, and QoS 1 with the subscriber PUBACKing what it got after each
read (its window is 1,000, as the codec's client would keep it full). Only the broker's work is
timed (the adapters' `data_received`, the store's syncs, the deliveries); decoding what the
subscriber got and encoding its PUBACKs is not. Prints CPU microseconds per message:
    .venv/bin/python bench/mqtt_cpu.py [--n 50000] [--runs 3] [--qos 0,1] [--read 65536] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from adapter_cpu import FakeConn, bench_broker, settle

from petrel.codec.mqtt import NEED_DATA, Connect, MqttConnection, Puback, Publish, Subscribe, Subscription
from petrel.codec.roles import Role

TOPIC = "bench/mqtt"


class Capture(FakeConn):
    """A connection whose output the bench reads (the subscriber's)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data


async def run(qos: int, n: int, size: int = 100, read: int = 65536) -> float:
    """CPU microseconds per message of the broker's part of sending `n` messages through."""
    async with bench_broker() as broker:
        sub_conn, pub_conn = Capture(), FakeConn()
        sub = broker.make_adapter("mqtt", sub_conn)
        pub = broker.make_adapter("mqtt", pub_conn)
        client = MqttConnection(Role.CLIENT)
        sub.data_received(client.send(Connect("bench-sub", 4, keep_alive=0))
                          + client.send(Subscribe(1, (Subscription(TOPIC, qos),))))
        producer = MqttConnection(Role.CLIENT)
        pub.data_received(producer.send(Connect("bench-pub", 4, keep_alive=0)))
        await settle(broker)
        client.receive_data(sub_conn.take())
        while client.next_event() is not NEED_DATA:
            pass
        body = b"x" * size
        packets = b"".join(producer.send(Publish(TOPIC, body, qos, packet_id=(i % 65535) + 1 if qos else None))
                           for i in range(n))
        chunks = [packets[i: i + read] for i in range(0, len(packets), read)]
        got = 0
        spent = 0.0

        def receive() -> bytes:
            """What the subscriber got since the last call, and its PUBACKs for it (untimed)."""
            nonlocal got
            client.receive_data(sub_conn.take())
            acks = []
            while (p := client.next_event()) is not NEED_DATA:
                if isinstance(p, Publish):
                    got += 1
                    if p.qos:
                        acks.append(client.send(Puback(p.packet_id)))
            return b"".join(acks)

        for chunk in chunks:
            t0 = time.process_time()
            pub.data_received(chunk)
            await asyncio.sleep(0)
            spent += time.process_time() - t0
            while acks := receive():
                t0 = time.process_time()
                sub.data_received(acks)
                await asyncio.sleep(0)
                spent += time.process_time() - t0
        deadline = time.monotonic() + 60
        while got < n and time.monotonic() < deadline:
            t0 = time.process_time()
            await settle(broker)
            spent += time.process_time() - t0
            acks = receive()
            if acks:
                t0 = time.process_time()
                sub.data_received(acks)
                spent += time.process_time() - t0
        t0 = time.process_time()
        await settle(broker)
        spent += time.process_time() - t0
        if got != n:
            raise SystemExit(f"QoS {qos}: the subscriber got {got} of {n}")
        return spent / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--qos", default="0,1")
    parser.add_argument("--read", type=int, default=65536, help="bytes the producer's reads hold")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    levels = [int(q) for q in args.qos.split(",")]
    if args.profile:
        import cProfile
        import pstats

        for qos in levels:
            cProfile.runctx("asyncio.run(run(qos, args.n, read=args.read))", globals(), {"qos": qos, "args": args}, "/tmp/mqtt.prof")
            print(f"--- QoS {qos}")
            pstats.Stats("/tmp/mqtt.prof").sort_stats("tottime").print_stats(30)
        return
    for qos in levels:
        figures = [asyncio.run(run(qos, args.n, read=args.read)) for _ in range(args.runs)]
        print(f"QoS {qos}: {min(figures):6.2f} CPU us/msg (min of {args.runs}: "
              + ", ".join(f"{f:.2f}" for f in figures) + ")")


if __name__ == "__main__":
    main()
