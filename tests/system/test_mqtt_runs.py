"""PUBLISHes read together (one write of many packets) through a real `petrel run`: the broker
routes runs of them for one topic in one pass; what the clients see is what one-by-one routing
gives: every message once, in order, to a wildcard subscriber; PUBACKs in packet order, a refused
topic's among them; a retained message kept; QoS 0 and 1 mixed."""

from __future__ import annotations

import pytest

from conftest import module_broker
from mqtt_clients import Raw, mqtt_settings
from petrel.codec.mqtt import Connect, Puback, Publish, ReasonCode, Suback, Subscribe, Subscription
from petrel.testing.process import free_port

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def b(tmp_path_factory):
    """One broker for the module's tests (their topics and client ids differ)."""
    port = free_port()
    for broker in module_broker(tmp_path_factory, "mqtt-runs", settings=mqtt_settings(port)):
        broker.mqtt_port = port  # type: ignore[attr-defined]
        yield broker


def _subscriber(port: int, client_id: str, topic: str) -> Raw:
    sub = Raw(port, Connect(client_id, 4))
    sub.send(Subscribe(1, (Subscription(topic, 1),)))
    assert isinstance(sub.recv(), Suback)
    return sub


def _receive(sub: Raw, count: int) -> list[Publish]:
    got = []
    while len(got) < count:
        packet = sub.recv(timeout=20)
        assert packet is not None, f"closed after {len(got)} messages"
        if isinstance(packet, Publish):
            got.append(packet)
            if packet.qos:
                sub.send(Puback(packet.packet_id))
    return got


def test_publishes_read_together_arrive_in_order_with_their_pubacks_in_order(b):
    sub = _subscriber(b.mqtt_port, "runs-sub", "runs/#")
    pub = Raw(b.mqtt_port, Connect("runs-pub", 5))
    packets = []  # (topic, payload, qos, retain, packet id)
    pid = 0

    def add(topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        nonlocal pid
        if qos:
            pid += 1
        packets.append((topic, payload, qos, retain, pid if qos else None))

    for i in range(30):
        add("runs/a", b"a%d" % i, 1)
    add("runs/+", b"refused", 1)  # a wildcard in a PUBLISH's topic: refused with its reason, in place
    for i in range(20):
        add("runs/b", b"b%d" % i, 0)
    add("runs/a", b"kept", 1, retain=True)
    for i in range(30):
        add("runs/b", b"c%d" % i, i % 2)
    pub.send_bytes(b"".join(pub.codec.send(Publish(t, body, qos, retain, packet_id=p))
                            for t, body, qos, retain, p in packets))
    acks = []
    while len(acks) < pid:
        packet = pub.recv(timeout=20)
        assert isinstance(packet, Puback), packet
        acks.append((packet.packet_id, packet.reason))
    assert [p for p, _ in acks] == list(range(1, pid + 1))  # in packet order
    assert dict(acks)[31] == ReasonCode.TOPIC_NAME_INVALID
    assert all(reason == ReasonCode.SUCCESS for p, reason in acks if p != 31)
    expected = [(t, body, qos) for t, body, qos, _, _ in packets if body != b"refused"]
    got = _receive(sub, len(expected))
    assert [(p.topic, p.payload, p.qos) for p in got] == expected  # once each, in order
    late = _subscriber(b.mqtt_port, "runs-late", "runs/a")
    retained = _receive(late, 1)[0]
    assert (retained.payload, retained.retain) == (b"kept", True)
    for client in (sub, pub, late):
        client.close()


def test_a_run_of_qos_0_and_1_to_one_topic_in_3_1_1(b):
    sub = _subscriber(b.mqtt_port, "runs-all", "mixed/t")
    pub = Raw(b.mqtt_port, Connect("runs-mixed", 4))
    data = b"".join(pub.codec.send(Publish("mixed/t", b"%d" % i, i % 2, packet_id=i if i % 2 else None))
                    for i in range(200))
    pub.send_bytes(data)
    got = _receive(sub, 200)
    assert [p.payload for p in got] == [b"%d" % i for i in range(200)]
    acks = []
    while len(acks) < 100:
        packet = pub.recv(timeout=20)
        assert isinstance(packet, Puback)
        acks.append(packet.packet_id)
    assert acks == list(range(1, 200, 2))
    sub.close()
    pub.close()
