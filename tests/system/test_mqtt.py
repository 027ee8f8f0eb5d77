"""MQTT 3.1.1 and 5.0 through real `petrel run` processes with paho-mqtt 2.x, aiomqtt and a raw
client on Petrel's codec: QoS 0/1/2, wildcards, persistent sessions and QoS 2 through kill -9,
retained messages across a restart, wills, shared subscriptions, keep-alive, malformed packets."""

from __future__ import annotations

import asyncio

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mqtt_clients import V5, V311, Paho, Raw, mqtt_broker
from petrel.codec.mqtt import (
    ConnackCode,
    Connect,
    Disconnect,
    PropertyId as P,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
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


def test_qos_0_1_2_round_trips_with_wildcards_in_3_1_1_and_5(b):
    for version in (V311, V5):
        sub = Paho(b.mqtt_port, f"sub-{version}", version=version)
        sub.subscribe("rt/+/x", 2)
        sub.subscribe("rt/deep/#", 1)
        pub = Paho(b.port, version=version)  # the all-protocols port speaks MQTT too
        for qos in (0, 1, 2):
            pub.publish("rt/a/x", f"q{qos}".encode(), qos)
        pub.publish("rt/deep/er/still", b"deep", 2)
        pub.publish("rt/a/y", b"no match", 1)
        got = sub.drain()
        assert sorted((m.topic, m.payload, m.qos) for m in got) == [
            ("rt/a/x", b"q0", 0), ("rt/a/x", b"q1", 1), ("rt/a/x", b"q2", 2), ("rt/deep/er/still", b"deep", 1)]
        sub.close()
        pub.close()


def test_aiomqtt_round_trip(b):
    import aiomqtt

    async def run() -> list:
        async with aiomqtt.Client("127.0.0.1", b.mqtt_port, identifier="aio-sub") as sub, \
                aiomqtt.Client("127.0.0.1", b.mqtt_port, identifier="aio-pub") as pub:
            await sub.subscribe("aio/#", qos=2)
            for i in range(5):
                await pub.publish(f"aio/{i}", f"m{i}".encode(), qos=i % 3)
            out = []
            async with asyncio.timeout(10):
                async for message in sub.messages:
                    out.append((str(message.topic), message.payload))
                    if len(out) == 5:
                        return out
        return []

    assert sorted(asyncio.run(run())) == [(f"aio/{i}", f"m{i}".encode()) for i in range(5)]


def test_a_persistent_session_keeps_subscriptions_and_unacknowledged_messages_through_kill_9(b):
    sub = Paho(b.mqtt_port, "keeper", clean=False)
    sub.subscribe("ps/#", 1)
    sub.close()
    raw = Raw(b.mqtt_port, Connect("holder", 4, clean_start=False))
    raw.send(Subscribe(1, (Subscription("hold/it", 1),)))
    assert isinstance(raw.recv(), Suback)
    pub = Paho(b.mqtt_port, "ps-pub")
    for i in range(5):
        pub.publish(f"ps/{i}", f"kept {i}".encode(), 1)  # PUBACKed: durable
    pub.publish("hold/it", b"never acked", 1)
    delivered = raw.recv()
    assert isinstance(delivered, Publish) and delivered.payload == b"never acked" and not delivered.dup
    pub.close()
    b.kill9()
    b.start()
    sub = Paho(b.mqtt_port, "keeper", clean=False)
    assert sub.connack[0].session_present
    assert sorted(m.payload for m in sub.drain()) == [f"kept {i}".encode() for i in range(5)]
    sub.close()
    raw = Raw(b.mqtt_port, Connect("holder", 4, clean_start=False))  # no SUBSCRIBE again
    assert raw.connack.session_present
    again = raw.recv()
    # its packet id was kept: the same PUBLISH again, marked DUP
    assert (again.payload, again.qos, again.dup, again.packet_id) == (b"never acked", 1, True, delivered.packet_id)
    raw.send(Puback(again.packet_id))
    raw.send(Disconnect())
    raw.close()
    # acknowledged now: a third session gets nothing more
    raw = Raw(b.mqtt_port, Connect("holder", 4, clean_start=False))
    with pytest.raises(TimeoutError):
        raw.recv(timeout=1.0)
    raw.close()
    # a clean start ends the session: its subscription is gone
    Raw(b.mqtt_port, Connect("keeper", 4, clean_start=True)).send(Disconnect())
    pub = Paho(b.mqtt_port, "ps-pub2")
    pub.publish("ps/late", b"late", 1)
    pub.close()
    sub = Paho(b.mqtt_port, "keeper", clean=False)
    assert not sub.connack[0].session_present
    assert sub.drain(idle=0.5) == []
    sub.close()


def test_qos_2_is_exactly_once_through_kill_9(b):
    sub = Paho(b.mqtt_port, "eo-sub", clean=False)
    sub.subscribe("eo/#", 2)
    sub.close()
    pub = Raw(b.mqtt_port, Connect("eo-pub", 5, clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 600}))
    # 1: PUBREC seen, then a crash; PUBREL after the restart releases it once
    pub.send(Publish("eo/one", b"one", 2, packet_id=1))
    assert isinstance(pub.recv(), Pubrec)
    # 2: PUBREC lost in the crash (as the client sees it): the PUBLISH is sent again, DUP
    pub.send(Publish("eo/two", b"two", 2, packet_id=2))
    assert isinstance(pub.recv(), Pubrec)
    b.kill9()
    b.start()
    pub = Raw(b.mqtt_port, Connect("eo-pub", 5, clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 600}))
    assert pub.connack.session_present
    pub.send(Pubrel(1))
    assert pub.recv() == Pubcomp(1)
    pub.send(Publish("eo/two", b"two", 2, dup=True, packet_id=2))
    assert isinstance(pub.recv(), Pubrec)
    pub.send(Pubrel(2))
    assert pub.recv() == Pubcomp(2)
    pub.send(Pubrel(2))  # PUBCOMP lost, PUBREL again: answered, nothing routed
    assert isinstance(pub.recv(), Pubcomp)
    pub.send(Disconnect())
    pub.close()
    sub = Paho(b.mqtt_port, "eo-sub", clean=False)
    got = sub.drain()
    assert sorted(m.payload for m in got) == [b"one", b"two"]
    sub.close()


