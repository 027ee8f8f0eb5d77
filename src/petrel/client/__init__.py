"""The Python client for Petrel's CORE protocol, asyncio and synchronous.

asyncio (the real one)::

    async with await petrel.client.connect("failover:(tcp://a:61616,tcp://b:61617)") as conn:
        session = await conn.session()
        producer = session.producer("queue://orders")
        await producer.send(Message(b"...", durable=True))
        await session.flush()                       # every send confirmed by the broker
        consumer = await session.consumer("queue://orders")
        message = await consumer.receive(timeout=5)

synchronous (the same API, driving an event loop in a background thread)::

    with petrel.client.Connection("tcp://localhost:61616") as conn:
        session = conn.session()
        session.producer("queue://orders").send(b"hello")
        message = session.consumer("queue://orders").receive(timeout=5)
"""

from petrel.client.connection import AsyncConnection, connect
from petrel.client.consumer import AsyncBrowser, AsyncConsumer
from petrel.client.cursors import Cursor, QueueSequence, RangeRecord, SeqRange
from petrel.client.errors import (
    AlreadyExists,
    ClientError,
    ConnectionClosed,
    ConnectionFailed,
    FailoverInterrupted,
    NotFound,
    RequestFailed,
    SendFailed,
    TransactionRolledBack,
)
from petrel.client.message import DUPLICATE_ID, Message
from petrel.client.session import AsyncProducer, AsyncSession
from petrel.client.sync import Connection, Consumer, Producer, Session
from petrel.client.url import ClientURL, Endpoint, FailoverOptions, parse_url

__all__ = [
    "connect",
    "AsyncConnection",
    "AsyncSession",
    "AsyncProducer",
    "AsyncConsumer",
    "AsyncBrowser",
    "Connection",
    "Session",
    "Producer",
    "Consumer",
    "Message",
    "DUPLICATE_ID",
    "QueueSequence",
    "SeqRange",
    "RangeRecord",
    "Cursor",
    "ClientURL",
    "Endpoint",
    "FailoverOptions",
    "parse_url",
    "ClientError",
    "ConnectionFailed",
    "ConnectionClosed",
    "FailoverInterrupted",
    "RequestFailed",
    "NotFound",
    "AlreadyExists",
    "SendFailed",
    "TransactionRolledBack",
]
