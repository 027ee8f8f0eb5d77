"""The CORE protocol end to end: petrel.client (asyncio API) against a real broker process.

One broker serves the whole module (each test uses its own queue names); tests that kill
or restart a broker start their own.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from petrel.client import (
    AlreadyExists,
    ConnectionFailed,
    Message,
    NotFound,
    RequestFailed,
    SendFailed,
    TransactionRolledBack,
    connect,
)
from petrel.codec.core import PREAMBLE, Connect, CoreConnection, Role, credit_of
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("core-broker"))
    b.start()
    yield b
    b.stop()


def run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def url(b: BrokerProcess) -> str:
    return f"tcp://127.0.0.1:{b.port}"


async def drain(consumer, idle: float = 0.3) -> list[Message]:
    out = []
    while (m := await consumer.receive(idle)) is not None:
        out.append(m)
    return out


# -- connecting ---------------------------------------------------------------------------------


def test_connect_handshake_and_topology(shared):
    async def go():
        async with await connect(url(shared), user="guest", password="guest", client_id="c-1") as conn:
            assert conn.connected and conn.node_id and conn.server.startswith("Petrel/")
            assert [(m.node_id, m.live, m.backup) for m in conn.topology] == [
                (conn.node_id, f"127.0.0.1:{shared.port}", None)]
            assert conn.endpoint.port == shared.port

    run(go())


def test_core_is_not_spoken_on_the_stomp_only_port(shared):
    async def go():
        with pytest.raises(ConnectionFailed):
            await connect(f"tcp://127.0.0.1:{shared.stomp_port}", connect_timeout=5)

    run(go())


def test_nothing_listening_fails_fast():
    async def go():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with pytest.raises(ConnectionFailed, match=str(port)):
            await connect(f"tcp://127.0.0.1:{port}")

    run(go())


def test_client_id_names_durable_subscriptions(shared):
    async def go():
        async with await connect(url(shared), client_id="app-7") as conn:
            session = await conn.session()
            consumer = await session.consumer("topic://prices", subscription="ticker")
            assert consumer.queue == "app-7.ticker"
            info = await conn.queue_info("app-7.ticker")
            assert info["durable"] and info["routing_type"] == "MULTICAST"
            await session.producer("topic://prices").send(b"42", wait=True)
            assert (await consumer.receive(5)).body == b"42"
            await consumer.close()
            await conn.delete_queue("app-7.ticker")

    run(go())


# -- addresses and queues -------------------------------------------------------------------------


def test_create_and_delete_addresses_and_queues(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            await conn.create_address("admin.a", ("ANYCAST", "MULTICAST"))
            info = await conn.address_info("admin.a")
            assert info["routing_types"] == ["ANYCAST", "MULTICAST"] and info["queues"] == []
            q = await conn.create_queue("admin.q1", "admin.a", "ANYCAST", filter="color = 'red'")
            assert q["name"] == "admin.q1" and q["filter"] == "color = 'red'" and q["durable"]
            with pytest.raises(AlreadyExists):
                await conn.create_queue("admin.q1", "admin.a")
            again = await conn.create_queue("admin.q1", "admin.a", exists_ok=True)
            assert again["name"] == "admin.q1"
            assert (await conn.address_info("admin.a"))["queues"] == ["admin.q1"]
            session = await conn.session()
            producer = session.producer("queue://admin.a")
            await producer.send(Message(b"r", {"color": "red"}))
            await producer.send(Message(b"b", {"color": "blue"}))
            await session.flush()
            assert (await conn.queue_info("admin.q1"))["message_count"] == 1  # the filter applies
            await conn.delete_queue("admin.q1")
            assert await conn.queue_info("admin.q1") is None
            with pytest.raises(NotFound):
                await conn.delete_queue("admin.q1")
            await conn.delete_address("admin.a")
            assert await conn.address_info("admin.a") is None
            with pytest.raises(NotFound):
                await conn.delete_address("admin.a")

    run(go())


def test_queue_attributes_and_bad_requests(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            info = await conn.create_queue("attr.lvq", last_value_key="sym", exclusive=True)
            assert info["last_value_key"] == "sym" and info["exclusive"] is True
            session = await conn.session()
            producer = session.producer("queue://attr.lvq")
            for price in ("1", "2", "3"):
                await producer.send(Message(price, {"sym": "ACME"}))
            await session.flush()
            assert (await conn.queue_info("attr.lvq"))["message_count"] == 1  # last value wins
            with pytest.raises(RequestFailed, match="unknown queue attribute"):
                await conn.create_queue("attr.bad", colour="blue")
            with pytest.raises(RequestFailed, match="selector|filter|token|parse|unexpected"):
                await session.consumer("queue://attr.lvq", filter="this is not ( a selector")
            await session.producer("queue://attr.ok").send(b"still fine", wait=True)

    run(go())


def test_consuming_a_missing_queue_by_name_fails(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            with pytest.raises(NotFound, match="no-such-queue"):
                await session.consumer("no-such-queue")
            # the session still works
            await session.producer("queue://after.missing").send(b"ok", wait=True)

    run(go())


# -- sending and receiving --------------------------------------------------------------------------


def test_every_message_field_round_trips(shared):
    props = {"s": "text", "i": -5, "big": 2**62, "f": 2.5, "t": True, "n": None, "raw": b"\x00\xff"}

    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            now = int(time.time() * 1000)
            sent = Message(b"\x00body\xff", props, durable=True, priority=7, expiration=now + 600_000,
                           timestamp=now - 5, duplicate_id="dup-round-trip")
            await session.producer("queue://fields").send(sent, wait=True)
            consumer = await session.consumer("queue://fields")
            got = await consumer.receive(5)
            assert got.body == sent.body
            assert {k: got.properties[k] for k in props} == props
            assert got.duplicate_id == "dup-round-trip"
            assert (got.durable, got.priority, got.expiration, got.timestamp) == (True, 7, now + 600_000, now - 5)
            assert got.address == "fields" and got.message_id > 0 and got.delivery_count == 0
            non_durable = Message("plain", durable=False)
            await session.producer("queue://fields").send(non_durable)
            got = await consumer.receive(5)
            assert got.text == "plain" and not got.durable and got.timestamp > 0

    run(go())


def test_messages_arrive_in_order_and_priority_first(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://order")
            for i in range(200):
                await producer.send(str(i), durable=False)
            await producer.send("urgent", priority=9, durable=False)
            await session.flush()
            consumer = await session.consumer("queue://order")
            bodies = [m.text for m in await drain(consumer)]
            assert bodies == ["urgent"] + [str(i) for i in range(200)]

    run(go())


def test_scheduled_and_expired_messages(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://timed")
            t0 = time.monotonic()
            await producer.send(Message(b"later", delay=400))
            await producer.send(Message(b"stale", expiration=int(time.time() * 1000) - 1000))
            await producer.send(Message(b"now"))
            await session.flush()
            consumer = await session.consumer("queue://timed")
            assert (await consumer.receive(5)).body == b"now"
            later = await consumer.receive(5)
            assert later.body == b"later" and time.monotonic() - t0 >= 0.35
            assert await consumer.receive(0.2) is None  # the expired one never comes

    run(go())


def test_duplicate_ids_are_dropped_by_the_broker(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://dups")
            for _ in range(3):
                await producer.send(Message(b"once", duplicate_id="the-one"))
            await producer.send(Message(b"other", duplicate_id="another"))
            await session.flush()
            assert (await conn.queue_info("dups"))["message_count"] == 2

    run(go())


def test_send_failure_is_reported(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://fail.me")
            with pytest.raises(SendFailed, match="needs a name"):
                await producer.send(Message(b"x"), destination="queue://", wait=True)
            await producer.send(Message(b"y"), destination="queue://")
            with pytest.raises(SendFailed):
                await session.flush()
            await session.flush()  # reported once
            await producer.send(b"fine", wait=True)

    run(go())


def test_unsendable_property_is_a_value_error(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            with pytest.raises(ValueError, match="scalars"):
                await session.producer("queue://bad.props").send(Message(b"x", {"list": [1, 2]}))
            assert session.unconfirmed == 0
            await session.producer("queue://bad.props").send(b"ok", wait=True)

    run(go())


# -- confirmation window ---------------------------------------------------------------------------


def test_durable_sends_are_confirmed_and_survive_kill9(tmp_path):
    b = BrokerProcess(tmp_path / "b").start()
    try:
        async def send():
            async with await connect(url(b), confirmation_window=16 * 1024) as conn:
                session = await conn.session()
                producer = session.producer("queue://kept")
                for i in range(2000):
                    await producer.send(Message(str(i).encode() * 10))
                    assert session._unconfirmed_bytes <= 16 * 1024 + 40
                await session.flush()
                assert session.unconfirmed == 0

        run(send())
        b.kill9()
        b.start()

        async def receive():
            async with await connect(url(b)) as conn:
                consumer = await (await conn.session()).consumer("queue://kept")
                return [m.body for m in await drain(consumer)]

        assert run(receive()) == [str(i).encode() * 10 for i in range(2000)]
    finally:
        b.stop()


# -- consumers: credit, acks --------------------------------------------------------------------------


def test_consumer_window_limits_what_the_broker_sends(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://credit")
            for i in range(100):
                await producer.send(b"x" * 1000, durable=False)
            await session.flush()
            window = 10 * credit_of(1000)
            consumer = await session.consumer("queue://credit", window=window)
            await wait_until(lambda: consumer.buffered >= 10)
            await asyncio.sleep(0.2)
            assert consumer.buffered == 10
            assert (await conn.queue_info("credit"))["delivering_count"] == 10
            got = await drain(consumer)
            assert len(got) == 100

    run(go())


def test_window_zero_takes_one_message_at_a_time(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://slow")
            for i in range(5):
                await producer.send(str(i), durable=False)
            await session.flush()
            consumer = await session.consumer("queue://slow", window=0, ack="client")
            await asyncio.sleep(0.2)
            assert consumer.buffered == 0
            assert (await conn.queue_info("slow"))["delivering_count"] == 0
            first = await consumer.receive(5)
            assert first.text == "0"
            await asyncio.sleep(0.2)
            assert consumer.buffered == 0
            assert (await conn.queue_info("slow"))["delivering_count"] == 1
            rest = [(await consumer.receive(5)).text for _ in range(4)]
            assert rest == ["1", "2", "3", "4"]
            assert await consumer.receive(0.2) is None

    run(go())


async def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.01)


def test_listener_gets_pushed_messages(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            consumer = await session.consumer("queue://pushed")
            got: list[str] = []
            consumer.set_listener(lambda m: got.append(m.text))
            for i in range(50):
                await session.producer("queue://pushed").send(str(i), durable=False)
            await wait_until(lambda: len(got) == 50)
            assert got == [str(i) for i in range(50)]

            seen: list[str] = []

            async def slow(m: Message) -> None:
                await asyncio.sleep(0)
                seen.append(m.text)

            second = await session.consumer("queue://pushed.async")
            second.set_listener(slow)
            for i in range(20):
                await session.producer("queue://pushed.async").send(str(i), durable=False)
            await wait_until(lambda: len(seen) == 20)
            assert seen == [str(i) for i in range(20)]
            await wait_until(lambda: True)
            await asyncio.sleep(0.1)
            assert (await conn.queue_info("pushed"))["message_count"] == 0

    run(go())


def test_individual_and_cumulative_acks(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://acks")
            for i in range(6):
                await producer.send(str(i))
            await session.flush()
            consumer = await session.consumer("queue://acks", ack="client")
            got = [await consumer.receive(5) for _ in range(6)]
            got[1].ack()                      # individual: only "1"
            assert await consumer.ack(got[3], cumulative=True) == 3  # "0", "2", "3"
            await consumer.close()            # "4" and "5" were never acked
            again = await session.consumer("queue://acks", ack="client")
            redelivered = await drain(again)
            assert [m.text for m in redelivered] == ["4", "5"]
            assert all(m.delivery_count == 1 and m.redelivered for m in redelivered)
            for m in redelivered:
                m.ack()
            await asyncio.sleep(0.1)
            assert (await conn.queue_info("acks"))["message_count"] == 0

    run(go())


def test_nack_redelivers_with_a_higher_delivery_count(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            await session.producer("queue://nacks").send(b"again", wait=True)
            consumer = await session.consumer("queue://nacks", ack="client")
            first = await consumer.receive(5)
            first.nack()
            second = await consumer.receive(5)
            assert second.message_id == first.message_id and second.delivery_count == 1
            second.ack()

    run(go())


def test_closed_consumer_gives_back_prefetched_messages_in_order(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://prefetch")
            for i in range(10):
                await producer.send(str(i))
            await session.flush()
            consumer = await session.consumer("queue://prefetch")
            await wait_until(lambda: consumer.buffered == 10)
            assert (await consumer.receive(1)).text == "0"
            await consumer.close()
            again = await session.consumer("queue://prefetch")
            got = await drain(again)
            assert [m.text for m in got] == [str(i) for i in range(1, 10)]
            assert all(m.delivery_count == 0 for m in got)  # never handed to the application

    run(go())


def test_pre_acknowledged_consumer_settles_on_send(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            for i in range(20):
                await session.producer("queue://preack").send(str(i), durable=False)
            await session.flush()
            consumer = await session.consumer("queue://preack", ack="pre")
            await wait_until(lambda: consumer.buffered == 20)
            info = await conn.queue_info("preack")
            assert info["message_count"] == 0 and info["messages_acked"] == 20

    run(go())


# -- transactions ---------------------------------------------------------------------------------


def test_transacted_sends_appear_at_commit_only(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session(transacted=True)
            producer = session.producer("queue://tx.sends")
            await producer.send(b"a")
            await producer.send(b"b")
            await session.flush()
            assert (await conn.queue_info("tx.sends"))["message_count"] == 0
            await session.rollback()
            await producer.send(b"c")
            await session.commit()
            assert (await conn.queue_info("tx.sends"))["message_count"] == 1

    run(go())


def test_transacted_acks_settle_at_commit_and_return_on_rollback(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            plain = await conn.session()
            for i in range(3):
                await plain.producer("queue://tx.acks").send(str(i))
            await plain.flush()
            session = await conn.session(transacted=True)
            consumer = await session.consumer("queue://tx.acks")
            assert (await consumer.receive(5)).text == "0"
            await session.rollback()
            again = await consumer.receive(5)
            assert again.text == "0" and again.delivery_count == 1
            assert [(await consumer.receive(5)).text for _ in range(2)] == ["1", "2"]
            await session.commit()
            await asyncio.sleep(0.1)
            assert (await conn.queue_info("tx.acks"))["message_count"] == 0

    run(go())


def test_commit_of_a_duplicate_rolls_back(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session(transacted=True)
            producer = session.producer("queue://tx.dup")
            await producer.send(Message(b"1", duplicate_id="tx-dup-1"))
            await session.commit()
            await producer.send(Message(b"2", duplicate_id="tx-dup-2"))
            await producer.send(Message(b"1 again", duplicate_id="tx-dup-1"))
            with pytest.raises(TransactionRolledBack, match="duplicate"):
                await session.commit()
            assert (await conn.queue_info("tx.dup"))["message_count"] == 1
            await producer.send(Message(b"3", duplicate_id="tx-dup-3"))
            await session.commit()
            assert (await conn.queue_info("tx.dup"))["message_count"] == 2

    run(go())


# -- browsing, large messages -------------------------------------------------------------------------


def test_browse_does_not_consume(shared):
    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            producer = session.producer("queue://browsed")
            for i in range(25):
                await producer.send(Message(str(i), {"even": i % 2 == 0}))
            await session.flush()
            browsed = await session.browser("queue://browsed", batch=7).all()
            assert [m.text for m in browsed] == [str(i) for i in range(25)]
            assert all(m.message_id and m.seq for m in browsed)
            evens = await session.browser("queue://browsed", filter="even = TRUE").all()
            assert [m.text for m in evens] == [str(i) for i in range(0, 25, 2)]
            page, more = await conn.browse("browsed", offset=20, limit=3)
            assert [m.text for m in page] == ["20", "21", "22"] and more
            assert (await conn.queue_info("browsed"))["message_count"] == 25
            with pytest.raises(NotFound):
                await conn.browse("no.such.queue")

    run(go())


def test_large_messages_travel_in_chunks(shared):
    big = bytes(range(256)) * 8000 + b"tail"  # ~2 MB, not a multiple of the chunk size

    async def go():
        async with await connect(url(shared)) as conn:
            session = await conn.session()
            assert len(big) > conn.large_message_size * 10
            producer = session.producer("queue://large")
            await producer.send(Message(big, {"kind": "large"}), wait=True)
            await producer.send(b"small after", wait=True)
            consumer = await session.consumer("queue://large")
            got = await consumer.receive(10)
            assert got.body == big and got.properties["kind"] == "large"
            assert (await consumer.receive(5)).body == b"small after"

    run(go())


# -- pings and the connection TTL -------------------------------------------------------------------


def test_broker_drops_a_silent_client(shared):
    client = CoreConnection(Role.CLIENT)
    with socket.create_connection(("127.0.0.1", shared.port), timeout=10) as s:
        s.sendall(client.send(Connect([1], ttl=300)))
        t0 = time.monotonic()
        s.settimeout(10)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        elapsed = time.monotonic() - t0
    assert 0.25 < elapsed < 5, elapsed
    client.receive_data(data)
    assert type(client.next_event()).__name__ == "Connected"


def test_pings_keep_an_idle_connection_alive(shared):
    async def go():
        async with await connect(url(shared), connection_ttl=800) as conn:
            interrupted = []
            conn.on_interrupted.append(lambda: interrupted.append(1))
            await asyncio.sleep(2.0)  # more than twice the TTL, with nothing but pings
            assert conn.connected and not interrupted
            await (await conn.session()).producer("queue://idle").send(b"still here", wait=True)

    run(go())


def test_raw_preamble_then_garbage_gets_an_error(shared):
    with socket.create_connection(("127.0.0.1", shared.port), timeout=10) as s:
        s.sendall(PREAMBLE + b"\x00\x00\x00\x02\xee\x90")
        s.settimeout(10)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    client = CoreConnection(Role.CLIENT)
    client.send(Connect([1]))
    client.receive_data(data)
    error = client.next_event()
    assert type(error).__name__ == "Error" and "unknown frame type" in error.message
