"""bench/amqp_raw.py's producer and consumer against a real Petrel broker: every message arrives,
pre-settled and at-least-once, and the messages are real ones (a proton receiver reads them)."""

from __future__ import annotations

import threading

import pytest

from amqp_raw import consume_raw, produce_raw
from petrel.testing.process import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker(tmp_path):
    port = free_port()
    b = BrokerProcess(tmp_path / "b", settings=f"amqp_port = {port}\n").start()
    try:
        yield port
    finally:
        b.stop()


@pytest.mark.parametrize("durable", [False, True])
def test_every_message_arrives(broker, durable) -> None:
    address = f"queue://raw.{int(durable)}"
    ready = threading.Event()
    got: list = []
    consumer = threading.Thread(target=lambda: got.append(consume_raw(broker, address, durable, 3_000, ready)))
    consumer.start()
    assert ready.wait(30)
    t0, confirmed = produce_raw(broker, address, durable, 3_000, 512)
    consumer.join(60)
    assert not consumer.is_alive()
    assert confirmed == 3_000 and t0 > 0
    assert got[0][0] == 3_000 and got[0][1] >= t0


def test_the_producer_waits_for_credit_and_sends_decodable_messages(broker) -> None:
    from proton.utils import BlockingConnection

    # no consumer: the broker's credit alone paces the producer; every message is accepted
    t0, confirmed = produce_raw(broker, "queue://raw.kept", True, 2_500, 100)
    assert confirmed == 2_500
    c = BlockingConnection(f"amqp://127.0.0.1:{broker}")
    try:
        r = c.create_receiver("queue://raw.kept")
        m = r.receive(timeout=10)
        r.accept()
        assert m.body == b"x" * 100 and m.durable is True
    finally:
        c.close()
