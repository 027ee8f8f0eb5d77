"""The MQTT codec: every packet both ways in 3.1.1 and 5.0, whole, byte by byte and with
trailing bytes; malformed packets raise MqttProtocolError with their reason code; detection."""

from __future__ import annotations

import pytest

from petrel.codec.mqtt import (
    NEED_DATA,
    Auth,
    Connack,
    Connect,
    Disconnect,
    MqttConnection,
    MqttLocalError,
    MqttProtocolError,
    Pingreq,
    Pingresp,
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
    Unsuback,
    Unsubscribe,
    Will,
    decode_varint_prefix,
    detect,
    encode_varint,
)
from petrel.codec.roles import Role

PUBLISH_PROPS = {P.PAYLOAD_FORMAT_INDICATOR: 1, P.MESSAGE_EXPIRY_INTERVAL: 30, P.CONTENT_TYPE: "text/plain",
                 P.RESPONSE_TOPIC: "re/ply", P.CORRELATION_DATA: b"\x00\x01", P.TOPIC_ALIAS: 3,
                 P.SUBSCRIPTION_IDENTIFIER: [7, 300000], P.USER_PROPERTY: [("k", "v"), ("k", "w")]}


def client_packets(level: int) -> list:
    v5 = level == 5
    props = PUBLISH_PROPS if v5 else {}
    return [
        Publish("a/b", b"hello", 0),
        Publish("a/b", b"x" * 300, 1, retain=True, packet_id=1, properties=props),
        Publish("a/\u00e9", b"", 2, dup=True, packet_id=65535),
        Puback(5), Pubrec(6), Pubrel(7), Pubcomp(8),
        Puback(9, ReasonCode.NO_MATCHING_SUBSCRIBERS if v5 else 0,
               {P.REASON_STRING: "none"} if v5 else {}),
        Subscribe(10, (Subscription("a/+", 1), Subscription("#", 2, no_local=v5, retain_as_published=v5,
                                                            retain_handling=2 if v5 else 0)),
                  {P.SUBSCRIPTION_IDENTIFIER: [12]} if v5 else {}),
        Unsubscribe(11, ("a/+", "#")),
        Pingreq(),
        Disconnect(ReasonCode.DISCONNECT_WITH_WILL if v5 else 0,
                   {P.SESSION_EXPIRY_INTERVAL: 0} if v5 else {}),
    ] + ([Auth(ReasonCode.CONTINUE_AUTHENTICATION, {P.AUTHENTICATION_METHOD: "x"})] if v5 else [])


def server_packets(level: int) -> list:
    v5 = level == 5
    return [
        Publish("x", b"y", 1, packet_id=3, properties={P.USER_PROPERTY: [("a", "b")]} if v5 else {}),
        Suback(10, (0, 1, 2, 0x80)),
        Unsuback(11, (0, 0x11) if v5 else ()),
        Pingresp(),
        Pubcomp(2, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if v5 else 0),
    ]


def connect(level: int) -> Connect:
    v5 = level == 5
    return Connect("client-1", level, clean_start=False, keep_alive=30, username="u", password=b"p\x00w",
                   will=Will("will/t", b"bye", 1, True, {P.WILL_DELAY_INTERVAL: 5} if v5 else {}),
                   properties={P.SESSION_EXPIRY_INTERVAL: 3600, P.RECEIVE_MAXIMUM: 10,
                               P.MAXIMUM_PACKET_SIZE: 1 << 20, P.TOPIC_ALIAS_MAXIMUM: 5} if v5 else {})


def pair(level: int) -> tuple[MqttConnection, MqttConnection]:
    client, server = MqttConnection(Role.CLIENT), MqttConnection(Role.SERVER)
    server.receive_data(client.send(connect(level)))
    assert server.next_event() == connect(level)
    assert server.level == level
    client.receive_data(server.send(Connack(0, True, {P.ASSIGNED_CLIENT_IDENTIFIER: "c"} if level == 5 else {})))
    assert isinstance(client.next_event(), Connack)
    return client, server


def events(conn: MqttConnection) -> list:
    out = []
    while (event := conn.next_event()) is not NEED_DATA:
        out.append(event)
    return out


