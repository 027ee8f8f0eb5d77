"""Broker CPU per message on the STOMP path, in-process, without sockets.

Feeds pre-rendered SEND frames (1 KiB bodies) to a STOMP adapter in 64 KiB reads while an
auto-ack subscriber on another adapter receives them; reports CPU microseconds per message
for non-persistent and persistent (receipted) sends. Use it to see per-message cost move:
    .venv/bin/python bench/adapter_cpu.py [--profile]
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator

from petrel.config import BrokerConfig
from petrel.server.broker import Broker
from petrel.server.flow import ReadFlow

N = 50_000


class FakeConn:
    def __init__(self) -> None:
        self.out = 0
        self.closed = False
        self.writing_paused = False
        self.peer = "bench"
        self.peer_subject = None  # no TLS client certificate
        self.transport = None
        self.reads = ReadFlow(self)  # the connection's one owner of paused reads (petrel.server.flow)

    def write(self, data: bytes) -> None:
        self.out += len(data)

    def close(self, **kw) -> None:
        self.closed = True

    def call_later(self, delay, fn):
        return asyncio.get_running_loop().call_later(delay, fn)

    def write_stream(self, *a, **kw):  # pragma: no cover
        raise RuntimeError


@contextlib.asynccontextmanager
async def bench_broker() -> AsyncIterator[Broker]:
    """A started in-process broker without listeners or security (the adapter's own cost, as
    before security) in a temporary directory, stopped at the end."""
    with tempfile.TemporaryDirectory() as d:
        config = BrokerConfig(data_dir=d, host="127.0.0.1", port=0, stomp_port=-1, http_port=-1,
                              security_enabled=False)
        broker = Broker(config)
        await broker.start()
        try:
            yield broker
        finally:
            await broker.stop()


async def settle(broker: Broker) -> None:
    """Until what was sent is on disk and the deliveries it released have run."""
    done = asyncio.Event()
    broker.store.sync(done.set)
    await done.wait()
    for _ in range(10):
        await asyncio.sleep(0)


async def run(persistent: bool) -> float:
    async with bench_broker() as broker:
        consumer, producer = FakeConn(), FakeConn()
        c = broker.make_adapter("stomp", consumer)
        p = broker.make_adapter("stomp", producer)
        c.data_received(b"CONNECT\naccept-version:1.2\n\n\x00SUBSCRIBE\nid:1\ndestination:/queue/b\n\n\x00")
        p.data_received(b"CONNECT\naccept-version:1.2\n\n\x00")
        body = b"x" * 1024
        extra = b"persistent:true\n" if persistent else b""
        frames = b"".join(
            b"SEND\ndestination:/queue/b\n" + extra + b"receipt:%d\ncontent-length:1024\n\n" % i + body + b"\x00"
            for i in range(N)
        )
        chunks = [frames[i : i + 65536] for i in range(0, len(frames), 65536)]
        t0 = time.process_time()
        for chunk in chunks:
            p.data_received(chunk)
            await asyncio.sleep(0)
        await settle(broker)
        return (time.process_time() - t0) / N * 1e6


def main() -> None:
    if "--profile" in sys.argv:
        import cProfile
        import pstats

        cProfile.run("asyncio.run(run(True))", "/tmp/adapter.prof")
        pstats.Stats("/tmp/adapter.prof").sort_stats("tottime").print_stats(25)
        return
    for persistent in (False, True):
        us = min(asyncio.run(run(persistent)) for _ in range(3))
        print(f"{'persistent' if persistent else 'non-persistent':15s} {us:6.1f} CPU us/msg (send + deliver + ack)")


if __name__ == "__main__":
    main()