def test_retained_messages_are_replaced_cleared_and_kept_across_a_restart(b):
    pub = Paho(b.mqtt_port, "rp", version=V5)
    pub.publish("ret/a", b"first", 1, retain=True)
    pub.publish("ret/a", b"second", 1, retain=True)
    pub.publish("ret/b", b"bee", 0, retain=True)
    pub.publish("ret/c", b"gone", 1, retain=True)
    pub.publish("ret/c", b"", 1, retain=True)  # clears it
    pub.close()
    b.kill9()
    b.start()
    sub = Paho(b.mqtt_port, "rs", version=V5)
    sub.subscribe("ret/+", 1)
    got = sub.drain()
    assert sorted((m.topic, m.payload, m.retain) for m in got) == [("ret/a", b"second", True),
                                                                   ("ret/b", b"bee", True)]
    pub = Paho(b.mqtt_port, "rp2", version=V5)
    pub.publish("ret/a", b"live", 1, retain=True)
    live = sub.get()
    assert (live.payload, live.retain) == (b"live", False)  # retain as published is off
    sub.close()
    pub.close()


def test_a_will_is_published_on_an_abrupt_end_and_not_on_disconnect(b):
    watcher = Paho(b.mqtt_port, "watcher")
    watcher.subscribe("wills/#", 1)
    gone = Raw(b.mqtt_port, Connect("mortal", 4, will=Will("wills/mortal", b"died", 1)))
    polite = Raw(b.mqtt_port, Connect("polite", 4, will=Will("wills/polite", b"should not", 1)))
    polite.send(Disconnect())
    assert polite.recv_until_closed() == []
    gone.abort()
    will = watcher.get()
    assert (will.topic, will.payload) == ("wills/mortal", b"died")
    # 5.0 will delay: the client is back in time, no will
    late = Raw(b.mqtt_port, Connect("delayed", 5, clean_start=False, will=Will(
        "wills/delayed", b"late", 1, properties={P.WILL_DELAY_INTERVAL: 30}),
        properties={P.SESSION_EXPIRY_INTERVAL: 60}))
    late.abort()
    back = Raw(b.mqtt_port, Connect("delayed", 5, clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 60}))
    back.send(Disconnect())
    assert watcher.drain(idle=1.0) == []
    # a session taken over: the old connection's will, at once (3.1.1, no delay)
    first = Raw(b.mqtt_port, Connect("twice", 4, will=Will("wills/twice", b"taken over", 1)))
    second = Raw(b.mqtt_port, Connect("twice", 4))
    assert watcher.get().payload == b"taken over"
    assert first.recv_until_closed() == []  # closed by the broker
    second.send(Disconnect())
    # 5.0, delayed: a clean start ends the old session, so its will goes then
    Raw(b.mqtt_port, Connect("later", 5, clean_start=False, will=Will(
        "wills/later", b"session ended", 1, properties={P.WILL_DELAY_INTERVAL: 60}),
        properties={P.SESSION_EXPIRY_INTERVAL: 120})).abort()
    assert watcher.drain(idle=0.5) == []
    Raw(b.mqtt_port, Connect("later", 5, clean_start=True))
    assert watcher.get().payload == b"session ended"
    watcher.close()