@pytest.mark.parametrize("level", [4, 5])
@pytest.mark.parametrize("feed", ["whole", "bytewise", "trailing"])
def test_every_packet_round_trips(level, feed):
    for sender_is_client in (True, False):
        client, server = pair(level)
        sender, receiver = (client, server) if sender_is_client else (server, client)
        packets = client_packets(level) if sender_is_client else server_packets(level)
        wire = b"".join(sender.send(p) for p in packets)
        got = []
        if feed == "whole":
            receiver.receive_data(wire)
            got = events(receiver)
        elif feed == "bytewise":
            for i in range(len(wire)):
                receiver.receive_data(wire[i:i + 1])
                got += events(receiver)
        else:
            half = Publish("t", b"z" * 10, 0)
            tail = sender.send(half)[:5]
            receiver.receive_data(wire + tail)
            got = events(receiver)
            assert receiver.trailing == tail
        assert got == packets


def test_level_3_1_connect_and_a_password_without_a_user_in_5():
    server = MqttConnection()
    wire = MqttConnection(Role.CLIENT).send(Connect("old", 3))
    assert b"MQIsdp" in wire and detect(wire)
    server.receive_data(wire)
    assert server.next_event().level == 3
    server = MqttConnection()
    server.receive_data(MqttConnection(Role.CLIENT).send(Connect("", 5, password=b"secret")))
    assert server.next_event().password == b"secret"


def test_varints():
    for value in (0, 127, 128, 16383, 16384, 2097151, 2097152, 268435455):
        data = encode_varint(value)
        assert decode_varint_prefix(data, 0) == (value, len(data))
        assert decode_varint_prefix(data[:-1], 0) is None
    with pytest.raises(MqttProtocolError):
        decode_varint_prefix(b"\xff\xff\xff\xff\x01", 0)
    with pytest.raises(ValueError):
        encode_varint(268435456)


def error_of(data: bytes, *, connected: int | None = 4, max_packet_size: int | None = None) -> ReasonCode:
    server = MqttConnection(**({"max_packet_size": max_packet_size} if max_packet_size else {}))
    if connected:
        server.receive_data(MqttConnection(Role.CLIENT).send(Connect("c", connected)))
        server.next_event()
    server.receive_data(data)
    with pytest.raises(MqttProtocolError) as info:
        events(server)
    with pytest.raises(MqttProtocolError):  # broken for good
        server.next_event()
    return info.value.reason


