"""Throughput of the Python CORE client: 1 producer -> 1 consumer through a real broker.

Starts a broker process (or uses --url), then for non-persistent and persistent messages
runs a producer and a consumer at the same time on one queue and reports messages per
second (received, from the first send to the last receive). The producer uses the
confirmation window (persistent sends are confirmed after the broker's disk sync); the
consumer acknowledges automatically in batches.

    .venv/bin/python bench/core_client.py [--count 50000] [--size 1024] [--runs 3] [--api async|sync]

Not part of the test suite; never assert timings in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from petrel.client import Connection, Message, connect
from petrel.testing.process import BrokerProcess


async def run_async(url: str, queue: str, count: int, size: int, durable: bool, window: int) -> float:
    body = b"x" * size
    message = Message(body, durable=durable)
    async with await connect(url, confirmation_window=window) as conn:
        psession = await conn.session()
        csession = await conn.session()
        consumer = await csession.consumer(f"queue://{queue}")
        producer = psession.producer(f"queue://{queue}")
        done = asyncio.Event()
        received = 0

        async def consume() -> None:
            nonlocal received
            while received < count:
                if await consumer.receive(30) is None:
                    raise RuntimeError(f"consumer starved after {received} messages")
                received += 1
            done.set()

        task = asyncio.create_task(consume())
        t0 = time.perf_counter()
        for _ in range(count):
            await producer.send(message)
        await psession.flush()
        await task
        elapsed = time.perf_counter() - t0
        await consumer.close()
    return count / elapsed


def run_sync(url: str, queue: str, count: int, size: int, durable: bool, window: int) -> float:
    body = b"x" * size
    with Connection(url, confirmation_window=window) as pconn, Connection(url) as cconn:
        consumer = cconn.session().consumer(f"queue://{queue}")
        session = pconn.session()
        producer = session.producer(f"queue://{queue}")
        received = [0]

        def consume() -> None:
            while received[0] < count:
                if consumer.receive(30) is None:
                    break
                received[0] += 1

        thread = threading.Thread(target=consume)
        thread.start()
        t0 = time.perf_counter()
        for _ in range(count):
            producer.send(Message(body, durable=durable))
        session.flush()
        thread.join()
        elapsed = time.perf_counter() - t0
        consumer.close()
        if received[0] < count:
            raise RuntimeError(f"consumer starved after {received[0]} messages")
    return count / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="use a running broker instead of starting one")
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window", type=int, default=1024 * 1024, help="confirmation window in bytes")
    parser.add_argument("--api", choices=("async", "sync"), default="async")
    args = parser.parse_args()

    broker = None
    url = args.url
    if url is None:
        workdir = Path(tempfile.mkdtemp(prefix="petrel-bench-"))
        broker = BrokerProcess(workdir, env={"PETREL_LOG_LEVEL": "WARNING"}).start()
        url = f"tcp://127.0.0.1:{broker.port}"
    try:
        for durable in (False, True):
            rates = []
            for run in range(args.runs):
                queue = f"bench.{'p' if durable else 'np'}.{run}"
                if args.api == "async":
                    rate = asyncio.run(run_async(url, queue, args.count, args.size, durable, args.window))
                else:
                    rate = run_sync(url, queue, args.count, args.size, durable, args.window)
                rates.append(rate)
            kind = "persistent" if durable else "non-persistent"
            print(f"{kind:>15}: median {statistics.median(rates):9,.0f} msg/s  "
                  f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}; {args.count} x {args.size} B, {args.api} API)")
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
