"""Large messages through real brokers: bodies over min_large_message_size live in
data/large-messages/, stream in and out, and their files are counted back to zero after
acks, expiry, dead-lettering and a crash."""

from __future__ import annotations

import hashlib
import os
import queue
import random
import socket
import threading
import time

import pytest
import stomp

from petrel.codec.stomp import (
    HEARTBEAT,
    NEED_DATA,
    BodyChunk,
    Frame,
    FrameEnd,
    FrameHeader,
    Role,
    StompConnection,
)
from petrel.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.system

MIB = 1 << 20


def files(b: BrokerProcess) -> list[str]:
    try:
        return sorted(os.listdir(b.data_dir / "large-messages"))
    except FileNotFoundError:
        return []


def wait_files(b: BrokerProcess, n: int, timeout: float = 10.0) -> None:
    wait_for(lambda: len(files(b)) == n, timeout, message=f"expected {n} large-message files, have {files(b)}")


def peak_rss_kib(b: BrokerProcess) -> int:
    with open(f"/proc/{b.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def blocks(seed: int, size: int, block: int = MIB):
    """`size` bytes in blocks, without NULs (stomp.py reads NUL-free bodies in linear time)."""
    base = random.Random(seed).randbytes(block).replace(b"\x00", b"\x01")
    for offset in range(0, size, block):
        piece = b"%015d:" % (offset + seed) + base[16:]
        yield piece[: min(block, size - offset)]


def digest(seed: int, size: int) -> str:
    h = hashlib.sha256()
    for piece in blocks(seed, size):
        h.update(piece)
    return h.hexdigest()


class Raw:
    """A STOMP client on Petrel's own codec: streams bodies both ways with little memory."""

    def __init__(self, b: BrokerProcess) -> None:
        self.sock = socket.create_connection(("127.0.0.1", b.stomp_port), timeout=60)
        self.codec = StompConnection(Role.CLIENT, stream_threshold=64 * 1024, max_frame_size=1 << 30)
        self.sock.sendall(self.codec.send(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost",
                                                             "heart-beat": "0,0"})))
        connected = self.event()
        assert connected.command == "CONNECTED", connected

    def event(self):
        while True:
            event = self.codec.next_event()
            if event is NEED_DATA:
                data = self.sock.recv(1 << 20)
                self.codec.receive_data(data)
                if not data:
                    raise ConnectionError("broker closed the connection")
                continue
            if event is HEARTBEAT:
                continue
            return event

    def send(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.sock.sendall(self.codec.send(Frame(command, headers, body)))

    def send_streamed(self, destination: str, seed: int, size: int, headers: dict[str, str]) -> None:
        head = self.codec.send_head(Frame("SEND", {"destination": destination, **headers}), size)
        self.sock.sendall(head)
        for piece in blocks(seed, size):
            self.sock.sendall(piece)
        self.sock.sendall(b"\x00")

    def receipt(self) -> str:
        event = self.event()
        assert isinstance(event, Frame) and event.command == "RECEIPT", event
        return event.headers["receipt-id"]

    def message(self) -> tuple[dict[str, str], str, int]:
        """The next MESSAGE: headers, sha256 of its body, body size."""
        event = self.event()
        h = hashlib.sha256()
        if isinstance(event, Frame):
            assert event.command == "MESSAGE", event
            h.update(event.body)
            return event.headers, h.hexdigest(), len(event.body)
        assert isinstance(event, FrameHeader) and event.command == "MESSAGE", event
        headers = event.headers
        size = 0
        while True:
            event = self.event()
            if isinstance(event, BodyChunk):
                h.update(event.data)
                size += len(event.data)
            else:
                assert isinstance(event, FrameEnd)
                return headers, h.hexdigest(), size

    def close(self) -> None:
        self.sock.close()


class StompPy(stomp.ConnectionListener):
    def __init__(self, b: BrokerProcess) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.receipts: queue.Queue = queue.Queue()
        self.conn = stomp.Connection12([("127.0.0.1", b.stomp_port)], auto_decode=False, heartbeats=(0, 0))
        self.conn.set_listener("l", self)
        self.conn.connect("guest", "guest", wait=True)

    def on_message(self, frame) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame) -> None:
        self.receipts.put(frame.headers["receipt-id"])

    def send(self, destination: str, body: bytes, **headers) -> None:
        receipt = f"r{time.monotonic_ns()}"
        self.conn.send(destination, body, headers={"persistent": "true", **headers}, receipt=receipt)
        assert self.receipts.get(timeout=60) == receipt

    def subscribe(self, destination: str, id: str, ack: str) -> None:
        receipt = f"s{time.monotonic_ns()}"
        self.conn.subscribe(destination, id=id, ack=ack, headers={"receipt": receipt})
        assert self.receipts.get(timeout=30) == receipt

    def get(self, timeout: float = 60.0):
        return self.messages.get(timeout=timeout)

    def ack(self, frame) -> None:
        receipt = f"a{time.monotonic_ns()}"
        self.conn.ack(frame.headers["ack"], receipt=receipt)
        assert self.receipts.get(timeout=30) == receipt

    def nack(self, frame) -> None:
        receipt = f"n{time.monotonic_ns()}"
        self.conn.nack(frame.headers["ack"], receipt=receipt)
        assert self.receipts.get(timeout=30) == receipt


