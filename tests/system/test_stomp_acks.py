"""STOMP details through a real broker: cumulative client acks, the prefetch window, bodies with
NUL bytes, and UNSUBSCRIBE that ends a durable subscription."""

from __future__ import annotations

import pytest

from conftest import connect, raw

pytestmark = pytest.mark.system


def test_client_ack_is_cumulative_and_the_prefetch_window_holds(broker):
    conn, listener = connect(broker)
    for i in range(10):
        conn.send("/queue/cumulative", f"m{i}", headers={"receipt": str(i)})
    for _ in range(10):
        listener.receipts.get(timeout=10)
    conn.subscribe("/queue/cumulative", id="1", ack="client", headers={"activemq.prefetchSize": "4"})
    first = [listener.get() for _ in range(4)]
    assert listener.nothing_within(0.5), "no more than the prefetch window before an ack"
    conn.ack(first[2].headers["ack"])  # acks m0, m1 and m2 together
    more = [listener.get() for _ in range(3)]
    assert [f.body for f in first + more] == [f"m{i}" for i in range(7)]
    conn.disconnect()
    # m0..m2 are gone; m3 (delivered, never acked) and the rest come back
    c2, l2 = connect(broker)
    c2.subscribe("/queue/cumulative", id="1")
    assert [l2.get().body for _ in range(7)] == [f"m{i}" for i in range(3, 10)]
    assert l2.nothing_within(0.3)
    c2.disconnect()


def test_body_with_nul_bytes_round_trips(broker):
    s = raw(broker)
    body = b"a\x00b\x00\x00c"
    s.sendall(b"CONNECT\naccept-version:1.2\n\n\x00"
              b"SUBSCRIBE\nid:1\ndestination:/queue/nul\n\n\x00"
              b"SEND\ndestination:/queue/nul\ncontent-length:%d\n\n" % len(body) + body + b"\x00")
    data = b""
    while b"content-length:6" not in data or not data.endswith(body + b"\x00"):
        chunk = s.recv(65536)
        assert chunk, f"connection closed early: {data!r}"
        data += chunk
    assert data.endswith(b"\n\n" + body + b"\x00")
    s.close()


def test_unsubscribe_with_the_durable_name_ends_the_subscription(broker):
    conn, listener = connect(broker, client_id="app")
    conn.subscribe("/topic/alerts", id="1", headers={"durable-subscription-name": "audit"})
    conn.unsubscribe("1", headers={"durable-subscription-name": "audit"})
    conn.send("/topic/alerts", "nobody keeps this", headers={"receipt": "r"})
    assert listener.receipts.get(timeout=10) == "r"
    conn.disconnect()
    c2, l2 = connect(broker, client_id="app")
    c2.subscribe("/topic/alerts", id="1", headers={"durable-subscription-name": "audit"})
    assert l2.nothing_within(0.5)
    c2.disconnect()
