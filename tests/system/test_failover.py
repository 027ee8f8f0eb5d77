"""Client failover against real broker processes: kill -9 and restart, a second broker,
reconnect limits, priority backup. The accounting is exact: every confirmed message is
received once, none twice."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from petrel.client import Connection, ConnectionFailed, Message, TransactionRolledBack, connect
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system

FAST = "initialReconnectDelay=10&maxReconnectDelay=100&randomize=false"


def run(coro, timeout: float = 90.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def failover_url(*brokers: BrokerProcess, options: str = FAST) -> str:
    return f"failover:({','.join(f'tcp://127.0.0.1:{b.port}' for b in brokers)})?{options}"


async def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.01)


async def drain_bodies(conn, queue: str, idle: float = 0.5) -> list[bytes]:
    session = await conn.session()
    consumer = await session.consumer(queue)
    out = []
    while (m := await consumer.receive(idle)) is not None:
        out.append(m.body)
    await session.close()
    return out


def test_10k_durable_sends_survive_kill9_and_restart(broker_factory):
    """The issue's failover test: nothing lost, nothing duplicated."""
    b = broker_factory().start()
    count = 10_000

    async def go():
        loop = asyncio.get_running_loop()
        conn = await connect(failover_url(b))
        session = await conn.session()
        producer = session.producer("queue://orders")
        killed = asyncio.Event()

        async def kill_and_restart() -> None:
            await wait_until(lambda: sent >= count // 3)
            await loop.run_in_executor(None, b.kill9)  # the producer keeps sending meanwhile
            killed.set()
            await loop.run_in_executor(None, b.start)

        sent = 0
        chaos = asyncio.ensure_future(kill_and_restart())
        for i in range(count):
            await producer.send(Message(b"%d" % i))
            sent += 1
            if i % 500 == 0:
                await asyncio.sleep(0)  # let the chaos task look
        await session.flush()
        await chaos
        assert killed.is_set() and conn.failovers == 1
        assert session.resent > 0  # unconfirmed messages were sent again
        bodies = await drain_bodies(conn, "queue://orders")
        await conn.close()
        return bodies

    bodies = run(go())
    numbers = [int(body) for body in bodies]
    assert len(numbers) == len(set(numbers)), "duplicates delivered"
    assert sorted(numbers) == list(range(count)), f"lost {sorted(set(range(count)) - set(numbers))[:10]}..."


def test_sync_client_sends_through_kill9_and_restart(broker_factory):
    b = broker_factory().start()
    count = 3000
    with Connection(failover_url(b)) as conn:
        session = conn.session()
        producer = session.producer("queue://sync.orders")

        progress = [0]

        def chaos() -> None:
            deadline = time.monotonic() + 30
            while progress[0] < count // 3 and time.monotonic() < deadline:
                time.sleep(0.001)
            b.kill9()
            b.start()

        thread = threading.Thread(target=chaos)
        thread.start()
        for i in range(count):
            producer.send(Message(b"%d" % i))
            progress[0] = i
        thread.join()
        session.flush()
        assert conn.failovers == 1
        consumer = session.consumer("queue://sync.orders")
        numbers = []
        while (m := consumer.receive(0.5)) is not None:
            numbers.append(int(m.body))
    assert sorted(numbers) == list(range(count))


def test_failover_to_a_second_broker_recreates_consumers(broker_factory):
    a = broker_factory(name="a").start()
    b = broker_factory(name="b").start()

    async def go():
        async with await connect(failover_url(a, b)) as conn:
            assert conn.endpoint.port == a.port
            session = await conn.session()
            consumer = await session.consumer("queue://work")
            producer = session.producer("queue://work")
            await producer.send(b"on a", wait=True)
            assert (await consumer.receive(5)).body == b"on a"
            resumed = asyncio.Event()
            conn.on_resumed.append(resumed.set)
            a.kill9()
            await asyncio.wait_for(resumed.wait(), 20)
            assert conn.endpoint.port == b.port
            await producer.send(b"on b", wait=True)
            got = await consumer.receive(5)  # the consumer was re-created on b
            assert got.body == b"on b"

    run(go())


def test_deliveries_in_flight_are_redelivered_after_failover(broker_factory):
    b = broker_factory().start()

    async def go():
        loop = asyncio.get_running_loop()
        async with await connect(failover_url(b)) as conn:
            session = await conn.session()
            producer = session.producer("queue://inflight")
            for i in range(200):
                await producer.send(b"%d" % i)
            await session.flush()
            consumer = await session.consumer("queue://inflight", ack="client")
            first = [await consumer.receive(5) for _ in range(50)]
            resumed = asyncio.Event()
            conn.on_resumed.append(resumed.set)
            b.kill9()
            await loop.run_in_executor(None, b.start)
            await asyncio.wait_for(resumed.wait(), 30)
            for m in first:
                m.ack()  # delivered by the dead connection: ignored, the broker redelivers it
            seen = []
            while (m := await consumer.receive(0.5)) is not None:
                seen.append(int(m.body))
                m.ack()
            assert sorted(seen) == list(range(200))
            assert all(m.delivery_count >= 0 for m in first)
            await asyncio.sleep(0.2)
            assert (await conn.queue_info("inflight"))["message_count"] == 0

    run(go())


def test_transaction_with_work_in_flight_rolls_back_on_failover(broker_factory):
    b = broker_factory().start()

    async def go():
        loop = asyncio.get_running_loop()
        async with await connect(failover_url(b)) as conn:
            session = await conn.session(transacted=True)
            producer = session.producer("queue://tx.failover")
            await producer.send(b"before")
            await session.flush()
            resumed = asyncio.Event()
            conn.on_resumed.append(resumed.set)
            b.kill9()
            await loop.run_in_executor(None, b.start)
            await asyncio.wait_for(resumed.wait(), 30)
            with pytest.raises(TransactionRolledBack, match="failed over"):
                await session.commit()
            assert (await conn.queue_info("tx.failover")) is None or \
                (await conn.queue_info("tx.failover"))["message_count"] == 0
            await producer.send(b"after")
            await session.commit()
            assert (await conn.queue_info("tx.failover"))["message_count"] == 1

    run(go())


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_reconnect_attempts_are_bounded():
    port = _dead_port()

    async def go():
        t0 = time.monotonic()
        with pytest.raises(ConnectionFailed, match="3 attempt"):
            await connect(f"failover:(tcp://127.0.0.1:{port})?maxReconnectAttempts=2&initialReconnectDelay=10")
        with pytest.raises(ConnectionFailed, match="1 attempt"):
            await connect(f"failover:(tcp://127.0.0.1:{port})?startupMaxReconnectAttempts=0&maxReconnectAttempts=-1")
        assert time.monotonic() - t0 < 5

    run(go())


def test_giving_up_after_a_loss_fails_waiting_calls(broker_factory):
    b = broker_factory().start()

    async def go():
        url = failover_url(b, options="maxReconnectAttempts=2&initialReconnectDelay=10&maxReconnectDelay=20")
        conn = await connect(url)
        session = await conn.session()
        consumer = await session.consumer("queue://gone")
        waiting = asyncio.ensure_future(consumer.receive())
        b.kill9()
        with pytest.raises(ConnectionFailed, match="attempt"):
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(ConnectionFailed):
            await session.producer("queue://gone").send(b"x", wait=True)
        await conn.close()

    run(go())


def test_priority_backup_switches_back_to_the_first_broker(broker_factory):
    a = broker_factory(name="a")  # not started yet
    b = broker_factory(name="b").start()

    async def go():
        loop = asyncio.get_running_loop()
        url = failover_url(a, b, options="priorityBackup=true&initialReconnectDelay=50&maxReconnectDelay=200")
        async with await connect(url) as conn:
            assert conn.endpoint.port == b.port
            session = await conn.session()
            consumer = await session.consumer("queue://prio")
            await loop.run_in_executor(None, a.start)
            await wait_until(lambda: conn.connected and conn.endpoint.port == a.port, timeout=20)
            await session.producer("queue://prio").send(b"on a", wait=True)
            assert (await consumer.receive(5)).body == b"on a"

    run(go())


def test_transaction_that_consumed_before_failover_rolls_back(broker_factory):
    b = broker_factory().start()

    async def go():
        loop = asyncio.get_running_loop()
        async with await connect(failover_url(b)) as conn:
            plain = await conn.session()
            await plain.producer("queue://tx.consumed").send(b"work", wait=True)
            session = await conn.session(transacted=True)
            consumer = await session.consumer("queue://tx.consumed")
            first = await consumer.receive(5)
            assert first.body == b"work"
            resumed = asyncio.Event()
            conn.on_resumed.append(resumed.set)
            b.kill9()
            await loop.run_in_executor(None, b.start)
            await asyncio.wait_for(resumed.wait(), 30)
            with pytest.raises(TransactionRolledBack):
                await session.commit()
            again = await consumer.receive(5)  # the work comes back: it was never committed
            assert again.body == b"work" and again.message_id == first.message_id
            await session.commit()

    run(go())


def test_graceful_stop_sends_disconnect_and_the_client_moves_on(broker_factory):
    a = broker_factory(name="a").start()
    b = broker_factory(name="b").start()

    async def go():
        async with await connect(failover_url(a, b)) as conn:
            session = await conn.session()
            producer = session.producer("queue://moving")
            for i in range(200):
                await producer.send(f"m{i}".encode())
            await session.flush()  # all confirmed by a
            resumed = asyncio.Event()
            conn.on_resumed.append(resumed.set)
            assert await asyncio.get_running_loop().run_in_executor(None, a.stop) == 0
            await asyncio.wait_for(resumed.wait(), 20)
            assert conn.endpoint.port == b.port
            await producer.send(b"on b", wait=True)
        # what a confirmed is still on a after its restart
        a.start()
        async with await connect(f"tcp://127.0.0.1:{a.port}") as again:
            assert await drain_bodies(again, "queue://moving") == [f"m{i}".encode() for i in range(200)]

    run(go())
