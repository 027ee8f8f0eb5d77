"""One subscriber that stops reading must not freeze a topic for everyone (issue 9, bug 11).

A real broker process, a stomp.py producer and healthy subscriber, and a raw-socket subscriber
that subscribes and then reads nothing: the producer and the healthy subscriber keep flowing
while the stalled subscription pages; when it reads again it gets every message, in order.
"""

from __future__ import annotations

import socket
import time

import pytest

from conftest import connect

pytestmark = pytest.mark.system

N = 20_000
BODY = "x" * 1000


def body(i: int) -> str:
    return f"{i:06d}{BODY}"


def stalled_subscriber(broker) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
    s.connect(("127.0.0.1", broker.stomp_port))
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
    s.sendall(b"SUBSCRIBE\nid:stuck\ndestination:/topic/t\nack:auto\nreceipt:sub\n\n\x00")
    s.settimeout(30)
    data = b""
    while b"receipt-id:sub" not in data:
        chunk = s.recv(4096)
        assert chunk, "the broker closed the stalled subscriber's connection"
        data += chunk
    return s


def read_messages(s: socket.socket, want: int, timeout: float) -> list[int]:
    """The sequence numbers of the MESSAGE frames read from a raw STOMP socket."""
    s.settimeout(5)
    buf = b""
    seqs: list[int] = []
    deadline = time.monotonic() + timeout
    while len(seqs) < want and time.monotonic() < deadline:
        try:
            chunk = s.recv(1 << 20)
        except (TimeoutError, socket.timeout):
            continue
        if not chunk:
            break
        buf += chunk
        *frames, buf = buf.split(b"\x00")
        for frame in frames:
            frame = frame.lstrip(b"\r\n")
            if frame.startswith(b"MESSAGE\n"):
                seqs.append(int(frame.split(b"\n\n", 1)[1][:6]))
    return seqs


def produce_and_read_healthy(broker) -> tuple:
    """Subscribe a healthy consumer, send N with periodic receipts: every receipt and every
    message to the healthy one arrive. Returns the connections to close."""
    healthy, got = connect(broker)
    healthy.subscribe("/topic/t", id="healthy", ack="auto", headers={"receipt": "sub-healthy"})
    assert got.receipts.get(timeout=30) == "sub-healthy"
    producer, plis = connect(broker)
    for i in range(N):
        headers = {"receipt": f"r{i}"} if i % 1000 == 999 else {}
        producer.send("/topic/t", body(i), headers=headers)
    last = None
    deadline = time.monotonic() + 180
    while last != f"r{N - 1}" and time.monotonic() < deadline:
        last = plis.receipts.get(timeout=max(deadline - time.monotonic(), 0.1))
    assert last == f"r{N - 1}", "the producer was held back by the stalled subscriber"

    seen = []
    deadline = time.monotonic() + 180
    while len(seen) < N and time.monotonic() < deadline:
        seen.append(int(got.get(timeout=max(deadline - time.monotonic(), 0.1)).body[:6]))
    assert seen == list(range(N)), f"the healthy subscriber got {len(seen)} of {N}"
    return producer, healthy


def test_a_stalled_topic_subscriber_pages_while_the_producer_and_a_healthy_one_keep_flowing(broker):
    stuck = stalled_subscriber(broker)
    producer = healthy = None
    try:
        producer, healthy = produce_and_read_healthy(broker)

        # the stalled one reads again: every message, in order (from memory, then its pages)
        seqs = read_messages(stuck, N, timeout=180)
        assert len(seqs) == N, f"the stalled subscriber got {len(seqs)} of {N} once it read"
        assert seqs == list(range(N))
        assert "no longer slows the producers of t" in broker.log_path.read_text(errors="replace")
    finally:
        stuck.close()
        for c in (producer, healthy):
            if c is not None and c.is_connected():
                c.disconnect()


def test_a_subscriber_that_stops_acknowledging_pages_while_the_others_keep_flowing(broker):
    """The other stalled client: client acknowledgements, its prefetch window exhausted."""
    slow, lis = connect(broker)
    slow.subscribe("/topic/t", id="slow", ack="client-individual",
                   headers={"activemq.prefetchSize": "100", "receipt": "sub-slow"})
    assert lis.receipts.get(timeout=30) == "sub-slow"
    producer = healthy = None
    try:
        producer, healthy = produce_and_read_healthy(broker)
        seen = []
        deadline = time.monotonic() + 180
        while len(seen) < N and time.monotonic() < deadline:
            frame = lis.get(timeout=max(deadline - time.monotonic(), 0.1))
            seen.append(int(frame.body[:6]))
            slow.ack(frame.headers["ack"])  # it reads (and acknowledges) again
        assert seen == list(range(N)), f"the slow subscriber got {len(seen)} of {N} once it acknowledged"
    finally:
        for c in (producer, healthy, slow):
            if c is not None and c.is_connected():
                c.disconnect()
