"""The synchronous client (an event loop in a background thread) against a real broker."""

from __future__ import annotations

import threading
import time

import pytest

from petrel.client import Connection, Message, NotFound, TransactionRolledBack
from petrel.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("sync-broker")).start()
    yield b
    b.stop()


@pytest.fixture
def conn(shared):
    with Connection(f"tcp://127.0.0.1:{shared.port}", client_id="sync-tests") as c:
        yield c


def drain(consumer, idle: float = 0.3) -> list[Message]:
    out = []
    while (m := consumer.receive(idle)) is not None:
        out.append(m)
    return out


def test_send_and_receive(conn):
    session = conn.session()
    producer = session.producer("queue://sync.basic")
    for i in range(500):
        producer.send(Message(b"%d" % i, {"i": i}))
    session.flush()
    consumer = session.consumer("queue://sync.basic")
    got = drain(consumer)
    assert [m.properties["i"] for m in got] == list(range(500))
    assert consumer.receive(0.05) is None
    assert consumer.receive_no_wait() is None
    consumer.close()


def test_receive_timeout_is_honoured(conn):
    consumer = conn.session().consumer("queue://sync.empty")
    t0 = time.monotonic()
    assert consumer.receive(0.3) is None
    assert 0.25 < time.monotonic() - t0 < 2


def test_wait_for_confirmation_and_queue_admin(conn):
    info = conn.create_queue("sync.admin", exists_ok=True)
    assert info["name"] == "sync.admin"
    conn.session().producer("queue://sync.admin").send(b"x", wait=True)
    assert conn.queue_info("sync.admin")["message_count"] == 1
    conn.delete_queue("sync.admin")
    with pytest.raises(NotFound):
        conn.delete_queue("sync.admin")


def test_listener_runs_in_its_own_thread_and_may_call_the_client(conn):
    session = conn.session()
    relay = session.producer("queue://sync.relayed")
    threads = set()

    def on_message(m: Message) -> None:
        threads.add(threading.current_thread().name)
        relay.send(m.body + b"!", wait=True)  # a blocking call from inside a listener

    consumer = session.consumer("queue://sync.listened")
    consumer.set_listener(on_message)
    producer = session.producer("queue://sync.listened")
    for i in range(20):
        producer.send(b"%d" % i)
    out = session.consumer("queue://sync.relayed")
    got = [out.receive(5).body for _ in range(20)]
    assert got == [b"%d!" % i for i in range(20)]
    assert threads == {"petrel-listener"}
    consumer.close()


def test_failing_listener_gets_the_message_again(conn):
    session = conn.session()
    attempts: list[int] = []

    def flaky(m: Message) -> None:
        attempts.append(m.delivery_count)
        if len(attempts) == 1:
            raise RuntimeError("not this time")

    consumer = session.consumer("queue://sync.flaky")
    consumer.set_listener(flaky)
    session.producer("queue://sync.flaky").send(b"retry me")
    wait_for(lambda: len(attempts) >= 2, 10)
    assert attempts[:2] == [0, 1]
    consumer.close()


def test_client_acks_from_the_application_thread(conn):
    session = conn.session()
    producer = session.producer("queue://sync.acks")
    for i in range(4):
        producer.send(b"%d" % i)
    session.flush()
    consumer = session.consumer("queue://sync.acks", ack="client")
    got = [consumer.receive(5) for _ in range(4)]
    got[0].ack()
    got[2].ack()
    consumer.close()
    again = session.consumer("queue://sync.acks", ack="client")
    rest = drain(again)
    assert [m.body for m in rest] == [b"1", b"3"]
    for m in rest:
        m.ack()
    again.close()
    wait_for(lambda: conn.queue_info("sync.acks") is None or conn.queue_info("sync.acks")["message_count"] == 0, 5)


def test_transactions(conn):
    session = conn.session(transacted=True)
    producer = session.producer("queue://sync.tx")
    producer.send(b"one")
    producer.send(b"two")
    session.rollback()
    producer.send(b"three")
    session.commit()
    consumer = session.consumer("queue://sync.tx")
    first = consumer.receive(5)
    assert first.body == b"three"
    session.rollback()
    again = consumer.receive(5)
    assert again.body == b"three" and again.delivery_count == 1
    session.commit()
    assert consumer.receive(0.2) is None


def test_rollback_returns_prefetched_messages_in_order(conn):
    plain = conn.session()
    producer = plain.producer("queue://sync.prefetched")
    for i in range(10):
        producer.send(b"%d" % i)
    plain.flush()
    session = conn.session(transacted=True)
    consumer = session.consumer("queue://sync.prefetched")
    assert consumer.receive(5).body == b"0"
    wait_for(lambda: len(consumer._items) == 9, 5)
    session.rollback()
    got = [m.body for m in drain(consumer)]
    assert got == [b"%d" % i for i in range(10)]
    session.commit()


def test_commit_after_duplicate_raises(conn):
    session = conn.session(transacted=True)
    producer = session.producer("queue://sync.txdup")
    producer.send(Message(b"a", duplicate_id="sync-d1"))
    session.commit()
    producer.send(Message(b"a", duplicate_id="sync-d1"))
    with pytest.raises(TransactionRolledBack):
        session.commit()


def test_browse(conn):
    session = conn.session()
    producer = session.producer("queue://sync.browse")
    for i in range(30):
        producer.send(b"%d" % i)
    session.flush()
    assert [m.body for m in session.browser("queue://sync.browse", batch=8)] == [b"%d" % i for i in range(30)]
    assert conn.queue_info("sync.browse")["message_count"] == 30


def test_large_message(conn):
    big = b"0123456789abcdef" * 40000
    session = conn.session()
    session.producer("queue://sync.large").send(big, wait=True)
    assert session.consumer("queue://sync.large").receive(10).body == big


def test_window_zero(conn):
    session = conn.session()
    producer = session.producer("queue://sync.w0")
    for i in range(3):
        producer.send(b"%d" % i)
    session.flush()
    consumer = session.consumer("queue://sync.w0", window=0)
    time.sleep(0.2)
    assert conn.queue_info("sync.w0")["delivering_count"] == 0
    assert [consumer.receive(5).body for _ in range(3)] == [b"0", b"1", b"2"]


def test_topic_subscribers_each_get_a_copy(conn):
    session = conn.session()
    a = session.consumer("topic://sync.news")
    b = session.consumer("topic://sync.news", filter="region = 'eu'")
    producer = session.producer("topic://sync.news")
    producer.send(Message(b"eu", {"region": "eu"}))
    producer.send(Message(b"us", {"region": "us"}))
    assert [m.body for m in drain(a)] == [b"eu", b"us"]
    assert [m.body for m in drain(b)] == [b"eu"]


def test_commit_covers_every_message_taken_from_a_prefetched_consumer(conn):
    session = conn.session()
    producer = session.producer("queue://sync.txprefetch")
    for i in range(8):
        producer.send(Message(f"m{i}".encode()))
    session.flush()
    tx = conn.session(transacted=True)
    consumer = tx.consumer("queue://sync.txprefetch")
    taken = [consumer.receive(5).body for _ in range(3)]
    assert taken == [b"m0", b"m1", b"m2"]
    tx.commit()
    tx.close()
    check = conn.session()
    rest = drain(check.consumer("queue://sync.txprefetch"), idle=0.5)
    assert [m.body for m in rest] == [f"m{i}".encode() for i in range(3, 8)]
