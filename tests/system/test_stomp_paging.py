"""Address memory limits through STOMP: PAGE with a restart mid-depaging, BLOCK, FAIL, DROP."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import sys
import time

import pytest

from conftest import connect, raw, read_until_closed
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system

LIMITS = """
[address_settings."paged.#"]
max_size_bytes = 262144

[address_settings."blocked.#"]
max_size_bytes = 65536
address_full_policy = "BLOCK"

[address_settings."failing.#"]
max_size_bytes = 16384
address_full_policy = "FAIL"

[address_settings."dropping.#"]
max_size_messages = 5
address_full_policy = "DROP"
"""


def pages(b):
    return list((b.data_dir / "paging").glob("*/*.page"))


def test_page_then_restart_in_the_middle_of_depaging(broker_factory):
    b = broker_factory(LIMITS).start()
    conn, listener = connect(b)
    n = 3000
    body = "x" * 1000
    for i in range(n):
        conn.send("/queue/paged.q", f"{i:05d}{body}", headers={"persistent": "true", "receipt": str(i)})
    for _ in range(n):
        listener.receipts.get(timeout=30)
    assert pages(b), "the queue should have paged"
    conn.subscribe("/queue/paged.q", id="1", ack="client-individual", headers={"activemq.prefetchSize": "50"})
    got = []
    for _ in range(1000):
        f = listener.get()
        got.append(int(f.body[:5]))
        conn.ack(f.headers["ack"], receipt=f"a{len(got)}")
    receipts = iter(lambda: listener.receipts.get(timeout=10), "a1000")
    assert all(r.startswith("a") for r in receipts)  # up to the last ack's: every ack before it is durable
    b.kill9()
    b.start()
    conn, listener = connect(b)
    conn.subscribe("/queue/paged.q", id="1", ack="client-individual", headers={"activemq.prefetchSize": "200"})
    rest = []
    for _ in range(n - 1000):
        f = listener.get(timeout=15)
        rest.append(int(f.body[:5]))
        conn.ack(f.headers["ack"])
    assert listener.nothing_within(0.5)
    # acked ones never come back; everything else comes back once, in order
    assert got == list(range(1000))
    assert rest == list(range(1000, n))
    conn.disconnect()


BIG = """
[address_settings."big"]
max_size_bytes = 65536
address_full_policy = "PAGE"
"""


def send_receipted(b, destination, first, n, body):
    conn, listener = connect(b)
    for i in range(first, first + n):
        conn.send(destination, f"{i:05d}{body}", headers={"persistent": "true", "receipt": str(i)})
    got = {listener.receipts.get(timeout=60) for _ in range(n)}
    assert got == {str(i) for i in range(first, first + n)}
    conn.disconnect()


def drain(b, destination, n):
    conn, listener = connect(b)
    conn.subscribe(destination, id="1", ack="auto")
    got = []
    with contextlib.suppress(queue.Empty):
        while len(got) < n:
            got.append(int(listener.get(timeout=30).body[:5]))
    conn.disconnect()
    return got


def test_paging_again_after_a_restart_loses_nothing(tmp_path):
    """Issue 9, bug 1: page, drain, SIGTERM and restart, page again, drain: every message comes back.
    (The second run wrote its pages from file 1 while the recovered cursor pointed past it.)"""
    b = BrokerProcess(tmp_path / "b", settings=BIG, http=True).start()
    try:
        made = subprocess.run([sys.executable, "-m", "petrel", "queue", "create", "--name", "big", "--url",
                               f"http://127.0.0.1:{b.http_port}"], capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        n = 6000
        body = "x" * 10_000
        send_receipted(b, "/queue/big", 0, n, body)
        assert pages(b), "the queue should have paged"
        assert drain(b, "/queue/big", n) == list(range(n))
        assert b.stop() == 0
        b.start()
        send_receipted(b, "/queue/big", n, n, body)
        assert pages(b), "the queue should have paged again"
        assert drain(b, "/queue/big", n) == list(range(n, 2 * n))
        b.restart()
        assert drain(b, "/queue/big", 1) == []  # nothing comes back twice
    finally:
        b.kill9()


def test_a_paged_queue_drains_with_client_individual_acks_without_waiting_for_them(broker_factory):
    """Issue 9, bug 12: depaging waited for acknowledgements, one ~16 KiB page batch per round trip
    (364 msgs/s against 45,630 with ack:auto). On 2 shared cores these 6,000 took 16.8 s before
    the fix and 0.3 s after: the bound is over 10x the latter and a quarter of the former."""
    b = broker_factory(BIG).start()
    n = 6000
    send_receipted(b, "/queue/big", 0, n, "x" * 1000)
    assert pages(b), "the queue should have paged"
    conn, listener = connect(b)
    started = time.monotonic()
    conn.subscribe("/queue/big", id="1", ack="client-individual")
    got = []
    for _ in range(n):
        f = listener.get(timeout=30)
        got.append(int(f.body[:5]))
        conn.ack(f.headers["ack"])
    elapsed = time.monotonic() - started
    assert got == list(range(n))
    assert elapsed < 4.0, f"{n} paged messages took {elapsed:.1f} s to drain with client-individual acks"
    conn.disconnect()


def test_block_releases_when_a_consumer_drains(broker_factory):
    b = broker_factory(LIMITS).start()
    producer, pl = connect(b)
    for i in range(200):
        producer.send("/queue/blocked.q", f"{i}" + "y" * 1000, headers={"receipt": str(i)})
    receipts = set()
    with contextlib.suppress(queue.Empty):  # receipts stop coming once the address is full
        while len(receipts) < 200:
            receipts.add(pl.receipts.get(timeout=2))
    assert len(receipts) < 200, "the producer should be blocked by the full address"
    # another address keeps flowing meanwhile
    other, ol = connect(b)
    other.send("/queue/free.q", "free", headers={"receipt": "f"})
    assert ol.receipts.get(timeout=10) == "f"
    consumer, cl = connect(b)
    consumer.subscribe("/queue/blocked.q", id="1")
    bodies = [cl.get().body for _ in range(200)]
    assert [int(x[:-1000]) for x in bodies] == list(range(200))
    while len(receipts) < 200:
        receipts.add(pl.receipts.get(timeout=10))
    for c in (producer, other, consumer):
        c.disconnect()


def test_fail_policy_error_reaches_the_client_and_nothing_is_stored(broker_factory):
    b = broker_factory(LIMITS).start()
    s = raw(b)
    s.sendall(b"CONNECT\naccept-version:1.2\n\n\x00")
    frames = b"".join(
        b"SEND\ndestination:/queue/failing.q\nreceipt:%d\ncontent-length:4000\n\n" % i + b"z" * 4000 + b"\x00"
        for i in range(10)
    )
    s.sendall(frames)
    data = read_until_closed(s)
    assert b"ERROR" in data and b"is full" in data
    receipted = data.count(b"RECEIPT")
    conn, listener = connect(b)
    conn.subscribe("/queue/failing.q", id="1")
    got = listener.drain(idle=1.0)
    assert len(got) == receipted < 10
    conn.disconnect()


def test_drop_policy_drops_and_counts(broker_factory):
    b = broker_factory(LIMITS).start()
    conn, listener = connect(b)
    for i in range(10):
        conn.send("/queue/dropping.q", str(i), headers={"receipt": str(i)})
    for _ in range(10):
        listener.receipts.get(timeout=10)
    conn.subscribe("/queue/dropping.q", id="1")
    assert [f.body for f in listener.drain(idle=1.0)] == [str(i) for i in range(5)]
    conn.disconnect()
