"""Real `petrel run` processes driven by stomp.py: the single-broker behaviours users rely on."""

from __future__ import annotations

import contextlib
import queue
import threading
import time

import pytest
import stomp

from conftest import connect, raw, read_until_closed
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system


def test_kill9_during_persistent_sends_loses_no_receipted_message(broker):
    """A sender thread streams 10,000 persistent sends; the broker is killed while it is still
    sending (checked: the kill lands before the last send), and every receipted one survives."""
    total = 10_000
    conn, listener = connect(broker)
    receipted: set[str] = set()
    sent = [0]
    stop = threading.Event()

    def collect():
        while not stop.is_set():
            try:
                receipted.add(listener.receipts.get(timeout=0.1))
            except queue.Empty:
                continue

    def send_all():
        with contextlib.suppress(stomp.exception.StompException, OSError):
            for i in range(total):
                conn.send("/queue/crash", f"m{i}", headers={"persistent": "true", "receipt": f"m{i}"})
                sent[0] = i + 1
                if i % 200 == 199:
                    time.sleep(0.02)  # a steady stream, so the kill finds it mid-way on any machine

    collector = threading.Thread(target=collect, daemon=True)
    sender = threading.Thread(target=send_all, daemon=True)
    collector.start()
    sender.start()
    wait_for(lambda: len(receipted) > 100, 30)
    at_kill = sent[0]
    broker.kill9()
    assert at_kill < total, "the sender finished before the kill: the test did not kill mid-stream"
    sender.join(timeout=30)
    time.sleep(0.3)  # the collector thread picks up receipts already read off the socket
    stop.set()
    collector.join()
    assert len(receipted) > 100
    with contextlib.suppress(stomp.exception.StompException, OSError):
        conn.disconnect()  # the broker is gone: this may fail, and that is expected

    broker.start()
    conn2, l2 = connect(broker)
    conn2.subscribe("/queue/crash", id="1", ack="client-individual")
    got = []
    while True:
        frames = l2.drain(idle=1.0)
        if not frames:
            break
        for f in frames:
            got.append(f.body)
            conn2.ack(f.headers["ack"])
    conn2.disconnect()
    assert len(got) == len(set(got)), "a message was delivered twice"
    missing = receipted - set(got)
    assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"


def test_redelivery_then_dead_letter_queue(broker_factory):
    b = broker_factory('[address_settings."orders"]\nmax_delivery_attempts = 3\n').start()
    conn, listener = connect(b)
    conn.send("/queue/orders", "poison", headers={"persistent": "true"})
    conn.subscribe("/queue/orders", id="1", ack="client-individual")
    for attempt in range(3):
        frame = listener.get()
        assert frame.body == "poison"
        assert (frame.headers.get("redelivered") == "true") == (attempt > 0)
        conn.nack(frame.headers["ack"])
    assert listener.nothing_within(0.5)
    conn.subscribe("/queue/DLQ", id="2", ack="auto")
    dead = listener.get()
    assert dead.body == "poison"
    assert dead.headers["_AMQ_ORIG_ADDRESS"] == "orders"
    assert dead.headers["_AMQ_ORIG_QUEUE"] == "orders"
    conn.disconnect()


def test_expired_message_goes_to_expiry_queue(broker):
    conn, listener = connect(broker)
    expires = int(time.time() * 1000) + 300
    conn.send("/queue/short", "stale", headers={"expires": str(expires), "persistent": "true"})
    conn.send("/queue/short", "fresh", headers={"persistent": "true"})
    wait_for(lambda: time.time() * 1000 > expires + 50, 5)
    conn.subscribe("/queue/short", id="1")
    assert listener.get().body == "fresh"
    conn.subscribe("/queue/ExpiryQueue", id="2")
    expired = listener.get()
    assert expired.body == "stale"
    assert expired.headers["_AMQ_ORIG_ADDRESS"] == "short"
    conn.disconnect()


