"""The load generator over TLS: the in-process sink behind a TLS listener, certificates made at run time."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from petrel.testing.certs import make_pki
from stompbench.clients import Consumer, Producer, open_stomp
from stompbench.dialect import Dialect
from stompbench.frames import body_of
from stompbench.sink import Sink, SinkConnection
from stompbench.workloads import ConsumerSpec, ProducerSpec

pytestmark = pytest.mark.timeout(60)


async def _with_tls_sink(pki, fn):
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server.cert, pki.server.key)
    loop = asyncio.get_running_loop()
    sink = Sink()
    server = await loop.create_server(lambda: SinkConnection(sink), "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        return await fn(port)
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("window", [0, 50])
def test_producer_and_consumer_over_tls_move_every_message(tmp_path, window: int) -> None:
    pki = make_pki(tmp_path)
    dialect = Dialect(tls_ca=str(pki.ca.cert))

    async def pair(port: int):
        consumer = Consumer(ConsumerSpec("queue:t", 2_000), dialect, "s", latency=True)
        await consumer.connect("127.0.0.1", port, 5)
        await consumer.subscribe(5)
        producer = Producer(ProducerSpec("queue:t", 2_000, window=window), dialect, body_of(1024))
        await producer.connect("127.0.0.1", port, 5)
        deadline = time.monotonic_ns() + 20_000_000_000
        assert consumer._writer.get_extra_info("ssl_object") is not None  # really TLS
        return await asyncio.gather(consumer.run(deadline), producer.run(deadline))

    cons, prod = asyncio.run(_with_tls_sink(pki, pair))
    assert prod.error is None and cons.error is None
    assert prod.sent == 2_000 and cons.received == 2_000
    assert prod.receipts == (2_000 if window else 1)


def test_a_broker_certificate_from_another_ca_is_refused(tmp_path) -> None:
    pki = make_pki(tmp_path)
    dialect = Dialect(tls_ca=str(pki.other_ca.cert))

    async def connect(port: int):
        await open_stomp("127.0.0.1", port, dialect, 5)

    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_with_tls_sink(pki, connect))
