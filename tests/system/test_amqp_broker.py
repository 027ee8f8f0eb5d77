"""AMQP 1.0 through real `petrel run` processes with python-qpid-proton: queues and topics,
at-least-once through kill -9, dispositions (rejected, released, modified), durable
subscriptions across a restart, large messages over many frames, AMQP <-> STOMP, and a
malformed frame refused while another client keeps working."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
import stomp
from proton import Message
from proton.reactor import Container, DurableSubscription
from proton.utils import BlockingConnection, LinkDetached

from conftest import Listener
from petrel.testing.process import BrokerProcess, free_port, wait_for


def connect(b: BrokerProcess, port: int | None = None, container_id: str | None = None, **kw) -> BlockingConnection:
    container = Container(container_id=container_id) if container_id else None
    return BlockingConnection(f"amqp://127.0.0.1:{port or b.port}", timeout=20, container=container, **kw)


def drain(receiver, timeout: float = 2.0) -> list[Message]:
    """Every message the receiver gets until none comes for `timeout` seconds (accepted)."""
    got = []
    while True:
        try:
            m = receiver.receive(timeout=timeout)
        except Exception:  # proton.Timeout
            return got
        receiver.accept()
        got.append(m)


def abandon(c: BlockingConnection) -> None:
    """Let go of a connection whose broker was killed (a close would wait its whole timeout)."""
    c.timeout = 0.5
    try:
        c.close()
    except Exception:
        pass


@pytest.fixture
def broker(broker_factory):
    return broker_factory(settings=f"amqp_port = {free_port()}\n").start()


def amqp_port(b: BrokerProcess) -> int:
    for line in b.config_path.read_text().splitlines():
        if line.startswith("amqp_port"):
            return int(line.split("=")[1])
    raise AssertionError("no amqp_port")


@pytest.mark.parametrize("own_port", [False, True], ids=["all-protocols-port", "amqp_port"])
def test_queue_send_receive_with_properties(broker, own_port):
    c = connect(broker, amqp_port(broker) if own_port else None)
    try:
        s = c.create_sender("queue://orders")
        s.send(Message(body="hello", durable=True, priority=7, properties={"k": "v", "n": 3, "f": 1.5, "b": True},
                       correlation_id="corr-1", subject="subj", reply_to="queue://replies", id="m-1",
                       content_type="text/plain", ttl=60))
        s.send(Message(body=b"\x00binary\xff"))
        r = c.create_receiver("queue://orders")
        m = r.receive(timeout=10)
        r.accept()
        assert m.body == "hello"
        assert (m.durable, m.priority, m.properties) == (True, 7, {"k": "v", "n": 3, "f": 1.5, "b": True})
        assert (m.correlation_id, m.subject, m.reply_to, m.id, m.content_type) == (
            "corr-1", "subj", "queue://replies", "m-1", "text/plain")
        assert m.expiry_time > time.time()  # ttl became an absolute expiry
        m2 = r.receive(timeout=10)
        r.accept()
        assert m2.body == b"\x00binary\xff"
        assert drain(r, 0.5) == []
    finally:
        c.close()


def test_plain_names_and_capabilities_follow_the_address(broker):
    c = connect(broker)
    try:
        # a plain name: the address decides (anycast by default), both sides agree
        s = c.create_sender("plain.q")
        r = c.create_receiver("plain.q")
        s.send(Message(body="x"))
        assert r.receive(timeout=10).body == "x"
        r.accept()
    finally:
        c.close()


def test_topic_fans_out_to_each_subscriber(broker):
    c = connect(broker)
    try:
        r1 = c.create_receiver("topic://news", name="r1")
        r2 = c.create_receiver("topic://news", name="r2")
        s = c.create_sender("topic://news")
        for i in range(3):
            s.send(Message(body=f"n{i}"))
        for r in (r1, r2):
            assert [m.body for m in drain(r, 1.0)] == ["n0", "n1", "n2"]
    finally:
        c.close()


def test_at_least_once_survives_kill_9(broker_factory):
    """Every send proton saw settled (accepted after the broker's sync) is there after kill -9."""
    b = broker_factory().start()
    c = connect(b)
    s = c.create_sender("queue://durable.q")
    for i in range(200):
        s.send(Message(body=f"m{i}", durable=True))  # blocks until the broker's accepted disposition
    b.kill9()
    abandon(c)
    b.start()
    c = connect(b)
    try:
        r = c.create_receiver("queue://durable.q", credit=50)
        assert [m.body for m in drain(r)] == [f"m{i}" for i in range(200)]
    finally:
        c.close()


def test_unacknowledged_delivery_returns_after_the_consumer_goes(broker):
    c = connect(broker)
    s = c.create_sender("queue://held")
    s.send(Message(body="once", durable=True))
    r = c.create_receiver("queue://held")
    assert r.receive(timeout=10).body == "once"  # not settled
    c.close()
    c = connect(broker)
    try:
        r = c.create_receiver("queue://held")
        m = r.receive(timeout=10)
        r.accept()
        assert m.body == "once" and m.delivery_count == 1
    finally:
        c.close()


def test_rejected_goes_to_the_dead_letter_queue(broker):
    c = connect(broker)
    try:
        c.create_sender("queue://work").send(Message(body="poison", properties={"p": 1}))
        r = c.create_receiver("queue://work")
        assert r.receive(timeout=10).body == "poison"
        r.reject()
        dlq = c.create_receiver("DLQ")
        m = dlq.receive(timeout=10)
        dlq.accept()
        assert m.body == "poison" and m.properties["p"] == 1
        assert m.properties["_AMQ_ORIG_ADDRESS"] == "work"
        assert drain(r, 0.5) == []
    finally:
        c.close()


def test_released_and_modified_redeliver(broker):
    c = connect(broker)
    try:
        c.create_sender("queue://again").send(Message(body="m"))
        r = c.create_receiver("queue://again")
        m = r.receive(timeout=10)
        assert m.delivery_count == 0
        r.release(delivered=False)  # released: not counted as a delivery
        m = r.receive(timeout=10)
        assert m.body == "m" and m.delivery_count == 0
        for delivery in r.fetcher.unsettled:
            delivery.local.failed = True
        r.release(delivered=True)  # modified with delivery-failed: counted
        m = r.receive(timeout=10)
        assert m.body == "m" and m.delivery_count == 1
        r.release(delivered=True)  # modified without delivery-failed: back, not counted
        m = r.receive(timeout=10)
        assert m.body == "m" and m.delivery_count == 1
        r.accept()
        assert drain(r, 0.5) == []
    finally:
        c.close()


def test_durable_subscription_survives_a_restart(broker_factory):
    b = broker_factory().start()
    c = connect(b, container_id="client-a")
    r = c.create_receiver("topic://prices", name="sub1", options=DurableSubscription())
    r.detach()  # leaves the subscription (closing it would end it)
    s = c.create_sender("topic://prices")
    for i in range(5):
        s.send(Message(body=f"p{i}", durable=True))
    c.close()
    b.kill9()
    b.start()
    c = connect(b, container_id="client-a")
    try:
        r = c.create_receiver("topic://prices", name="sub1", options=DurableSubscription())
        assert [m.body for m in drain(r)] == [f"p{i}" for i in range(5)]
        r.close()  # closing the link ends the durable subscription
        with pytest.raises(LinkDetached, match="amqp:not-found"):
            c.create_receiver(None, name="sub1")  # Qpid JMS's look-up of a subscription by name
    finally:
        c.close()


def test_a_large_message_goes_over_many_frames_to_its_own_file_and_survives_kill_9(broker_factory):
    b = broker_factory().start()
    body = bytes(range(256)) * 12 * 1024  # 3 MiB, the broker's frames are 256 KiB
    c = connect(b)
    c.create_sender("queue://big").send(Message(body=body, durable=True))
    files = list((b.data_dir / "large-messages").glob("*.msg"))
    assert len(files) == 1 and files[0].stat().st_size == len(body)  # not in the journal, not in memory
    b.kill9()
    abandon(c)
    b.start()
    c = connect(b)
    try:
        r = c.create_receiver("queue://big")
        m = r.receive(timeout=30)
        r.accept()
        assert m.body == body
        c.create_sender("queue://other")  # a round trip: the acceptance is out
        wait_for(lambda: not list((b.data_dir / "large-messages").glob("*.msg")), 10)  # gone once acknowledged
    finally:
        c.close()


def stomp_client(b: BrokerProcess):
    conn = stomp.Connection12([("127.0.0.1", b.stomp_port)], heartbeats=(0, 0))
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect(wait=True)
    return conn, listener


def test_amqp_to_stomp_and_back(broker):
    conn, listener = stomp_client(broker)
    c = connect(broker)
    try:
        conn.subscribe("/queue/x.stomp", id="1", ack="auto")
        before = int(time.time() * 1000)
        c.create_sender("queue://x.stomp").send(Message(body="from amqp", priority=8, durable=True, ttl=600,
                                                        properties={"color": "red"}, correlation_id="c9"))
        frame = listener.messages.get(timeout=10)
        assert frame.body == "from amqp"
        assert frame.headers["priority"] == "8" and frame.headers["persistent"] == "true"
        assert frame.headers["color"] == "red" and frame.headers["correlation-id"] == "c9"
        assert before + 600_000 <= int(frame.headers["expires"]) <= int(time.time() * 1000) + 600_000

        r = c.create_receiver("queue://x.amqp")
        expires = int(time.time() * 1000) + 900_000
        conn.send("/queue/x.amqp", "from stomp", headers={"priority": "6", "persistent": "true", "shape": "round",
                                                          "correlation-id": "c10", "content-type": "text/plain",
                                                          "expires": str(expires)})
        m = r.receive(timeout=10)
        r.accept()
        assert m.body == b"from stomp"
        assert (m.priority, m.durable, m.properties["shape"], m.correlation_id, m.content_type) == (
            6, True, "round", "c10", "text/plain")
        assert m.expiry_time == expires / 1000
    finally:
        c.close()
        conn.disconnect()


def _frame(body: bytes) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, 0, 0) + body