def test_scheduled_delivery(broker):
    conn, listener = connect(broker)
    conn.subscribe("/queue/later", id="1")
    sent_at = time.time()
    conn.send("/queue/later", "delayed", headers={"AMQ_SCHEDULED_DELAY": "1500"})
    conn.send("/queue/later", "now")
    assert listener.get().body == "now"
    frame = listener.get(timeout=15)
    assert frame.body == "delayed"
    assert time.time() - sent_at >= 1.4
    conn.disconnect()


def test_priorities(broker):
    conn, listener = connect(broker)
    for i, p in enumerate([0, 5, 9, 5, 1]):
        conn.send("/queue/prio", f"{p}-{i}", headers={"priority": str(p), "receipt": f"r{i}"})
    for _ in range(5):
        listener.receipts.get(timeout=10)
    conn.subscribe("/queue/prio", id="1")
    got = [listener.get().body for _ in range(5)]
    assert got == ["9-2", "5-1", "5-3", "1-4", "0-0"]
    conn.disconnect()


def test_selectors_on_queue_and_topic(broker):
    conn, listener = connect(broker)
    conn.subscribe("/topic/prices", id="t", headers={"selector": "symbol = 'ACME' AND price > 10"})
    conn.send("/queue/sel", "a", headers={"kind": "x", "receipt": "1"})
    conn.send("/queue/sel", "b", headers={"kind": "y", "receipt": "2"})
    listener.receipts.get(timeout=10), listener.receipts.get(timeout=10)
    conn.subscribe("/queue/sel", id="q", headers={"selector": "kind = 'y'"})
    assert listener.get().body == "b"
    for sym, price in [("ACME", "5"), ("OTHER", "50"), ("ACME", "12.5")]:
        conn.send("/topic/prices", f"{sym}@{price}", headers={"symbol": sym, "price": price})
    assert listener.get().body == "ACME@12.5"
    assert listener.nothing_within(0.3)
    conn.disconnect()


def test_bad_selector_is_an_error_frame(broker):
    conn, listener = connect(broker)
    conn.subscribe("/queue/x", id="1", headers={"selector": "a >"})
    err = listener.errors.get(timeout=10)
    assert "selector" in err.headers["message"]


def test_transactions_commit_and_abort(broker):
    conn, listener = connect(broker)
    tx = conn.begin()
    conn.send("/queue/tx", "aborted", transaction=tx)
    conn.abort(tx)
    tx = conn.begin()
    conn.send("/queue/tx", "committed", transaction=tx)
    conn.subscribe("/queue/tx", id="1", ack="client-individual")
    assert listener.nothing_within(0.3)
    conn.commit(tx)
    frame = listener.get()
    assert frame.body == "committed"
    # an aborted acknowledgement redelivers
    tx = conn.begin()
    conn.ack(frame.headers["ack"], transaction=tx)
    conn.abort(tx)
    again = listener.get()
    assert again.body == "committed" and again.headers.get("redelivered") == "true"
    tx = conn.begin()
    conn.ack(again.headers["ack"], transaction=tx)
    conn.commit(tx, headers={"receipt": "c"})
    assert listener.receipts.get(timeout=10) == "c"
    conn.disconnect()
    conn2, l2 = connect(broker)
    conn2.subscribe("/queue/tx", id="1")
    assert l2.nothing_within(0.5)
    conn2.disconnect()


def test_durable_subscription_survives_restart(broker):
    conn, listener = connect(broker, client_id="app1")
    conn.subscribe("/topic/events", id="1", ack="client-individual",
                   headers={"durable-subscription-name": "audit"})
    conn.unsubscribe("1")
    conn.disconnect()
    c2, l2 = connect(broker)
    for i in range(3):
        c2.send("/topic/events", f"e{i}", headers={"persistent": "true", "receipt": f"r{i}"})
    for _ in range(3):
        l2.receipts.get(timeout=10)
    c2.disconnect()
    broker.restart()
    c3, l3 = connect(broker, client_id="app1")
    c3.subscribe("/topic/events", id="1", ack="auto", headers={"durable-subscription-name": "audit"})
    assert [l3.get().body for _ in range(3)] == ["e0", "e1", "e2"]
    c3.disconnect()