def test_keep_alive_closes_a_silent_client_after_one_and_a_half_intervals_with_its_will(b):
    watcher = Paho(b.mqtt_port, "ka-watch")
    watcher.subscribe("ka/#", 1)
    silent = Raw(b.mqtt_port, Connect("silent", 5, keep_alive=1, will=Will("ka/silent", b"timed out", 0)))
    assert silent.recv_until_closed(timeout=10) == [Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT,
                                                               {P.REASON_STRING: "keep alive timeout"})]
    assert watcher.get().payload == b"timed out"
    watcher.close()


def test_shared_subscriptions_spread_messages_over_the_group(b):
    one = Paho(b.mqtt_port, "share-1", version=V5)
    two = Paho(b.mqtt_port, "share-2", version=V5)
    one.subscribe("$share/workers/jobs/#", 1)
    two.subscribe("$share/workers/jobs/#", 1)
    solo = Paho(b.mqtt_port, "solo", version=V5)
    solo.subscribe("jobs/#", 1)
    pub = Paho(b.mqtt_port, "jobs-pub")
    for i in range(20):
        pub.publish(f"jobs/{i}", str(i).encode(), 1)
    first, second = one.drain(), two.drain()
    assert first and second
    assert sorted(int(m.payload) for m in first + second) == list(range(20))
    assert len(solo.drain()) == 20
    for c in (one, two, solo, pub):
        c.close()


def test_mqtt_5_properties_and_reason_codes(b):
    sub = Paho(b.mqtt_port, "props-sub", version=V5)
    props = Properties(PacketTypes.SUBSCRIBE)
    props.SubscriptionIdentifier = 42
    sub.subscribe("props/#", 1, properties=props)
    pub = Paho(b.mqtt_port, "props-pub", version=V5)
    pp = Properties(PacketTypes.PUBLISH)
    pp.UserProperty = [("colour", "blue"), ("size", "9")]
    pp.ContentType = "text/plain"
    pp.ResponseTopic = "props/replies"
    pp.CorrelationData = b"corr-1"
    pp.MessageExpiryInterval = 3600
    pp.PayloadFormatIndicator = 1
    pub.publish("props/a", b"with properties", 1, properties=pp)
    m = sub.get()
    got = m.properties
    assert m.payload == b"with properties"
    assert got.UserProperty == [("colour", "blue"), ("size", "9")]
    assert (got.ContentType, got.ResponseTopic, got.CorrelationData) == ("text/plain", "props/replies", b"corr-1")
    assert 3500 < got.MessageExpiryInterval <= 3600 and got.PayloadFormatIndicator == 1
    assert got.SubscriptionIdentifier == [42]
    raw = Raw(b.mqtt_port, Connect("props-raw", 5))
    assert raw.connack.properties[P.TOPIC_ALIAS_MAXIMUM] > 0
    raw.send(Subscribe(1, (Subscription("bad/#/x", 1), Subscription("ok/+", 2), Subscription("/lead", 0))))
    assert raw.recv().reasons == (ReasonCode.TOPIC_FILTER_INVALID, 2, ReasonCode.TOPIC_FILTER_INVALID)
    raw.send(Publish("nobody/here", b"x", 1, packet_id=5))
    assert raw.recv() == Puback(5, ReasonCode.NO_MATCHING_SUBSCRIBERS)
    raw.send(Publish("ok/utf8", b"\xff\xfe", 1, packet_id=8, properties={P.PAYLOAD_FORMAT_INDICATOR: 1}))
    refused = raw.recv()
    assert (refused.packet_id, refused.reason) == (8, ReasonCode.PAYLOAD_FORMAT_INVALID)
    assert refused.properties[P.REASON_STRING]
    raw.send(Publish("ok/alias", b"named", 1, packet_id=6, properties={P.TOPIC_ALIAS: 1}))
    raw.send(Publish("", b"by alias", 1, packet_id=7, properties={P.TOPIC_ALIAS: 1}))
    packets = [raw.recv() for _ in range(4)]
    assert sorted(p.payload for p in packets if isinstance(p, Publish)) == [b"by alias", b"named"]
    raw.send(Disconnect())
    assert Paho(b.mqtt_port, "", version=V5).connack[2].AssignedClientIdentifier.startswith("petrel-")
    sub.close()
    pub.close()


