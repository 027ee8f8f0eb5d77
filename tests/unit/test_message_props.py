"""Message conversion per protocol: internal properties, text of typed values, MQTT's
response topic, and one wire-cache entry per protocol (petrel.core.message_props and the
adapters' conversions)."""

from __future__ import annotations

import base64

import msgspec

from petrel.codec.amqp.message import decode_message
from petrel.codec.mqtt import PropertyId as P
from petrel.codec.mqtt import Publish
from petrel.codec.stomp.escaping import ESCAPING
from petrel.core.message import WIRE_CACHE_LIMIT, Message
from petrel.core.message_props import is_internal, public, text
from petrel.core.queue import MessageReference
from petrel.server.adapters.amqp_convert import to_amqp
from petrel.server.adapters.core.consuming import scalars, wire_properties
from petrel.server.adapters.mqtt_messages import to_message, to_publish
from petrel.server.adapters.stomp_render import headers_of, render_message

INTERNAL = {"_MQTT_QOS": 1, "_MQTT_CLIENT": "secret-publisher", "_MQTT_FORMAT": 1, "_MQTT_RETAIN": True,
            "_AMQP_BODY": "binary", "_AMQP_MESSAGE_ID": "s:abc", "_AMQP_MA_x-opt-thing": "v"}


def message(props: dict, body: bytes = b"body") -> Message:
    return Message(id=7, address="a.b", body=body, properties=dict(props), durable=True)


def stomp_headers(m: Message, version: str = "1.2") -> dict[str, str]:
    frame = render_message(b"MESSAGE\nsubscription:1\ndestination:/topic/a.b\n", 1, MessageReference(m, None, 1),
                           version, "auto", ESCAPING[version])
    head = frame.split(b"\n\n", 1)[0].decode()
    return dict(line.split(":", 1) for line in head.split("\n")[1:])


def test_internal_prefixes_and_public():
    assert all(is_internal(k) for k in INTERNAL)
    assert not any(is_internal(k) for k in ("content-type", "_AMQ_DUPL_ID", "JMSXGroupID", "MQTT", "x_MQTT_"))
    plain = {"a": 1}
    assert public(plain) is plain
    assert public({**INTERNAL, "a": 1, "_AMQ_DUPL_ID": "d"}) == {"a": 1, "_AMQ_DUPL_ID": "d"}


def test_text_of_typed_values():
    assert text("s") == "s" and text(True) == "true" and text(False) == "false" and text(42) == "42"
    assert text(2.5) == "2.5"
    assert text(b"\x00\xffab") == base64.b64encode(b"\x00\xffab").decode() == "AP9hYg=="
    assert text(bytearray(b"\x01")) == "AQ=="


def test_no_client_sees_internal_properties():
    m = message({**INTERNAL, "colour": "blue"})
    assert stomp_headers(m).keys() & INTERNAL.keys() == set()
    assert stomp_headers(m)["colour"] == "blue"
    assert headers_of(m.properties) == {"colour": "blue"}  # (a large message's MESSAGE)
    assert scalars(m.properties) == {"colour": "blue"}
    assert msgspec.msgpack.decode(wire_properties(m)) == {"colour": "blue"}
    amqp = decode_message(to_amqp(m, 0))
    assert amqp.application_properties == {"colour": "blue"}
    assert str(amqp.properties.message_id) == "abc"  # AMQP still reads its own
    assert amqp.message_annotations == {"x-opt-thing": "v"}
    publish = to_publish(m, 1, 1, retain=False, dup=False, v5=True)
    assert publish.properties[P.USER_PROPERTY] == [("colour", "blue")]
    assert publish.properties[P.PAYLOAD_FORMAT_INDICATOR] == 1  # MQTT still reads its own


def test_bytes_properties_reach_text_protocols_in_base64():
    m = message({"blob": b"\x00\x01\xfe", "correlation-id": b"\x00corr"})
    want = base64.b64encode(b"\x00\x01\xfe").decode()
    assert stomp_headers(m)["blob"] == want and stomp_headers(m, "1.0")["blob"] == want
    assert stomp_headers(m)["correlation-id"] == base64.b64encode(b"\x00corr").decode()
    publish = to_publish(m, 0, None, retain=False, dup=False, v5=True)
    assert publish.properties[P.USER_PROPERTY] == [("blob", want)]
    assert publish.properties[P.CORRELATION_DATA] == b"\x00corr"  # MQTT carries bytes there
    assert decode_message(to_amqp(m, 0)).application_properties == {"blob": b"\x00\x01\xfe"}