# -- end to end -------------------------------------------------------------------------------


def test_50_mib_message_end_to_end_with_stomp_py(broker_factory):
    b = broker_factory().start()
    body = b"".join(blocks(1, 50 * MIB))
    expected = hashlib.sha256(body).hexdigest()
    producer = StompPy(b)
    producer.send("/queue/big", body)
    del body
    names = files(b)
    assert len(names) == 1 and names[0].endswith(".msg")
    assert os.path.getsize(b.data_dir / "large-messages" / names[0]) == 50 * MIB
    # the body is not in the journal
    journal = sum(os.path.getsize(p) for p in (b.data_dir / "journal").iterdir())
    assert journal < 50 * MIB

    consumer = StompPy(b)
    consumer.conn.subscribe("/queue/big", id="s", ack="client-individual")
    frame = consumer.get()
    assert hashlib.sha256(frame.body).hexdigest() == expected
    assert frame.headers["content-length"] == str(50 * MIB)
    consumer.ack(frame)
    wait_files(b, 0)
    producer.conn.disconnect()
    consumer.conn.disconnect()


def test_ten_50_mib_messages_in_parallel_keep_memory_bounded(broker_factory):
    b = broker_factory().start()
    n, size = 10, 50 * MIB
    results: dict[int, tuple[str, int]] = {}
    errors: list[BaseException] = []
    subscribed = threading.Barrier(n + 1)

    def consume(i: int) -> None:
        try:
            c = Raw(b)
            c.send("SUBSCRIBE", {"destination": f"/queue/par{i}", "id": "s", "ack": "auto", "receipt": "sub"})
            assert c.receipt() == "sub"
            subscribed.wait(30)
            _, sha, got = c.message()
            results[i] = (sha, got)
            c.close()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            subscribed.abort()

    def produce(i: int) -> None:
        try:
            c = Raw(b)
            c.send_streamed(f"/queue/par{i}", 100 + i, size, {"persistent": "true", "receipt": f"p{i}"})
            assert c.receipt() == f"p{i}"
            c.close()
        except BaseException as exc:
            errors.append(exc)

    consumers = [threading.Thread(target=consume, args=(i,)) for i in range(n)]
    for t in consumers:
        t.start()
    subscribed.wait(30)
    producers = [threading.Thread(target=produce, args=(i,)) for i in range(n)]
    for t in producers:
        t.start()
    for t in producers + consumers:
        t.join(240)
    assert not errors, errors
    assert sorted(results) == list(range(n))
    for i in range(n):
        assert results[i] == (digest(100 + i, size), size)
    peak = peak_rss_kib(b)
    print(f"broker peak RSS with {n} x 50 MiB in parallel: {peak / 1024:.0f} MiB")
    assert peak < 400 * 1024, f"peak RSS {peak / 1024:.0f} MiB"
    wait_files(b, 0)


# -- files counted to zero -----------------------------------------------------------------------