def test_a_malformed_packet_gets_its_reason_code_and_others_keep_working(b):
    other = Paho(b.mqtt_port, "bystander")
    other.subscribe("still/#", 1)
    bad = Raw(b.mqtt_port, Connect("bad5", 5))
    bad.send_bytes(b"\x36\x05\x00\x01t\x00\x01")  # QoS 3
    assert bad.recv_until_closed() == [Disconnect(ReasonCode.MALFORMED_PACKET, {
        P.REASON_STRING: "malformed packet: PUBLISH with QoS 3"})]
    bad311 = Raw(b.mqtt_port, Connect("bad4", 4))
    bad311.send_bytes(b"\x82\x02\x00\x01")  # SUBSCRIBE without a filter
    assert bad311.recv_until_closed() == []  # 3.1.1: the connection closes
    wrong = Raw(b.mqtt_port)
    wrong.send_bytes(b"\x10\x0c\x00\x04MQTT\x07\x02\x00\x3c\x00\x00")  # level 7
    assert [p.reason for p in wrong.recv_until_closed()] == [ConnackCode.UNACCEPTABLE_PROTOCOL_VERSION]
    other.publish("still/here", b"fine", 1)
    assert other.get().payload == b"fine"
    other.close()


def test_receive_maximum_bounds_deliveries_in_flight_and_packet_sizes_are_kept(b):
    raw = Raw(b.mqtt_port, Connect("narrow", 5, properties={P.RECEIVE_MAXIMUM: 2, P.MAXIMUM_PACKET_SIZE: 200}))
    raw.send(Subscribe(1, (Subscription("win/#", 1),)))
    assert isinstance(raw.recv(), Suback)
    pub = Paho(b.mqtt_port, "win-pub")
    pub.publish("win/big", b"x" * 500, 1)  # over the client's maximum packet size: not sent
    for i in range(5):
        pub.publish(f"win/{i}", str(i).encode(), 1)
    first = [raw.recv(), raw.recv()]
    assert [p.payload for p in first] == [b"0", b"1"]
    with pytest.raises(TimeoutError):
        raw.recv(timeout=0.7)  # two in flight: the window is full
    raw.send(Puback(first[0].packet_id))
    third = raw.recv()
    assert third.payload == b"2"
    pub.close()
    raw.send_bytes(b"\x30\xff\xff\xff\x7f")  # a PUBLISH of 256 MiB announced: over the broker's maximum
    assert [p.reason for p in raw.recv_until_closed() if isinstance(p, Disconnect)] == [
        ReasonCode.PACKET_TOO_LARGE]


def test_session_expiry_and_take_over(b):
    expiry = {P.SESSION_EXPIRY_INTERVAL: 3}
    first = Raw(b.mqtt_port, Connect("twin", 5, clean_start=False, properties=expiry))
    first.send(Subscribe(1, (Subscription("exp/#", 1),)))
    assert isinstance(first.recv(), Suback)
    second = Raw(b.mqtt_port, Connect("twin", 5, clean_start=False, properties=expiry))
    assert second.connack.session_present
    assert first.recv_until_closed() == [Disconnect(ReasonCode.SESSION_TAKEN_OVER)]
    second.send(Disconnect())
    assert second.recv_until_closed() == []
    probe = Raw(b.mqtt_port, Connect("exp-probe", 5))
    ids = iter(range(1, 1000))

    def ack_of_a_publish() -> int:
        pid = next(ids)
        probe.send(Publish("exp/x", b"x", 1, packet_id=pid))
        return probe.recv().reason

    assert ack_of_a_publish() == 0  # the session's subscription holds it
    from petrel.testing.process import wait_for

    wait_for(lambda: ack_of_a_publish() == ReasonCode.NO_MATCHING_SUBSCRIBERS, timeout=20, interval=0.5,
             message="the session did not expire")
    third = Raw(b.mqtt_port, Connect("twin", 5, clean_start=False))
    assert not third.connack.session_present