def test_response_topic_becomes_an_address_and_back():
    publish = Publish("req/x", b"q", 1, False, False, 1, {P.RESPONSE_TOPIC: "replies/client-1/x"})
    m = to_message(publish, 1, "req.x", v5=True)
    assert m.properties["reply-to"] == "replies.client-1.x"
    assert to_publish(m, 0, None, retain=False, dup=False, v5=True).properties[P.RESPONSE_TOPIC] == \
        "replies/client-1/x"
    assert stomp_headers(m)["reply-to"] == "replies.client-1.x"
    assert decode_message(to_amqp(m, 0)).properties.reply_to == "replies.client-1.x"
    odd = to_message(Publish("t", b"", 0, False, False, None, {P.RESPONSE_TOPIC: "a//b"}), 2, "t", v5=True)
    assert odd.properties["reply-to"] == "a//b"  # names no address: kept as it is


def test_one_cached_encoding_per_protocol_whatever_the_order():
    m = message({"k": "v", "n": 3}, body=b"x" * 100)
    first = {
        "stomp12": stomp_headers(m, "1.2"), "stomp10": stomp_headers(m, "1.0"),
        "core": msgspec.msgpack.decode(wire_properties(m)),
        "mqtt": to_publish(m, 1, 1, retain=False, dup=False, v5=True).properties,
        "amqp": to_amqp(m, 0),
    }
    keys = m.wire_cache[::2]
    assert sorted(keys) == ["amqp", "core", "mqtt5", "stomp1.0", "stomp1.2"]
    m.properties["k"] = "changed"  # (not done in the broker: shows what goes out is the cache)
    again = {
        "amqp": to_amqp(m, 0), "mqtt": to_publish(m, 1, 1, retain=False, dup=False, v5=True).properties,
        "core": msgspec.msgpack.decode(wire_properties(m)),
        "stomp10": stomp_headers(m, "1.0"), "stomp12": stomp_headers(m, "1.2"),
    }
    assert again == first
    assert m.wire_cache[::2] == keys  # nothing encoded twice
    # the AMQP entry holds no copy of the body
    amqp_entry = m.wire_get("amqp")
    assert b"x" * 100 not in amqp_entry[0]
    assert decode_message(first["amqp"]).body == [b"x" * 100]


def test_the_cache_is_lazy_and_keeps_no_large_encoding():
    m = message({"big": "v" * (WIRE_CACHE_LIMIT + 1)})
    assert m.wire_cache is None
    stomp_headers(m)
    to_amqp(m, 0)
    wire_properties(m)
    to_publish(m, 0, None, retain=False, dup=False, v5=True)
    assert m.wire_cache is None
    small = message({"a": "b"}, body=b"y" * 1_000_000)
    assert decode_message(to_amqp(small, 0)).body == [b"y" * 1_000_000]
    assert len(small.wire_get("amqp")[0]) < 200


def test_mqtt_expiry_and_subscription_ids_do_not_enter_the_cache():
    m = message({"k": "v"})
    m.expiration = 2**41
    p1 = to_publish(m, 0, None, retain=False, dup=False, v5=True, subscription_ids=[5])
    assert P.MESSAGE_EXPIRY_INTERVAL in p1.properties and p1.properties[P.SUBSCRIPTION_IDENTIFIER] == [5]
    cached = m.wire_get("mqtt5")
    assert P.MESSAGE_EXPIRY_INTERVAL not in cached and P.SUBSCRIPTION_IDENTIFIER not in cached
    p2 = to_publish(m, 0, None, retain=False, dup=False, v5=True)
    assert P.SUBSCRIPTION_IDENTIFIER not in p2.properties


def test_no_client_sets_internal_properties():
    from petrel.codec.amqp.message import AmqpMessage, encode_message

    from petrel.server.adapters.amqp_convert import to_petrel

    publish = Publish("t", b"raw", 1, False, False, 1,
                      {P.USER_PROPERTY: [("_AMQP_BODY", "amqp"), ("_MQTT_RETAIN", "1"), ("k", "v")]})
    assert to_message(publish, 1, "t", v5=True).properties == {"_MQTT_QOS": 1, "k": "v"}
    payload = encode_message(AmqpMessage(application_properties={"_AMQP_BODY": "amqp", "_MQTT_QOS": 2, "k": "v"},
                                         body_kind="data", body=[b"raw"]))
    m = to_petrel(payload, message_id=1, address="q", now=0)
    assert m.properties == {"k": "v"}
    assert decode_message(to_amqp(m, 0)).body == [b"raw"]  # a data section, not raw "sections"