def test_malformed_packets_carry_their_reason_code():
    M, PE = ReasonCode.MALFORMED_PACKET, ReasonCode.PROTOCOL_ERROR
    assert error_of(b"\x36\x05\x00\x01t\x00\x01") == M  # QoS 3
    assert error_of(b"\x38\x03\x00\x01t") == M  # DUP at QoS 0
    assert error_of(b"\x32\x05\x00\x01t\x00\x00") == PE  # packet id 0
    assert error_of(b"\x32\x03\x00\x01t") == M  # QoS 1 without its packet id
    assert error_of(b"\x60\x02\x00\x01") == M  # PUBREL with flags 0
    assert error_of(b"\x82\x02\x00\x01") == PE  # SUBSCRIBE without a filter
    assert error_of(b"\x82\x06\x00\x01\x00\x01a\x03") == M  # subscription QoS 3
    assert error_of(b"\x82\x06\x00\x01\x00\x01a\x04") == M  # 3.1.1: reserved option bits
    assert error_of(b"\x30\x04\x00\x02\xc3\x28") == M  # not UTF-8
    assert error_of(b"\x30\x04\x00\x02a\x00") == M  # U+0000
    assert error_of(b"\x30\x03\x00\x05a") == M  # string past the end
    assert error_of(b"\xc0\x01\x00") == M  # PINGREQ with a body
    assert error_of(b"\x00\x00") == M  # reserved type 0
    assert error_of(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00") == PE  # a second CONNECT
    assert error_of(b"\x20\x02\x00\x00") == PE  # a client sends no CONNACK
    assert error_of(b"\xc0\x00", connected=None) == PE  # PINGREQ before CONNECT
    assert error_of(b"\x10\x0c\x00\x04MQTT\x06\x02\x00\x3c\x00\x00", connected=None) == \
        ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    assert error_of(b"\x10\x0c\x00\x04MQTT\x04\x03\x00\x3c\x00\x00", connected=None) == M  # reserved flag
    assert error_of(b"\xf0\x00") == PE  # AUTH in 3.1.1
    assert error_of(b"\x30\xff\xff\xff\xff\x7f") == M  # five-byte remaining length
    assert error_of(b"\x30\x80\x80\x04", max_packet_size=1000) == ReasonCode.PACKET_TOO_LARGE  # refused unread


def test_v5_properties_are_checked():
    M, PE = ReasonCode.MALFORMED_PACKET, ReasonCode.PROTOCOL_ERROR
    assert error_of(b"\x30\x05\x00\x01t\x02\x7f\x00", connected=5) == M  # unknown property 0x7f
    assert error_of(b"\x30\x08\x00\x01t\x04\x01\x01\x01\x01", connected=5) == PE  # given twice
    assert error_of(b"\x30\x06\x00\x01t\x02\x01\x02", connected=5) == PE  # payload format 2
    assert error_of(b"\x30\x06\x00\x01t\x02\x0b\x00", connected=5) == PE  # subscription id 0
    assert error_of(b"\x30\x05\x00\x01t\x09\x01", connected=5) == M  # property length past the end


def test_local_errors_and_max_packet_size_passes_what_fits():
    server = MqttConnection(max_packet_size=20)
    with pytest.raises(MqttLocalError):
        server.send(Publish("t", b"", 0))  # before CONNACK
    client = MqttConnection(Role.CLIENT)
    with pytest.raises(MqttLocalError):
        client.send(Subscribe(1, (Subscription("a"),)))  # before CONNECT
    server.receive_data(client.send(Connect("c")))
    server.next_event()
    server.send(Connack())
    with pytest.raises(MqttLocalError):
        server.send(Connack())
    with pytest.raises(MqttLocalError):
        server.send(Publish("t", b"", 1))  # QoS 1 without a packet id
    fits = client.send(Publish("t", b"x" * 15, 0))
    assert len(fits) == 20
    server.receive_data(fits)
    assert server.next_event().payload == b"x" * 15


def test_detect():
    wire = MqttConnection(Role.CLIENT).send(Connect("c", 5))
    assert detect(wire) is True
    assert all(detect(wire[:n]) is None for n in range(8))
    assert detect(MqttConnection(Role.CLIENT).send(Connect("c", 4))) is True
    assert detect(b"\x10\x0c\x00\x04MQTT\x06") is True  # a level not spoken here: CONNACK says so
    assert detect(b"\x10\x0c\x00\x04MQTX") is False
    assert detect(b"\x20\x02") is False
    assert detect(b"CONNECT\n") is False


@pytest.mark.parametrize("level", [4, 5])
def test_publish_head_and_ack_are_the_events_bytes(level):
    """The delivery shortcuts (no event built) give the bytes `publish_parts` and `send` give."""
    from petrel.codec.mqtt import PacketType as T
    from petrel.codec.mqtt.wire import encode_str

    server = MqttConnection(Role.SERVER)
    server.receive_data(MqttConnection(Role.CLIENT).send(Connect("c", level)))
    server.next_event()
    with pytest.raises(MqttLocalError):  # nothing before CONNACK
        server.publish_head(encode_str("a"), 1, 0, None)
    server.send(Connack())
    for topic in ("a", "a/b", "é/" * 70):
        for size in (0, 1, 100, 127, 128, 20000, 3_000_000):
            for qos, pid in ((0, None), (1, 1), (2, 300), (1, 65535)):
                for retain in (False, True):
                    for dup in (False, True):
                        payload = b"x" * size
                        head, _ = server.publish_parts(Publish(topic, payload, qos, retain, dup and qos > 0, pid))
                        assert server.publish_head(encode_str(topic), size, qos, pid, retain=retain, dup=dup) == head
    with pytest.raises(MqttLocalError):
        server.publish_head(encode_str("a"), 1, 1, None)  # QoS 1 without a packet id
    for event, ptype in ((Puback, T.PUBACK), (Pubrec, T.PUBREC), (Pubrel, T.PUBREL), (Pubcomp, T.PUBCOMP)):
        for pid in (1, 255, 256, 65535):
            assert server.ack(ptype, pid) == server.send(event(pid))


def test_a_decoded_publish_is_a_frozen_publish_like_one_made_directly():
    import dataclasses

    from petrel.codec.mqtt.decode import decode_packet
    from petrel.codec.mqtt.packets import publish

    made = publish("a/b", b"body", 1, True, False, 7, {})
    decoded = decode_packet(0x33, b"\x00\x03a/b\x00\x07body", 4)
    for packet in (made, decoded):
        assert type(packet) is Publish and packet == Publish("a/b", b"body", 1, True, False, 7, {})
        with pytest.raises(dataclasses.FrozenInstanceError):
            packet.qos = 0  # type: ignore[misc]
    for first, ack in ((0x40, Puback), (0x50, Pubrec), (0x62, Pubrel), (0x70, Pubcomp)):
        packet = decode_packet(first, b"\x01\x02", 5)
        assert type(packet) is ack and packet == ack(0x102) and packet.reason is ReasonCode.SUCCESS
        with pytest.raises(dataclasses.FrozenInstanceError):
            packet.packet_id = 1  # type: ignore[misc]
