"""Large messages over CORE: bodies kept in files on the broker, sent and delivered in chunks,
kept through kill -9, readable from STOMP and back."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from petrel.client import Message, connect
from petrel.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.system

MIB = 1024 * 1024


def run(coro, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def body_of(size: int, seed: int) -> bytes:
    block = hashlib.sha256(b"%d" % seed).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


def files(b: BrokerProcess) -> list[str]:
    directory = b.data_dir / "large-messages"
    return sorted(os.listdir(directory)) if directory.exists() else []


@pytest.fixture
def broker(broker_factory):
    return broker_factory().start()


def test_large_bodies_live_in_files_until_acknowledged(broker):
    url = f"tcp://127.0.0.1:{broker.port}"
    bodies = [body_of(3 * MIB + i, i) for i in range(3)]

    async def go():
        async with await connect(url) as conn:
            session = await conn.session()
            producer = session.producer("queue://big.files")
            for i, body in enumerate(bodies):
                await producer.send(Message(body, {"i": i}))
                await producer.send(Message(b"small %d" % i, {"i": i}))  # right behind, while it is fsynced
            await session.flush()
            assert len(files(broker)) == 3
            expected = [x for i, body in enumerate(bodies) for x in (body, b"small %d" % i)]
            browsed = await session.browser("queue://big.files").all()
            assert [m.body for m in browsed] == expected
            consumer = await session.consumer("queue://big.files", window=MIB)
            got = [await consumer.receive(10) for _ in range(6)]
            assert [m.body for m in got] == expected
            await consumer.close()
        wait_for(lambda: files(broker) == [], 10, message=f"files left: {files(broker)}")

    run(go())


def test_confirmed_large_messages_survive_kill9(broker):
    url = f"tcp://127.0.0.1:{broker.port}"
    bodies = [body_of(2 * MIB + 17 * i, 100 + i) for i in range(4)]

    async def send():
        async with await connect(url) as conn:
            session = await conn.session()
            for body in bodies:
                await session.producer("queue://big.kept").send(body)
            await session.flush()

    run(send())
    broker.kill9()
    broker.start()

    async def receive():
        async with await connect(url) as conn:
            consumer = await (await conn.session()).consumer("queue://big.kept")
            return [(await consumer.receive(10)).body for _ in range(len(bodies))]

    assert run(receive()) == bodies


def test_large_messages_cross_between_stomp_and_core(broker):
    import stomp

    from conftest import Listener

    url = f"tcp://127.0.0.1:{broker.port}"
    from_stomp = body_of(MIB + 3, 7)
    from_core = body_of(MIB + 5, 8)
    conn = stomp.Connection12([("127.0.0.1", broker.stomp_port)], auto_decode=False, heartbeats=(0, 0))
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect("guest", "guest", wait=True)
    try:
        conn.send("/queue/big.x1", from_stomp, headers={"persistent": "true"}, receipt="r1")
        assert listener.receipts.get(timeout=10) == "r1"

        async def go():
            async with await connect(url) as core:
                session = await core.session()
                got = await (await session.consumer("queue://big.x1")).receive(10)
                assert got.body == from_stomp
                await session.producer("queue://big.x2").send(from_core, wait=True)

        run(go())
        conn.subscribe("/queue/big.x2", id="s", ack="auto")
        frame = listener.get(10)
        assert frame.body == from_core
    finally:
        conn.disconnect()


def test_sync_large_message_in_a_transaction(broker):
    from petrel.client import Connection

    body = body_of(MIB + 11, 9)
    with Connection(f"tcp://127.0.0.1:{broker.port}") as conn:
        session = conn.session(transacted=True)
        producer = session.producer("queue://big.tx")
        producer.send(body)
        session.rollback()
        producer.send(body)
        session.commit()
        consumer = session.consumer("queue://big.tx")
        assert consumer.receive(10).body == body
        session.commit()
    wait_for(lambda: files(broker) == [], 10, message=f"files left: {files(broker)}")
