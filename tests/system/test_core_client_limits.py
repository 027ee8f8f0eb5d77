"""Address-full policies seen by a CORE producer: BLOCK holds confirmations (the producer
stops when its window is full, its consumers keep going), FAIL refuses the send."""

from __future__ import annotations

import asyncio

import pytest

from petrel.client import SendFailed, connect
from petrel.codec.core import ErrorCode
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system

SETTINGS = """
[address_settings."blocking"]
max_size_messages = 10
address_full_policy = "BLOCK"

[address_settings."failing"]
max_size_messages = 10
address_full_policy = "FAIL"
"""


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("limits"), settings=SETTINGS).start()
    yield b
    b.stop()


def run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_block_policy_stops_the_producer_until_consumers_make_room(limited):
    async def go():
        async with await connect(f"tcp://127.0.0.1:{limited.port}", confirmation_window=2048) as conn:
            session = await conn.session()
            producer = session.producer("queue://blocking")
            sent = 0

            async def produce() -> None:
                nonlocal sent
                for _ in range(60):
                    await producer.send(b"x" * 100, durable=False)
                    sent += 1
                await session.flush()

            task = asyncio.ensure_future(produce())
            # wait until the producer stops making progress: its window is full, no confirmation comes
            last, still = -1, 0.0
            while still < 0.5:
                await asyncio.sleep(0.05)
                still = still + 0.05 if sent == last else 0.0
                last = sent
            assert not task.done()
            assert 10 <= sent < 60
            consumer = await (await conn.session()).consumer("queue://blocking")
            received = 0
            while received < 60:
                assert await consumer.receive(5) is not None
                received += 1
            await asyncio.wait_for(task, 10)
            assert sent == 60

    run(go())


def test_fail_policy_refuses_sends(limited):
    async def go():
        async with await connect(f"tcp://127.0.0.1:{limited.port}") as conn:
            session = await conn.session()
            producer = session.producer("queue://failing")
            for _ in range(10):
                await producer.send(b"fits", durable=False)
            await session.flush()
            with pytest.raises(SendFailed) as info:
                await producer.send(b"too many", wait=True)
            assert info.value.code == ErrorCode.ADDRESS_FULL
            assert (await conn.queue_info("failing"))["message_count"] == 10

    run(go())
