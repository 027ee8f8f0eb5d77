"""MQTT write flow control through a real `petrel run`: a QoS 0 subscriber that stops reading
pauses its deliveries (the socket's buffers fill, the broker stops writing) and, once it reads
again, gets every message, in order, once; the broker serves the producer meanwhile."""

from __future__ import annotations

import socket
import threading

import pytest

from mqtt_clients import Raw, mqtt_broker
from petrel.codec.mqtt import Connect, Publish, Suback, Subscribe, Subscription

pytestmark = pytest.mark.system

COUNT = 4000
SIZE = 4096  # 16 MiB in all: far more than the sockets' buffers and the transport's high-water mark


@pytest.fixture
def b(tmp_path):
    broker = mqtt_broker(tmp_path / "b").start()
    yield broker
    broker.kill9()


def test_a_qos_0_subscriber_that_stops_reading_gets_every_message_in_order_once_it_reads_again(b):
    sub = Raw(b.mqtt_port, Connect("flow-sub", 4))
    sub.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sub.send(Subscribe(1, (Subscription("flow/t", 0),)))
    assert isinstance(sub.recv(), Suback)
    pub = Raw(b.mqtt_port, Connect("flow-pub", 4))
    padding = b"x" * (SIZE - 4)
    batches = [b"".join(pub.codec.send(Publish("flow/t", i.to_bytes(4, "big") + padding, 0))
                        for i in range(start, start + 100)) for start in range(0, COUNT, 100)]
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            for batch in batches:
                pub.send_bytes(batch)
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    producer.join(10)  # the subscriber reads nothing meanwhile (the producer may be slowed: flow control)
    got = []
    while len(got) < COUNT:
        packet = sub.recv(timeout=30)
        assert packet is not None, f"closed after {len(got)} messages"
        assert isinstance(packet, Publish) and packet.qos == 0
        got.append(int.from_bytes(packet.payload[:4], "big"))
        assert len(packet.payload) == SIZE
    producer.join(30)
    assert not failures and not producer.is_alive()
    assert got == list(range(COUNT))  # none lost, none twice, in order
    with pytest.raises(TimeoutError):
        sub.recv(timeout=0.5)  # and nothing more
    pub.close()
    sub.close()
