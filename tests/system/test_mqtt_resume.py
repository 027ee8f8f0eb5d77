"""MQTT persistent sessions resumed, through real `petrel run` processes with paho-mqtt 2.x
and a raw client on Petrel's codec: a SUBSCRIBE again on resume keeps what is in flight,
deliveries keep their packet id and DUP across kill -9, delayed wills survive a restart."""

from __future__ import annotations

import queue
import time

import paho.mqtt.client as mqtt
import pytest

from mqtt_clients import V5, V311, Paho, Raw, mqtt_broker
from petrel.codec.mqtt import (
    Connect,
    Disconnect,
    PropertyId as P,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Will,
)

pytestmark = pytest.mark.system


@pytest.fixture
def b(tmp_path):
    broker = mqtt_broker(tmp_path / "b").start()
    yield broker
    broker.kill9()


def _resubscribing_paho(port: int, client_id: str, topic: str, version=V311) -> tuple[mqtt.Client, queue.Queue]:
    """A paho application as they are written: it subscribes again in on_connect."""
    kwargs = {} if version == V5 else {"clean_session": False}
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version, **kwargs)
    got: queue.Queue = queue.Queue()
    client.on_message = lambda c, u, m: got.put(m)
    client.on_connect = lambda c, u, flags, rc, props: c.subscribe(topic, 1)
    if version == V5:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 600
        client.connect("127.0.0.1", port, keepalive=30, clean_start=False, properties=props)
    else:
        client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    return client, got


def _drain(q: queue.Queue, idle: float = 1.0) -> list:
    out = []
    while True:
        try:
            out.append(q.get(timeout=idle))
        except queue.Empty:
            return out


@pytest.mark.parametrize("version", [V311, V5])
def test_subscribing_again_on_resume_keeps_the_deliveries_in_flight(b, version):
    level = 5 if version == V5 else 4
    props = {P.SESSION_EXPIRY_INTERVAL: 600} if level == 5 else {}
    raw = Raw(b.mqtt_port, Connect("again", level, clean_start=False, properties=props))
    raw.send(Subscribe(1, (Subscription("again/#", 1),)))
    assert isinstance(raw.recv(), Suback)
    pub = Paho(b.mqtt_port, "again-pub")
    for i in range(10):
        pub.publish(f"again/{i}", f"m{i}".encode(), 1)
    pub.close()
    first = [raw.recv() for _ in range(10)]
    assert sorted(p.payload for p in first) == [f"m{i}".encode() for i in range(10)]
    raw.abort()  # none acknowledged
    client, got = _resubscribing_paho(b.mqtt_port, "again", "again/#", version)
    messages = _drain(got)
    client.disconnect()
    client.loop_stop()
    assert sorted(m.payload for m in messages) == [f"m{i}".encode() for i in range(10)]  # each once
    # the subscription still works after the SUBSCRIBE again, and its options were updated
    raw = Raw(b.mqtt_port, Connect("again", level, clean_start=False, properties=props))
    raw.send(Subscribe(2, (Subscription("again/#", 0),)))
    assert isinstance(raw.recv(), Suback)
    pub = Paho(b.mqtt_port, "again-pub")
    pub.publish("again/late", b"late", 1)
    pub.close()
    late = raw.recv()
    assert (late.payload, late.qos) == (b"late", 0)
    with pytest.raises(TimeoutError):
        raw.recv(timeout=0.7)
    raw.close()


def test_a_subscribe_again_sends_the_retained_messages_as_retain_handling_says(b):
    pub = Paho(b.mqtt_port, "rh-pub", version=V5)
    pub.publish("rh/a", b"kept", 1, retain=True)
    pub.close()
    raw = Raw(b.mqtt_port, Connect("rh", 5, properties={P.SESSION_EXPIRY_INTERVAL: 60}))
    raw.send(Subscribe(1, (Subscription("rh/#", 1),)))
    assert isinstance(raw.recv(), Suback)
    got = raw.recv()
    assert (got.payload, got.retain) == (b"kept", True)
    raw.send(Puback(got.packet_id))
    raw.send(Subscribe(2, (Subscription("rh/#", 1, retain_handling=1),)))  # exists: none
    assert isinstance(raw.recv(), Suback)
    with pytest.raises(TimeoutError):
        raw.recv(timeout=0.7)
    raw.send(Subscribe(3, (Subscription("rh/#", 1, retain_handling=0),)))  # always
    assert isinstance(raw.recv(), Suback)
    again = raw.recv()
    assert (again.payload, again.retain) == (b"kept", True)
    raw.send(Puback(again.packet_id))
    raw.send(Disconnect())
    raw.close()
