"""Hypothesis: any bytes fed to the MQTT codec, in any chunks, give packets or an
MqttProtocolError, nothing else; and every valid packet survives a round trip."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from petrel.codec.mqtt import NEED_DATA, Connect, MqttConnection, MqttProtocolError, Publish, detect
from petrel.codec.mqtt import PropertyId as P
from petrel.codec.roles import Role

CONNECTS = [MqttConnection(Role.CLIENT).send(Connect("fuzz", level)) for level in (4, 5)]


def drain(conn: MqttConnection, chunks: list[bytes]) -> None:
    for chunk in chunks:
        conn.receive_data(chunk)
        while conn.next_event() is not NEED_DATA:
            pass


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([b""] + CONNECTS), st.lists(st.binary(max_size=64), max_size=8))
def test_any_bytes_give_packets_or_a_protocol_error(opening, chunks):
    conn = MqttConnection(max_packet_size=4096)
    try:
        drain(conn, [opening] + chunks)
    except MqttProtocolError as exc:
        assert 0x80 <= exc.reason <= 0xA2
    detect(opening + b"".join(chunks))  # never raises


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([4, 5]), st.text(min_size=1, max_size=20).filter(lambda t: "\x00" not in t),
       st.binary(max_size=200), st.integers(0, 2), st.booleans(),
       st.lists(st.tuples(st.text(max_size=5).filter(lambda t: "\x00" not in t),
                          st.text(max_size=5).filter(lambda t: "\x00" not in t)), max_size=3))
def test_publish_round_trips(level, topic, payload, qos, retain, user):
    client, server = MqttConnection(Role.CLIENT), MqttConnection()
    server.receive_data(client.send(Connect("c", level)))
    server.next_event()
    props = {P.USER_PROPERTY: user} if level == 5 and user else {}
    packet = Publish(topic, payload, qos, retain, False, 1 if qos else None, props)
    server.receive_data(client.send(packet))
    assert server.next_event() == packet
