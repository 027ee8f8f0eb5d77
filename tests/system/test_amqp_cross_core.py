"""AMQP 1.0 <-> CORE (petrel.client) through a real `petrel run`: body, typed properties, priority,
durability and expiry intact both ways."""

from __future__ import annotations

import asyncio
import time

from proton import Message as AmqpMessage
from proton.utils import BlockingConnection

from petrel.client import Message, connect

PROPS = {"s": "text", "i": -5, "f": 2.5, "t": True, "raw": b"\x00\xff"}


def test_amqp_to_core_and_back(broker):
    amqp = BlockingConnection(f"amqp://127.0.0.1:{broker.port}", timeout=20)
    expires = int(time.time() * 1000) + 600_000
    try:
        amqp.create_sender("queue://x.core").send(AmqpMessage(
            body=b"\x00from amqp\xff", properties=PROPS, priority=7, durable=True, expiry_time=expires / 1000))

        async def core_side() -> Message:
            async with await connect(f"tcp://127.0.0.1:{broker.port}") as conn:
                session = await conn.session()
                consumer = await session.consumer("queue://x.core")
                got = await consumer.receive(10)
                await session.producer("queue://x.back").send(
                    Message(b"from core", dict(PROPS), durable=True, priority=2, expiration=expires), wait=True)
                return got

        got = asyncio.run(asyncio.wait_for(core_side(), 30))
        assert got.body == b"\x00from amqp\xff"
        assert {k: got.properties[k] for k in PROPS} == PROPS
        assert (got.priority, got.durable, got.expiration) == (7, True, expires)

        r = amqp.create_receiver("queue://x.back")
        m = r.receive(timeout=10)
        r.accept()
        assert m.body == b"from core" and m.properties == PROPS
        assert (m.priority, m.durable, m.expiry_time) == (2, True, expires / 1000)
    finally:
        amqp.close()
