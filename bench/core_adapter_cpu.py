"""Broker CPU per message on the CORE path, in-process, without sockets.

The CORE twin of bench/adapter_cpu.py: pre-encoded SEND frames (1 KiB bodies, one property,
as bench/core_rows.py's producer sends them) fed to a CoreAdapter in 64 KiB reads, while a
consumer on another CoreAdapter (unlimited window) receives them and acknowledges
cumulatively after every read, as the client's ``ack="auto"`` does. Reports process CPU
microseconds per message (send + confirm + deliver + ack), the best of --runs, for
non-persistent and persistent sends. Run it against another tree with that tree's `src`
first on PYTHONPATH:
    .venv/bin/python bench/core_adapter_cpu.py [--runs 5] [--n 50000] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from adapter_cpu import bench_broker, settle  # bench/, beside this script
from petrel.codec.core import Ack, Connect, CoreConnection, CreateConsumer, CreateSession, Role, Send

try:
    from petrel.server.flow import ReadFlow
except ImportError:  # trees before the read flow
    ReadFlow = None


class FakeConn:
    def __init__(self) -> None:
        self.out = 0
        self.kept = bytearray()  # what was written while `keep` (the handshake's replies)
        self.keep = True
        self.closed = False
        self.writing_paused = False
        self.peer = "bench"
        self.peer_subject = None  # no TLS client certificate
        self.transport = None
        if ReadFlow is not None:
            self.reads = ReadFlow(self)

    def write(self, data: bytes) -> None:
        self.out += len(data)
        if self.keep:
            self.kept += data

    def close(self, **kw) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def call_later(self, delay, fn):
        return asyncio.get_running_loop().call_later(delay, fn)

    def write_stream(self, *a, **kw):  # pragma: no cover
        raise RuntimeError


def _client() -> CoreConnection:
    return CoreConnection(Role.CLIENT)


async def run(n: int, persistent: bool) -> float:
    async with bench_broker() as broker:
        cconn, pconn = FakeConn(), FakeConn()
        c = broker.make_adapter("core", cconn)
        p = broker.make_adapter("core", pconn)
        cc, pc = _client(), _client()
        for adapter, conn, client in ((c, cconn, cc), (p, pconn, pc)):
            adapter.data_received(client.send(Connect(list(client.offered_versions), ttl=-1)))
            client.receive_data(bytes(conn.kept))
            client.next_events()  # CONNECTED: the client codec may send the rest
            conn.keep = False
        c.data_received(cc.send(CreateSession(1, 1)) + cc.send(CreateConsumer(2, 1, 7, "b", 0, window=-1)))
        p.data_received(pc.send(CreateSession(1, 1)))
        consumer = c.sessions[1].consumers[7]
        body = b"x" * 1024
        frames = b"".join(pc.send(Send(1, "b", 0, persistent, 4, 0, 0, 0, {"bench-ts": time.monotonic_ns() + i},
                                       body)) for i in range(n))
        chunks = [frames[i: i + 65536] for i in range(0, len(frames), 65536)]
        ack = cc.send
        t0 = time.process_time()
        for chunk in chunks:
            p.data_received(chunk)
            await asyncio.sleep(0)
            delivering = consumer.delivering
            if delivering:
                c.data_received(ack(Ack(1, 7, [next(reversed(delivering))], True)))
        await settle(broker)
        spent = time.process_time() - t0
        assert cconn.out > n * 1024, "the consumer did not get the messages"
        return spent / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--persistent", action="store_true", help="with --profile: the persistent sends")
    args = parser.parse_args()
    if args.profile:
        import cProfile
        import pstats

        cProfile.runctx("asyncio.run(run(args.n, args.persistent))", globals(), {"args": args}, "/tmp/core_adapter.prof")
        pstats.Stats("/tmp/core_adapter.prof").sort_stats("tottime").print_stats(30)
        return
    for persistent in (False, True):
        us = sorted(asyncio.run(run(args.n, persistent)) for _ in range(args.runs))
        print(f"{'persistent' if persistent else 'non-persistent':15s} min {us[0]:6.2f}  median {us[len(us) // 2]:6.2f}"
              " CPU us/msg (send + confirm + deliver + ack)")


if __name__ == "__main__":
    main()
