"""AMQP messages to Petrel's and back (amqp_convert): every mapped field, body kinds, typed ids,
and addresses as Qpid JMS and proton name them."""

from __future__ import annotations

import uuid

from petrel.codec.amqp.message import AmqpMessage, decode_message, encode_message
from petrel.codec.amqp.performatives import Header, Properties
from petrel.codec.amqp.types import Symbol, Timestamp, UByte, UInt, ULong
from petrel.core.message import GROUP_ID, Message, RoutingType
from petrel.server.adapters.amqp_convert import parse_address, to_amqp, to_petrel

NOW = 1_700_000_000_000


def test_addresses():
    assert parse_address("queue://orders", None) == ("orders", RoutingType.ANYCAST)
    assert parse_address("topic://news", ("queue",)) == ("news", RoutingType.MULTICAST)
    assert parse_address("orders", ("queue",)) == ("orders", RoutingType.ANYCAST)
    assert parse_address("news", (Symbol("topic"),)) == ("news", RoutingType.MULTICAST)
    assert parse_address("plain", None) == ("plain", None)
    assert parse_address(None, None) == (None, None)


def full_message() -> AmqpMessage:
    return AmqpMessage(
        header=Header(durable=True, priority=UByte(8), ttl=UInt(5000)),
        message_annotations={Symbol("x-opt-jms-msg-type"): 5, Symbol("x-opt-custom"): "a"},
        properties=Properties(message_id=uuid.UUID(int=7), subject="subj", reply_to="queue://r",
                              correlation_id=ULong(42), content_type=Symbol("text/plain"),
                              group_id="g1", group_sequence=UInt(3), creation_time=Timestamp(NOW - 10)),
        application_properties={"s": "v", "i": 7, "f": 0.5, "b": False, "n": None, "bin": b"\x00"},
        body_kind="value", body="héllo",
    )


def test_amqp_to_petrel_maps_every_field():
    m = to_petrel(encode_message(full_message()), message_id=9, address="q", now=NOW)
    assert (m.id, m.address, m.body, m.durable, m.priority) == (9, "q", "héllo".encode(), True, 8)
    assert m.expiration == NOW + 5000 and m.timestamp == NOW - 10
    assert m.properties["s"] == "v" and m.properties["i"] == 7 and m.properties["bin"] == b"\x00"
    assert m.properties["subject"] == "subj" and m.properties["reply-to"] == "queue://r"
    assert m.properties["content-type"] == "text/plain" and m.properties[GROUP_ID] == "g1"


def test_round_trip_keeps_what_a_client_sees():
    original = full_message()
    m = to_petrel(encode_message(original), message_id=9, address="q", now=NOW)
    back = decode_message(to_amqp(m, delivery_count=2))
    assert back.body_kind == "value" and back.body == "héllo"
    assert back.header.durable is True and back.header.priority == 8 and back.header.delivery_count == 2
    p = back.properties
    assert p.message_id == uuid.UUID(int=7) and p.correlation_id == 42 and type(p.correlation_id) is ULong
    assert (p.subject, p.reply_to, p.content_type, p.group_id, p.group_sequence) == (
        "subj", "queue://r", "text/plain", "g1", 3)
    assert p.absolute_expiry_time == NOW + 5000 and p.to == "q"
    assert back.application_properties == original.application_properties
    assert back.message_annotations == {"x-opt-jms-msg-type": 5, "x-opt-custom": "a"}


def test_body_kinds():
    for kind, body in (("data", [b"a", b"b"]), ("value", b"\x01"), ("value", {"k": [1, 2]}),
                       ("sequence", [[1], ["x"]]), (None, None)):
        m = to_petrel(encode_message(AmqpMessage(body_kind=kind, body=body)), message_id=1, address="q", now=NOW)
        back = decode_message(to_amqp(m, 0))
        if kind == "data":
            assert back.body == [b"ab"]  # several data sections are joined
        elif kind is None:  # a bare message has a body: an empty data section
            assert (back.body_kind, back.body) == ("data", [b""])
        else:
            assert (back.body_kind, back.body) == (kind, body)


def test_a_message_from_another_protocol_goes_out_as_one_data_section():
    m = Message(id=5, address="q", body=b"stomp body", properties={"color": "red", "correlation-id": "c1",
                                                                   "content-type": "text/plain"},
                durable=True, priority=6, expiration=NOW, timestamp=NOW - 1)
    back = decode_message(to_amqp(m, 0))
    assert back.body_kind == "data" and back.body == [b"stomp body"]
    assert back.application_properties == {"color": "red"}
    assert back.properties.correlation_id == "c1" and back.properties.content_type == "text/plain"
    assert back.properties.message_id == "ID:5" and back.header.priority == 6
    assert back.properties.absolute_expiry_time == NOW


def test_scheduled_delivery_annotations():
    m = to_petrel(encode_message(AmqpMessage(message_annotations={Symbol("x-opt-delivery-delay"): 3000},
                                             body_kind="data", body=[b""])), message_id=1, address="q", now=NOW)
    assert m.scheduled == NOW + 3000
    m = to_petrel(encode_message(AmqpMessage(message_annotations={Symbol("x-opt-delivery-time"): NOW + 50},
                                             body_kind="data", body=[b""])), message_id=1, address="q", now=NOW)
    assert m.scheduled == NOW + 50


def test_the_bare_message_is_encoded_once_per_message_and_the_header_each_time():
    m = Message(id=5, address="q", body=b"b", properties={"k": "v"}, durable=True)
    first = decode_message(to_amqp(m, 0))
    assert m.wire_cache is not None and m.wire_cache[0] == "amqp"
    m.properties["k"] = "changed"  # (not expected in the broker: shows the cache is what goes out)
    again = decode_message(to_amqp(m, 3))
    assert again.application_properties == first.application_properties == {"k": "v"}
    assert first.header.delivery_count is None and again.header.delivery_count == 3
    m.wire_cache = ("1.2", b"stomp's")  # another protocol's cache is replaced, not used
    assert decode_message(to_amqp(m, 0)).application_properties == {"k": "changed"}
