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


def test_unacknowledged_deliveries_keep_their_packet_id_and_dup_through_kill_9(b):
    raw = Raw(b.mqtt_port, Connect("pid-sub", 5, clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 600}))
    raw.send(Subscribe(1, (Subscription("pid/#", 2),)))
    assert isinstance(raw.recv(), Suback)
    pub = Paho(b.mqtt_port, "pid-pub")
    pub.publish("pid/one", b"one", 1)
    for i in range(5):
        pub.publish(f"pid/two/{i}", f"two {i}".encode(), 2)
    pub.publish("pid/three", b"three", 2)
    pub.close()
    first = {p.payload: p for p in (raw.recv() for _ in range(7))}
    assert not any(p.dup for p in first.values())
    three = first[b"three"].packet_id
    raw.send(Pubrec(three))  # the message is the client's; PUBCOMP never comes
    assert raw.recv() == Pubrel(three)
    b.kill9()  # nothing else acknowledged
    b.start()
    raw = Raw(b.mqtt_port, Connect("pid-sub", 5, clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 600}))
    assert raw.connack.session_present
    got = []
    with pytest.raises(TimeoutError):
        while True:
            got.append(raw.recv(timeout=1.0))
    assert Pubrel(three) in got
    again = {p.payload: p for p in got if isinstance(p, Publish)}
    assert sorted(again) == sorted(k for k in first if k != b"three")  # the PUBREC'd one: only PUBREL
    for payload, p in again.items():
        assert (p.packet_id, p.qos, p.dup) == (first[payload].packet_id, first[payload].qos, True)
    for p in again.values():
        raw.send(Puback(p.packet_id) if p.qos == 1 else Pubrec(p.packet_id))
    rels = [raw.recv() for _ in range(5)]
    assert sorted(r.packet_id for r in rels) == sorted(p.packet_id for p in again.values() if p.qos == 2)
    for pid in [r.packet_id for r in rels] + [three]:
        raw.send(Pubcomp(pid))
    raw.send(Publish("elsewhere", b"x", 1, packet_id=9))  # its PUBACK follows a sync of all before
    assert raw.recv().packet_id == 9  # (0x10: no subscribers)
    raw.send(Disconnect())
    raw.close()
    b.kill9()
    b.start()
    raw = Raw(b.mqtt_port, Connect("pid-sub", 5, clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 600}))
    assert raw.connack.session_present
    with pytest.raises(TimeoutError):
        raw.recv(timeout=1.0)  # all done: nothing comes again
    # new deliveries still flow, with packet ids of their own
    pub = Paho(b.mqtt_port, "pid-pub")
    pub.publish("pid/new", b"new", 2)
    pub.close()
    new = raw.recv()
    assert (new.payload, new.dup) == (b"new", False)
    raw.send(Pubrec(new.packet_id))
    assert raw.recv() == Pubrel(new.packet_id)
    raw.send(Pubcomp(new.packet_id))
    raw.send(Disconnect())
    raw.close()


def test_paho_gets_each_qos_2_message_once_when_the_broker_dies_mid_delivery(b):
    raw = Raw(b.mqtt_port, Connect("eo-paho", 4, clean_start=False))
    raw.send(Subscribe(1, (Subscription("eop/#", 2),)))
    assert isinstance(raw.recv(), Suback)
    pub = Paho(b.mqtt_port, "eop-pub")
    for i in range(5):
        pub.publish(f"eop/{i}", f"m{i}".encode(), 2)
    pub.close()
    assert len([raw.recv() for _ in range(5)]) == 5
    raw.abort()
    b.kill9()
    b.start()
    client, got = _resubscribing_paho(b.mqtt_port, "eo-paho", "eop/#")
    messages = _drain(got)
    client.disconnect()
    client.loop_stop()
    assert sorted(m.payload for m in messages) == [f"m{i}".encode() for i in range(5)]
    assert all(m.qos == 2 for m in messages)  # sent again at once on resume, before the SUBSCRIBE again


def _wait_for_log(b, text: str, count: int = 1, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while b.log_path.read_text(errors="replace").count(text) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not logged {count} times")
        time.sleep(0.05)


def test_a_delayed_will_survives_kill_9_and_goes_when_due_unless_the_session_resumed(b):
    watcher = Paho(b.mqtt_port, "will-watch", clean=False)
    watcher.subscribe("wills9/#", 1)
    watcher.close()
    session = {P.SESSION_EXPIRY_INTERVAL: 600}
    for name, delay in (("goes", 2), ("resumes", 6)):
        Raw(b.mqtt_port, Connect(name, 5, clean_start=False, properties=session, will=Will(
            f"wills9/{name}", f"{name} died".encode(), 1, retain=True,
            properties={P.WILL_DELAY_INTERVAL: delay}))).abort()
    _wait_for_log(b, "due in", 2)
    sync = Raw(b.mqtt_port, Connect("will-sync", 5))
    sync.send(Publish("elsewhere", b"x", 1, packet_id=1))  # its PUBACK follows a sync of all before
    assert sync.recv().packet_id == 1
    b.kill9()  # before either will is due
    b.start()
    back = Raw(b.mqtt_port, Connect("resumes", 5, clean_start=False, properties=session))
    assert back.connack.session_present
    watcher = Paho(b.mqtt_port, "will-watch", clean=False)
    will = watcher.get(timeout=20)
    assert (will.topic, will.payload) == ("wills9/goes", b"goes died")
    assert watcher.drain(idle=7.0) == []  # the resumed session's will never goes
    watcher.close()
    late = Paho(b.mqtt_port, "will-late", version=V5)
    late.subscribe("wills9/#", 1)  # the will was retained
    assert [(m.topic, m.payload, m.retain) for m in late.drain()] == [("wills9/goes", b"goes died", True)]
    late.close()
    back.send(Disconnect())
    back.close()