def test_files_go_when_every_queue_acknowledged(broker_factory):
    b = broker_factory().start()
    subs = [StompPy(b) for _ in range(2)]
    for i, s in enumerate(subs):
        s.subscribe("/topic/news", f"t{i}", "client-individual")
    q = StompPy(b)
    q.subscribe("/queue/work", "q", "client")
    producer = StompPy(b)
    for i in range(3):
        producer.send("/queue/work", b"".join(blocks(10 + i, 300_000)))
    producer.send("/topic/news", b"".join(blocks(20, 400_000)))
    # 3 queue messages + 1 topic message shared by two subscriptions
    wait_files(b, 4)
    got = [q.get() for _ in range(3)]
    assert [hashlib.sha256(f.body).hexdigest() for f in got] == [digest(10 + i, 300_000) for i in range(3)]
    q.ack(got[-1])  # client mode: cumulative
    wait_files(b, 1)
    first, second = subs[0].get(), subs[1].get()
    assert hashlib.sha256(first.body).hexdigest() == digest(20, 400_000)
    subs[0].ack(first)
    time.sleep(0.3)
    assert len(files(b)) == 1  # the other subscription still holds it
    subs[1].ack(second)
    wait_files(b, 0)


def test_small_messages_make_no_files(broker_factory):
    b = broker_factory().start()
    p = StompPy(b)
    p.send("/queue/small", b"x" * 100 * 1024)  # exactly the limit: still small
    p.conn.subscribe("/queue/small", id="s", ack="auto")
    assert len(p.get().body) == 100 * 1024
    assert files(b) == []


def test_files_go_after_expiry(broker_factory):
    b = broker_factory("message_expiry_scan_period = 100\n"
                       '[address_settings."drop.#"]\nexpiry_address = ""\n').start()
    p = StompPy(b)
    soon = str(int(time.time() * 1000) + 300)
    p.send("/queue/expiring", b"".join(blocks(30, 500_000)), expires=soon)
    p.send("/queue/drop.me", b"".join(blocks(31, 500_000)), expires=soon)
    assert len(files(b)) == 2
    # nobody reads them: the scan expires both; one copy goes to ExpiryQueue, the other nowhere
    wait_for(lambda: int(time.time() * 1000) > int(soon), 5)
    wait_files(b, 1, timeout=10)
    c = StompPy(b)
    c.conn.subscribe("/queue/ExpiryQueue", id="e", ack="client-individual")
    frame = c.get()
    assert frame.headers["_AMQ_ORIG_ADDRESS"] == "expiring"
    assert hashlib.sha256(frame.body).hexdigest() == digest(30, 500_000)
    c.ack(frame)
    wait_files(b, 0)


def test_files_go_after_dead_lettering(broker_factory):
    b = broker_factory('[address_settings."orders"]\nmax_delivery_attempts = 2\n').start()
    p = StompPy(b)
    p.send("/queue/orders", b"".join(blocks(40, 2 * MIB)))
    p.conn.subscribe("/queue/orders", id="o", ack="client-individual")
    for _ in range(2):
        frame = p.get()
        assert hashlib.sha256(frame.body).hexdigest() == digest(40, 2 * MIB)
        p.nack(frame)
    c = StompPy(b)
    c.conn.subscribe("/queue/DLQ", id="d", ack="client-individual")
    dead = c.get()
    assert dead.headers["_AMQ_ORIG_QUEUE"] == "orders"
    assert hashlib.sha256(dead.body).hexdigest() == digest(40, 2 * MIB)
    assert len(files(b)) == 1  # the dead-letter copy's own file; the original's went
    c.ack(dead)
    wait_files(b, 0)


