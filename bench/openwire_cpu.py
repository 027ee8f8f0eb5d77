"""Broker CPU per message on the OpenWire path, in-process, without sockets.

The OpenWire twin of bench/adapter_cpu.py, shaped as bench/jms.py's S1/S2: a producer adapter
is fed BytesMessages (1 KiB, as ActiveMQ's JMS client sends them: producer and message ids,
no properties) in reads of `--batch` messages, and a consumer adapter (prefetch 1,000)
receives them; after each read, one standard ack per dispatched message (the client's
auto-acknowledge) is fed back. Only the adapters' calls are timed (building the client's
frames and reading the dispatches to ack them are not). Reports process CPU microseconds per
message, the best of --runs, non-persistent (S1) and persistent (S2, each send asking for its
response), in loose encoding, or tight with --tight. Run it against another tree with that
tree's `src` first on PYTHONPATH:
    .venv/bin/python bench/openwire_cpu.py [--runs 5] [--n 30000] [--tight] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from adapter_cpu import bench_broker, settle  # bench/, beside this script
from core_adapter_cpu import FakeConn
from petrel.codec.openwire import (
    NEED_DATA,
    AckType,
    ConnectionId,
    ConnectionInfo,
    ConsumerId,
    ConsumerInfo,
    DataType,
    Destination,
    Message,
    MessageAck,
    MessageDispatch,
    MessageId,
    OpenWireConnection,
    ProducerId,
    ProducerInfo,
    SessionId,
    SessionInfo,
    WireFormatInfo,
)

QUEUE = Destination(DataType.ACTIVEMQ_QUEUE, "bench")


def handshake(adapter, conn: FakeConn, client: OpenWireConnection, conn_id: str, tight: bool) -> bytes:
    """The WireFormatInfo exchange (the client reads the broker's before it sends more, as the
    JMS client does), then the client's ConnectionInfo and SessionInfo."""
    options = {"TightEncodingEnabled": tight, "CacheEnabled": False, "SizePrefixDisabled": False,
               "StackTraceEnabled": True, "TcpNoDelayEnabled": True}
    adapter.data_received(client.send(WireFormatInfo(12, options)))
    client.receive_data(bytes(conn.kept))
    conn.kept = bytearray()
    assert isinstance(client.next_event(), WireFormatInfo) and getattr(client, "tight", False) == tight
    cid = ConnectionId(conn_id)
    return b"".join(client.send(c) for c in (
        ConnectionInfo(command_id=1, response_required=True, connection_id=cid, client_id=conn_id),
        SessionInfo(command_id=2, response_required=True, session_id=SessionId(conn_id, 1))))


class Dispatches:
    """The client side of the consumer: reads the dispatches the adapter wrote."""

    def __init__(self, conn: FakeConn, codec: OpenWireConnection) -> None:
        self.conn = conn
        self.codec = codec

    def take(self) -> list:
        data, self.conn.kept = bytes(self.conn.kept), bytearray()
        self.codec.receive_data(data)
        out = []
        while (event := self.codec.next_event()) is not NEED_DATA:
            if isinstance(event, MessageDispatch) and event.message is not None:
                out.append(event)
        return out


async def timed(broker, adapter, data: bytes, profile) -> float:
    """The process CPU seconds of the adapter reading `data` and the broker settling it."""
    t0 = time.process_time()
    if profile:
        profile.enable()
    adapter.data_received(data)
    await settle(broker)
    if profile:
        profile.disable()
    return time.process_time() - t0


async def run(n: int, persistent: bool, batch: int, tight: bool = False, profile=None) -> float:
    async with bench_broker() as broker:
        cconn, pconn = FakeConn(), FakeConn()
        c = broker.make_adapter("openwire", cconn)
        p = broker.make_adapter("openwire", pconn)
        cclient, pclient = OpenWireConnection(), OpenWireConnection()
        consumer_id = ConsumerId("c", 1, 1)
        c.data_received(handshake(c, cconn, cclient, "c", tight) + cclient.send(ConsumerInfo(
            command_id=3, response_required=True, consumer_id=consumer_id, destination=QUEUE, prefetch_size=1000)))
        producer_id = ProducerId("p", 1, 1)
        p.data_received(handshake(p, pconn, pclient, "p", tight) + pclient.send(ProducerInfo(
            command_id=3, response_required=True, producer_id=producer_id, destination=QUEUE)))
        pconn.keep = False
        reader = Dispatches(cconn, cclient)
        reader.take()
        body = b"x" * 1024
        cpu = 0.0
        acked = 0
        command = 10
        for start in range(0, n, batch):
            frames = []
            for i in range(start, min(n, start + batch)):
                command += 1
                frames.append(pclient.send(Message(
                    kind=DataType.ACTIVEMQ_BYTES_MESSAGE, command_id=command, response_required=persistent,
                    producer_id=producer_id, destination=QUEUE,
                    message_id=MessageId(producer_id=producer_id, producer_sequence_id=i + 1),
                    persistent=persistent, priority=4, timestamp=1_700_000_000_000 + i, content=body)))
            cpu += await timed(broker, p, b"".join(frames), profile)
            acks = []
            for d in reader.take():
                command += 1
                acks.append(cclient.send(MessageAck(
                    command_id=command, destination=QUEUE, consumer_id=consumer_id, ack_type=AckType.STANDARD,
                    first_message_id=d.message.message_id, last_message_id=d.message.message_id, message_count=1)))
                acked += 1
            cpu += await timed(broker, c, b"".join(acks), profile)
        if acked != n:
            raise SystemExit(f"{acked} of {n} messages dispatched")
        return cpu / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=30_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--tight", action="store_true", help="tight encoding (the JMS client's default)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        asyncio.run(run(args.n, False, args.batch, args.tight, prof))
        pstats.Stats(prof).sort_stats("tottime").print_stats(35)
        return
    for persistent in (False, True):
        us = min(asyncio.run(run(args.n, persistent, args.batch, args.tight)) for _ in range(args.runs))
        print(f"{'S2 persistent' if persistent else 'S1 non-persistent':18s} {us:6.1f} CPU us/msg "
              f"(send + dispatch + ack, {'tight' if args.tight else 'loose'})")


if __name__ == "__main__":
    main()
