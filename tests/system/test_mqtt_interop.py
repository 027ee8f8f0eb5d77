"""MQTT beside the other protocols and under security, with real `petrel run` processes: an
MQTT publish reaches a STOMP subscriber and a STOMP send an MQTT one, body and properties
intact; logins and permissions answered with MQTT's codes."""

from __future__ import annotations

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from conftest import connect
from mqtt_clients import V5, V311, Paho, Raw, mqtt_settings
from petrel.codec.mqtt import ConnackCode, Connect, Puback, Publish, ReasonCode, Suback, Subscribe, Subscription
from petrel.security.users import UserStore
from petrel.testing.process import OWN_SECURITY, BrokerProcess, free_port

pytestmark = pytest.mark.system


@pytest.fixture
def b(tmp_path):
    port = free_port()
    broker = BrokerProcess(tmp_path / "b", settings=mqtt_settings(port))
    broker.mqtt_port = port
    broker.start()
    yield broker
    broker.kill9()


def test_mqtt_and_stomp_exchange_bodies_and_properties(b):
    stomp_conn, listener = connect(b)
    stomp_conn.subscribe("/topic/cross.m2s", id="1")
    mqtt_sub = Paho(b.mqtt_port, "cross-sub", version=V5)
    mqtt_sub.subscribe("cross/s2m", 1)
    stomp_conn.subscribe("/topic/cross.s2m", id="2", headers={"receipt": "r2"})
    listener.receipts.get(timeout=10)

    pub = Paho(b.mqtt_port, "cross-pub", version=V5)
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = [("colour", "blue")]
    props.ContentType = "text/plain"
    props.CorrelationData = b"c-17"
    pub.publish("cross/m2s", b"from mqtt \x00 binary", 1, properties=props)
    frame = listener.get()
    assert frame.headers["destination"] == "/topic/cross.m2s"
    assert frame.headers["colour"] == "blue"
    assert frame.headers["content-type"] == "text/plain"
    assert frame.headers["correlation-id"] == "c-17"
    assert frame.headers["persistent"] == "true"  # QoS 1: durable

    stomp_conn.send("/topic/cross.s2m", "from stomp", headers={"colour": "red", "persistent": "true",
                                                             "correlation-id": "c-18", "priority": "7"})
    m = mqtt_sub.get()
    assert (m.topic, m.payload, m.qos) == ("cross/s2m", b"from stomp", 1)
    got = m.properties
    assert ("colour", "red") in got.UserProperty
    assert got.CorrelationData == b"c-18"
    stomp_conn.disconnect()
    mqtt_sub.close()
    pub.close()


PASSWORDS = {"writer": "writer-pw", "reader": "reader-pw"}
SECURE = '''
[security]
users_file = "users.toml"
login_failure_delay = 100

[security_settings."sensors.#"]
send = ["writer"]
consume = ["reader", "writer"]
createAddress = ["writer", "reader"]
createNonDurableQueue = ["writer", "reader"]
createDurableQueue = ["writer", "reader"]
'''


@pytest.fixture
def secure(tmp_path):
    port = free_port()
    workdir = tmp_path / "s"
    workdir.mkdir()
    users = UserStore(workdir / "users.toml")
    for name, password in PASSWORDS.items():
        users.add(name, password, [name])
    users.save()
    broker = BrokerProcess(workdir, settings=mqtt_settings(port) + SECURE, env=OWN_SECURITY)
    broker.mqtt_port = port
    broker.start()
    yield broker
    broker.kill9()


def test_logins_and_permissions_get_mqtt_codes(secure):
    port = secure.mqtt_port
    wrong = Raw(port, Connect("w", 4, username="writer", password=b"nope"))
    assert wrong.connack.reason == ConnackCode.BAD_USER_NAME_OR_PASSWORD
    assert wrong.recv_until_closed() == []
    wrong5 = Raw(port, Connect("w5", 5, username="writer", password=b"nope"))
    assert wrong5.connack.reason == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    anonymous = Raw(port, Connect("anon", 5))
    assert anonymous.connack.reason == ReasonCode.NOT_AUTHORIZED

    reader = Raw(port, Connect("r", 5, username="reader", password=b"reader-pw"))
    assert reader.connack.reason == 0
    reader.send(Subscribe(1, (Subscription("sensors/+", 1), Subscription("secret/#", 1))))
    assert reader.recv() == Suback(1, (1, ReasonCode.NOT_AUTHORIZED))
    reader.send(Publish("sensors/t", b"not mine", 1, packet_id=2))
    refused = reader.recv()
    assert isinstance(refused, Puback) and refused.reason == ReasonCode.NOT_AUTHORIZED

    writer = Paho(port, "writer-1", version=V311, username="writer", password="writer-pw")
    writer.publish("sensors/t", b"21.5", 1)
    delivered = reader.recv()
    assert (delivered.topic, delivered.payload) == ("sensors/t", b"21.5")
    writer.close()
    # 3.1.1 cannot refuse a PUBLISH: the connection closes, the broker goes on
    reader311 = Raw(port, Connect("r4", 4, username="reader", password=b"reader-pw"))
    reader311.send(Publish("sensors/t", b"x", 1, packet_id=3))
    assert reader311.recv_until_closed() == []
    again = Raw(port, Connect("r5", 4, username="reader", password=b"reader-pw"))
    assert again.connack.reason == 0