def test_aborted_transaction_and_unrouted_send_leave_no_files(broker_factory):
    b = broker_factory().start()
    c = Raw(b)
    c.send("BEGIN", {"transaction": "t1"})
    c.send_streamed("/queue/txq", 50, 300_000, {"transaction": "t1", "persistent": "true"})
    wait_files(b, 1)
    c.send("ABORT", {"transaction": "t1", "receipt": "a"})
    assert c.receipt() == "a"
    c.send_streamed("/topic/nobody", 51, 300_000, {"persistent": "true", "receipt": "u"})
    assert c.receipt() == "u"
    wait_files(b, 0)
    # refused after the body arrived: no destination
    c.sock.sendall(c.codec.send_head(Frame("SEND", {"persistent": "true"}), 300_000) + b"d" * 300_000 + b"\x00")
    error = c.event()
    assert error.command == "ERROR" and "destination" in error.headers["message"]
    c.close()
    # a client that goes away halfway through a body
    c = Raw(b)
    c.sock.sendall(c.codec.send_head(Frame("SEND", {"destination": "/queue/gone"}), 1_000_000) + b"g" * 400_000)
    wait_for(lambda: files(b) != [], 10)
    c.close()
    wait_files(b, 0)


def test_body_without_content_length_streams_too(broker_factory):
    b = broker_factory().start()
    c = Raw(b)
    body = b"".join(blocks(60, 3 * MIB))
    c.sock.sendall(b"SEND\ndestination:/queue/nocl\npersistent:true\nreceipt:n\n\n" + body + b"\x00")
    assert c.receipt() == "n"
    assert len(files(b)) == 1
    c.send("SUBSCRIBE", {"destination": "/queue/nocl", "id": "s", "ack": "auto"})
    _, sha, size = c.message()
    assert (sha, size) == (hashlib.sha256(body).hexdigest(), len(body))
    wait_files(b, 0)
    c.close()


# -- crashes and restarts --------------------------------------------------------------------------


def test_kill_9_while_a_large_message_arrives(broker_factory):
    b = broker_factory().start()
    c = Raw(b)
    c.send_streamed("/queue/crash", 70, 2 * MIB, {"persistent": "true", "receipt": "kept"})
    assert c.receipt() == "kept"
    kept = files(b)
    assert len(kept) == 1
    # the next one is half sent when the broker dies
    c.sock.sendall(c.codec.send_head(Frame("SEND", {"destination": "/queue/crash", "persistent": "true",
                                                    "receipt": "lost"}), 8 * MIB))
    for piece in list(blocks(71, 4 * MIB)):
        c.sock.sendall(piece)
    wait_for(lambda: any(n.endswith(".tmp") for n in files(b)), 10)
    wait_for(lambda: sum(os.path.getsize(b.data_dir / "large-messages" / n) for n in files(b)
                         if n.endswith(".tmp")) > 0, 10)
    b.kill9()
    c.close()
    # and a file whose journal record never made it (a crash between file and record)
    (b.data_dir / "large-messages" / "999999999.msg").write_bytes(b"orphan")
    assert len(files(b)) == 3
    b.start()
    assert files(b) == kept
    log = b.log()
    assert "999999999.msg removed" in log and ".msg.tmp removed" in log
    c = Raw(b)
    c.send("SUBSCRIBE", {"destination": "/queue/crash", "id": "s", "ack": "client-individual"})
    headers, sha, size = c.message()
    assert (sha, size) == (digest(70, 2 * MIB), 2 * MIB)
    c.send("ACK", {"id": headers["ack"], "receipt": "acked"})
    assert c.receipt() == "acked"
    wait_files(b, 0)
    c.close()


def test_non_persistent_large_messages_do_not_outlive_the_broker(broker_factory):
    b = broker_factory().start()
    p = StompPy(b)
    p.conn.send("/queue/np", b"".join(blocks(80, 400_000)), headers={"persistent": "false"}, receipt="np")
    assert p.receipts.get(timeout=30) == "np"
    assert len(files(b)) == 1
    p.conn.disconnect()
    assert b.stop() == 0
    b.start()
    assert files(b) == []


def test_persistent_large_message_survives_a_restart(broker_factory):
    b = broker_factory().start()
    p = StompPy(b)
    p.send("/queue/keep", b"".join(blocks(90, 1 * MIB)))
    p.conn.disconnect()
    b.kill9()
    b.start()
    c = StompPy(b)
    c.conn.subscribe("/queue/keep", id="k", ack="client-individual")
    frame = c.get()
    assert hashlib.sha256(frame.body).hexdigest() == digest(90, 1 * MIB)
    c.ack(frame)
    wait_files(b, 0)