def test_duplicate_detection_across_restart(broker):
    conn, listener = connect(broker)
    conn.send("/queue/dups", "first", headers={"persistent": "true", "_AMQ_DUPL_ID": "order-1", "receipt": "1"})
    assert listener.receipts.get(timeout=10) == "1"
    conn.disconnect()
    broker.kill9()
    broker.start()
    conn, listener = connect(broker)
    conn.send("/queue/dups", "again", headers={"persistent": "true", "_AMQ_DUPL_ID": "order-1", "receipt": "2"})
    conn.send("/queue/dups", "other", headers={"persistent": "true", "_AMQ_DUPL_ID": "order-2", "receipt": "3"})
    assert listener.receipts.get(timeout=10) == "2"
    conn.subscribe("/queue/dups", id="1")
    assert [listener.get().body for _ in range(2)] == ["first", "other"]
    assert listener.nothing_within(0.3)
    conn.disconnect()


def test_heartbeat_timeout_closes_silent_client(broker):
    s = raw(broker)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:500,0\n\n\x00")
    data = read_until_closed(s, timeout=15)
    assert data.startswith(b"CONNECTED")
    assert data.endswith(b"<closed>"), data


def test_heartbeats_keep_a_live_client_connected(broker):
    conn, listener = connect(broker, heartbeats=(200, 200))
    time.sleep(1.5)  # several heart-beat periods; the client's beats must keep it alive
    conn.send("/queue/hb", "alive", headers={"receipt": "r"})
    assert listener.receipts.get(timeout=10) == "r"
    assert not listener.disconnected
    conn.disconnect()


def test_garbage_gets_error_and_close_while_others_keep_working(broker):
    conn, listener = connect(broker)
    s = raw(broker, broker.stomp_port)
    s.sendall(b"CONNECT\naccept-version:1.2\n\n\x00BOGUS\n\n\x00")
    data = read_until_closed(s)
    assert b"ERROR" in data and b"BOGUS" in data and data.endswith(b"<closed>")
    conn.send("/queue/alive", "still here", headers={"receipt": "1"})
    assert listener.receipts.get(timeout=10) == "1"
    conn.subscribe("/queue/alive", id="1")
    assert listener.get().body == "still here"
    conn.disconnect()


def test_frame_over_size_limit(broker_factory):
    b = broker_factory("max_frame_size = 65536\n").start()
    s = raw(b)
    s.sendall(b"CONNECT\naccept-version:1.2\n\n\x00")
    s.sendall(b"SEND\ndestination:/queue/big\ncontent-length:1000000\n\n" + b"x" * 200_000)
    data = read_until_closed(s)
    assert b"ERROR" in data and data.endswith(b"<closed>")
    conn, listener = connect(b)
    conn.send("/queue/ok", "small", headers={"receipt": "1"})
    assert listener.receipts.get(timeout=10) == "1"
    conn.disconnect()


def test_stomp_versions_and_plain_destination(broker):
    for version in ("1.0", "1.1", "1.2"):
        conn, listener = connect(broker, version=version)
        conn.send(f"/queue/v{version}", f"hello {version}\nline2")
        if version == "1.0":
            conn.subscribe(f"/queue/v{version}", ack="auto")
        else:
            conn.subscribe(f"/queue/v{version}", id="1", ack="auto")
        assert listener.get().body == f"hello {version}\nline2"
        conn.disconnect()


def test_sigterm_exits_zero_and_restarts(broker):
    conn, listener = connect(broker)
    conn.send("/queue/keep", "kept", headers={"persistent": "true", "receipt": "1"})
    assert listener.receipts.get(timeout=10) == "1"
    conn.disconnect()
    assert broker.stop() == 0
    broker.start()
    conn, listener = connect(broker)
    conn.subscribe("/queue/keep", id="1")
    assert listener.get().body == "kept"
    conn.disconnect()


def test_second_broker_on_same_data_dir_is_refused(broker, broker_factory):
    import subprocess
    import sys

    other = broker_factory(name="other")
    other.config_path.write_text(broker.config_path.read_text().replace(str(broker.port), str(other.port))
                                 .replace(str(broker.stomp_port), str(other.stomp_port)))
    proc = subprocess.run([sys.executable, "-m", "petrel", "run", "--config", str(other.config_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "in use by another broker" in proc.stderr