def test_a_malformed_frame_gets_its_error_and_others_keep_working(broker):
    good = connect(broker)
    try:
        s = good.create_sender("queue://steady")
        r = good.create_receiver("queue://steady")
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
            raw.sendall(b"AMQP\x00\x01\x00\x00" + _frame(b"\x00\x53\x10\xc0\x03\x01\xa1\x01c")  # open
                        + _frame(b"\x00\x53\x11\xc0\x05\x03\x40\xff\xff\xff"))  # begin with a bad format code
            data = b""
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                chunk = raw.recv(65536)
                if not chunk:
                    break
                data += chunk
        assert data.startswith(b"AMQP\x00\x01\x00\x00")
        assert b"amqp:decode-error" in data
        s.send(Message(body="still here"))
        assert r.receive(timeout=10).body == "still here"
        r.accept()
    finally:
        good.close()


def test_attach_to_an_unknown_queue_is_refused_with_not_found(broker_factory):
    b = broker_factory(settings='[address_settings."fixed.#"]\nauto_create_addresses = false\nauto_create_queues = false\n').start()
    c = connect(b)
    try:
        with pytest.raises(LinkDetached) as info:
            c.create_receiver("queue://fixed.none")
        assert "amqp:not-found" in str(info.value)
    finally:
        c.close()


def test_kill_9_while_sending_loses_nothing_that_was_accepted(broker_factory):
    """A producer sends durable messages one after another while the broker is killed: every
    message proton saw accepted is there after the restart (at most the unconfirmed one more)."""
    b = broker_factory().start()
    accepted: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        c = connect(b)
        try:
            s = c.create_sender("queue://inflight")
            i = 0
            while not stop.is_set():
                s.send(Message(body=f"i{i}", durable=True))
                accepted.append(f"i{i}")
                i += 1
        except Exception:
            pass  # the broker died under it
        finally:
            abandon(c)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    wait_for(lambda: len(accepted) >= 100, 30)
    b.kill9()
    stop.set()
    producer.join(30)
    confirmed = list(accepted)
    b.start()
    c = connect(b)
    try:
        got = [m.body for m in drain(c.create_receiver("queue://inflight", credit=200))]
    finally:
        c.close()
    assert got[:len(confirmed)] == confirmed
    assert len(got) <= len(confirmed) + 1  # the one in flight may or may not have been stored