def test_unsubscribe_no_local_and_retain_handling(b):
    from petrel.codec.mqtt import Unsuback, Unsubscribe

    pub = Paho(b.mqtt_port, "opt-pub")
    pub.publish("opt/kept", b"retained", 1, retain=True)
    pub.close()
    raw = Raw(b.mqtt_port, Connect("opt", 5))
    raw.send(Subscribe(1, (Subscription("opt/#", 1, no_local=True, retain_handling=2),)))
    assert raw.recv() == Suback(1, (1,))
    raw.send(Publish("opt/own", b"mine", 1, packet_id=2))  # No Local: not back to me
    assert raw.recv() == Puback(2)
    with pytest.raises(TimeoutError):
        raw.recv(timeout=0.7)  # nor the retained message (retain handling 2)
    raw.send(Subscribe(3, (Subscription("opt/#", 1, retain_handling=1),)))  # exists: still no retained
    assert raw.recv() == Suback(3, (1,))
    raw.send(Subscribe(4, (Subscription("opt/+", 1, retain_handling=1),)))  # new: retained sent
    assert raw.recv() == Suback(4, (1,))
    kept = raw.recv()
    assert (kept.payload, kept.retain) == (b"retained", True)
    raw.send(Puback(kept.packet_id))
    raw.send(Subscribe(6, (Subscription("opt/#", 0, retain_handling=2),)))  # again, QoS 0: it goes on
    assert raw.recv() == Suback(6, (0,))
    other = Paho(b.mqtt_port, "opt-pub1")
    other.publish("opt/again", b"still subscribed", 1)
    other.close()
    packets = [raw.recv(), raw.recv()]  # through opt/# (QoS 0 now) and opt/+ (QoS 1)
    assert sorted((p.payload, p.qos) for p in packets) == [(b"still subscribed", 0), (b"still subscribed", 1)]
    raw.send(Puback(next(p.packet_id for p in packets if p.qos)))
    raw.send(Unsubscribe(5, ("opt/#", "opt/+", "never/subscribed")))
    assert raw.recv() == Unsuback(5, (0, 0, ReasonCode.NO_SUBSCRIPTION_EXISTED))
    other = Paho(b.mqtt_port, "opt-pub2")
    other.publish("opt/after", b"nobody", 1)
    other.close()
    with pytest.raises(TimeoutError):
        raw.recv(timeout=0.7)


def test_a_session_expires_after_a_restart_without_any_mqtt_client(b):
    raw = Raw(b.mqtt_port, Connect("short-lived", 5, clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 2}))
    raw.send(Subscribe(1, (Subscription("brief/#", 1),)))
    assert isinstance(raw.recv(), Suback)
    raw.send(Disconnect())
    assert raw.recv_until_closed() == []
    b.kill9()
    b.start()
    from petrel.testing.process import wait_for

    wait_for(lambda: "MQTT session short-lived expired" in b.log(), timeout=20,
             message="the session did not expire after the restart")
    again = Raw(b.mqtt_port, Connect("short-lived", 5, clean_start=False))
    assert not again.connack.session_present


def test_random_bytes_never_take_the_broker_down_nor_reach_an_internal_error(b):
    import random
    import socket as socketlib

    rng = random.Random(1883)
    for i in range(60):
        s = socketlib.create_connection(("127.0.0.1", b.mqtt_port), timeout=2)
        data = b""
        if i % 3:
            from petrel.codec.mqtt import MqttConnection
            from petrel.codec.roles import Role

            data = MqttConnection(Role.CLIENT).send(Connect(f"fuzz{i}", 4 + i % 2))
        for _ in range(rng.randint(1, 4)):
            first = rng.choice([0x30, 0x32, 0x34, 0x36, 0x3B, 0x40, 0x50, 0x62, 0x70, 0x82, 0x8A, 0xA2, 0xC0,
                                0xE0, 0xF0, rng.randrange(256)])
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
            data += bytes((first, len(body))) + body
        s.sendall(data)
        try:
            while s.recv(65536):
                pass
        except OSError:  # TimeoutError too: a packet still waiting for its bytes
            pass
        s.close()
    log = b.log_path.read_text(errors="replace")
    assert "internal error" not in log and "Traceback" not in log
    assert log.count("MQTT error for") >= 20  # the refusals were exercised
    pub = Paho(b.mqtt_port, "after-fuzz", version=V5)
    pub.subscribe("fuzz/ok", 1)
    pub.publish("fuzz/ok", b"alive", 1)
    assert pub.get().payload == b"alive"
    pub.close()


