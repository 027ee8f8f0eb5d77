"""STOMP over WebSocket beside STOMP over TCP on one broker: what the WebSocket layer costs.

    .venv/bin/python bench/websocket.py [--runs 5] [--count 50000] [--size 1024]

One `petrel run` (petrel.testing.process.BrokerProcess, ws_port on a free port). Each run, for
TCP and for WebSocket in turn (the order alternates between runs): one raw socket sends COUNT
non-persistent SENDs of SIZE bytes to a fresh queue in batches of 1,000 frames (each frame its
own masked WebSocket message on the WebSocket side), the last with a receipt (ingest: COUNT /
time to that receipt); then it subscribes with ack:auto and counts MESSAGE frames until all
COUNT arrived (delivery). Raw sockets, frames built before the clock starts, so the client's
cost is small and alike for both. Prints the medians and their ratios (WebSocket / TCP).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

from petrel.testing.process import BrokerProcess, free_port

BATCH = 1000
MARK = b"MESSAGE\nsubscription:1"


def masked(payload: bytes) -> bytes:
    """`payload` as one masked text message, as a client sends it."""
    n = len(payload)
    mask = os.urandom(4)
    if n < 126:
        head = bytes((0x81, 0x80 | n))
    elif n < 65536:
        head = bytes((0x81, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x81, 0x80 | 127)) + n.to_bytes(8, "big")
    key = (mask * (n // 4 + 1))[:n]
    return head + mask + (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def open_client(kind: str, broker: BrokerProcess, ws_port: int):
    if kind == "tcp":
        s = socket.create_connection(("127.0.0.1", broker.stomp_port))
        wrap = bytes
    else:
        s = socket.create_connection(("127.0.0.1", ws_port))
        s.sendall(b"GET /stomp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                  b"Sec-WebSocket-Protocol: v12.stomp\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 101 "), answer
        wrap = masked
    s.sendall(wrap(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\x00"))
    answer = b""
    while b"CONNECTED" not in answer:
        answer += s.recv(4096)
    return s, wrap


def one_run(kind: str, broker: BrokerProcess, ws_port: int, queue: str, count: int, size: int) -> tuple[float, float]:
    s, wrap = open_client(kind, broker, ws_port)
    head = b"SEND\ndestination:/queue/%s\ncontent-length:%d\n\n" % (queue.encode(), size)
    body = b"x" * size + b"\x00"
    batch = b"".join(wrap(head + body) for _ in range(BATCH))
    last = b"".join(wrap(head + body) for _ in range(BATCH - 1)) + wrap(
        b"SEND\ndestination:/queue/%s\nreceipt:end\ncontent-length:%d\n\n" % (queue.encode(), size) + body)
    t0 = time.perf_counter()
    for _ in range(count // BATCH - 1):
        s.sendall(batch)
    s.sendall(last)
    answer = b""
    while b"receipt-id:end" not in answer:
        answer += s.recv(65536)
    ingest = count / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    s.sendall(wrap(b"SUBSCRIBE\nid:1\ndestination:/queue/%s\nack:auto\n\n\x00" % queue.encode()))
    seen, tail = 0, b""
    while seen < count:
        data = tail + s.recv(1 << 20)
        tail = data[-len(MARK) + 1:]
        seen += data.count(MARK) - tail.count(MARK)
    delivery = count / (time.perf_counter() - t0)
    s.close()
    return ingest, delivery


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=50_000, help="messages per run (a multiple of 1,000)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    args = parser.parse_args()
    ws_port = free_port()
    results: dict[str, list[tuple[float, float]]] = {"tcp": [], "ws": []}
    with tempfile.TemporaryDirectory() as work:
        with BrokerProcess(Path(work) / "b", settings=f"ws_port = {ws_port}\n") as broker:
            for run in range(args.runs):
                for kind in ("tcp", "ws") if run % 2 == 0 else ("ws", "tcp"):
                    results[kind].append(one_run(kind, broker, ws_port, f"{kind}{run}", args.count, args.size))
    medians = {kind: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
               for kind, rows in results.items()}
    print(f"{args.runs} runs x {args.count} messages of {args.size} B, non-persistent, medians (msgs/s)")
    print(f"{'':10}{'ingest':>12}{'delivery':>12}")
    for kind, (ingest, delivery) in medians.items():
        print(f"{kind:10}{ingest:12,.0f}{delivery:12,.0f}")
    print(f"{'ws / tcp':10}{medians['ws'][0] / medians['tcp'][0]:12.2f}{medians['ws'][1] / medians['tcp'][1]:12.2f}")


if __name__ == "__main__":
    main()