def test_mqtt_and_amqp_exchange_bodies_and_properties(b):
    from proton import Message
    from proton.utils import BlockingConnection

    amqp = BlockingConnection(f"amqp://127.0.0.1:{b.port}", timeout=20)
    try:
        receiver = amqp.create_receiver("topic://mx.m2a")
        mqtt_sub = Paho(b.mqtt_port, "mx-sub", version=V5)
        mqtt_sub.subscribe("mx/a2m", 1)
        pub = Paho(b.mqtt_port, "mx-pub", version=V5)
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("colour", "green")]
        props.CorrelationData = b"c-20"
        pub.publish("mx/m2a", b"from mqtt", 1, properties=props)
        m = receiver.receive(timeout=10)
        receiver.accept()
        assert m.body in (b"from mqtt", "from mqtt")
        assert m.properties["colour"] == "green" and m.durable
        assert m.correlation_id == "c-20"

        amqp.create_sender("topic://mx.a2m").send(Message(body=b"from amqp", durable=True,
                                                         properties={"shape": "square"}))
        got = mqtt_sub.get()
        assert (got.topic, got.payload, got.qos) == ("mx/a2m", b"from amqp", 1)
        assert ("shape", "square") in got.properties.UserProperty
        mqtt_sub.close()
        pub.close()
    finally:
        amqp.close()


def test_a_property_mqtt_cannot_carry_is_left_out_and_the_sender_is_unharmed(b):
    from proton import Message
    from proton.utils import BlockingConnection

    mqtt_sub = Paho(b.mqtt_port, "big-prop", version=V5)
    mqtt_sub.subscribe("odd/#", 1)
    amqp = BlockingConnection(f"amqp://127.0.0.1:{b.port}", timeout=20)
    try:
        sender = amqp.create_sender("topic://odd.one")
        sender.send(Message(body=b"huge property", durable=True, properties={"huge": "x" * 70_000}))
        sender.send(Message(body=b"plain", durable=True))  # settled: the broker took both
    finally:
        amqp.close()
    got = mqtt_sub.drain()
    assert [m.payload for m in got] == [b"huge property", b"plain"]
    assert "huge" not in dict(getattr(got[0].properties, "UserProperty", []))  # left out: too long for MQTT
    mqtt_sub.close()


def test_mqtt_state_queues_are_the_brokers_own(b):
    pub = Paho(b.mqtt_port, "own-pub", version=V5)
    pub.publish("kept/topic", b"retained", 1, retain=True)
    pub.close()
    raw = Raw(b.mqtt_port, Connect("prober", 5))
    raw.send(Subscribe(1, (Subscription("$/petrel/mqtt/retain", 1), Subscription("#", 1))))
    assert raw.recv() == Suback(1, (ReasonCode.NOT_AUTHORIZED, 1))
    kept = raw.recv()  # "#" gets the retained message of kept/topic, nothing of the broker's own queues
    assert (kept.topic, kept.payload) == ("kept/topic", b"retained")
    raw.send(Puback(kept.packet_id))
    raw.send(Publish("$/petrel/mqtt/retain", b"forged", 1, packet_id=2))
    assert raw.recv().reason == ReasonCode.NOT_AUTHORIZED
    stomp_conn, listener = connect(b)
    stomp_conn.subscribe("/queue/$.petrel.mqtt.retain", id="1")
    error = listener.errors.get(timeout=10)
    assert "internal" in error.headers["message"]
    with pytest.raises(TimeoutError):
        raw.recv(timeout=0.7)