def test_qos_2_to_a_subscriber_resumes_after_a_reconnect(b):
    sub = Raw(b.mqtt_port, Connect("q2-sub", 4, clean_start=False))
    sub.send(Subscribe(1, (Subscription("q2/#", 2),)))
    assert isinstance(sub.recv(), Suback)
    pub = Paho(b.mqtt_port, "q2-pub")
    pub.publish("q2/a", b"first", 2)
    pub.publish("q2/b", b"second", 2)
    one, two = sub.recv(), sub.recv()
    assert (one.payload, one.qos, two.payload) == (b"first", 2, b"second")
    sub.send(Pubrec(one.packet_id))
    assert sub.recv() == Pubrel(one.packet_id)
    sub.close()  # gone before PUBCOMP for "first", and before PUBREC for "second"
    sub = Raw(b.mqtt_port, Connect("q2-sub", 4, clean_start=False))
    first_back = sub.recv()
    assert first_back == Pubrel(one.packet_id)  # the PUBREL again, not the message
    again = sub.recv()
    assert (again.payload, again.dup, again.packet_id) == (b"second", True, two.packet_id)
    sub.send(Pubcomp(one.packet_id))
    sub.send(Pubrec(again.packet_id))
    assert sub.recv() == Pubrel(again.packet_id)
    sub.send(Pubcomp(again.packet_id))
    with pytest.raises(TimeoutError):
        sub.recv(timeout=0.7)
    pub.close()


def test_a_paho_5_session_with_an_expiry_survives_kill_9(b):
    sub = Paho(b.mqtt_port, "paho5-keeper", version=V5, clean=False, expiry=300)
    sub.subscribe("p5/+", 2)
    sub.close()
    pub = Paho(b.mqtt_port, "paho5-pub", version=V5)
    for i in range(10):
        pub.publish(f"p5/{i}", f"m{i}".encode(), 1 + i % 2)
    pub.close()
    b.kill9()
    b.start()
    sub = Paho(b.mqtt_port, "paho5-keeper", version=V5, clean=False, expiry=300)
    assert sub.connack[0].session_present
    got = sub.drain()
    assert sorted(m.payload for m in got) == sorted(f"m{i}".encode() for i in range(10))
    assert sorted(m.qos for m in got) == [1] * 5 + [2] * 5
    sub.close()


def test_a_qos_2_delivery_between_pubrec_and_pubcomp_is_completed_after_kill_9(b):
    sub = Raw(b.mqtt_port, Connect("rel-sub", 4, clean_start=False))
    sub.send(Subscribe(1, (Subscription("rel/#", 2),)))
    assert isinstance(sub.recv(), Suback)
    pub = Paho(b.mqtt_port, "rel-pub")
    pub.publish("rel/x", b"once", 2)
    pub.close()
    delivered = sub.recv()
    sub.send(Pubrec(delivered.packet_id))
    assert sub.recv() == Pubrel(delivered.packet_id)
    b.kill9()  # before the PUBCOMP
    b.start()
    sub = Raw(b.mqtt_port, Connect("rel-sub", 4, clean_start=False))
    assert sub.connack.session_present
    assert sub.recv() == Pubrel(delivered.packet_id)  # again, with its packet id; not the message
    sub.send(Pubcomp(delivered.packet_id))
    with pytest.raises(TimeoutError):
        sub.recv(timeout=0.7)
    sub.send(Disconnect())
    b.kill9()
    b.start()
    sub = Raw(b.mqtt_port, Connect("rel-sub", 4, clean_start=False))
    with pytest.raises(TimeoutError):
        sub.recv(timeout=0.7)  # completed for good: nothing after another restart


def test_a_3_mib_payload_round_trips_and_survives_kill_9(b):
    payload = bytes(range(256)) * (3 * 4096)
    sub = Paho(b.mqtt_port, "big-sub", clean=False)
    sub.subscribe("big/one", 1)
    sub.close()
    pub = Paho(b.mqtt_port, "big-pub", version=V5)
    pub.publish("big/one", payload, 1)
    pub.close()
    b.kill9()
    b.start()
    sub = Paho(b.mqtt_port, "big-sub", clean=False)
    assert sub.get().payload == payload
    sub.close()
