"""JMS bodies across protocols (server/adapters/openwire_bodies.py), without a broker: compressed
bodies as ActiveMQ's client writes them, maps and streams to JSON and AMQP and back with their
Java types, and any bytes give a body or a `BodyError`, nothing else."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petrel.codec.amqp import types as amqp
from petrel.codec.openwire import text_content
from petrel.codec.openwire.marshal import JavaByte, JavaFloat, JavaLong, JavaShort, decode_map, encode_map
from petrel.server.adapters import openwire_bodies as bodies
from petrel.server.adapters.openwire_bodies import (
    BYTES, CONTENT, KIND, MAP, MESSAGE, OBJECT, STREAM, TEXT, BodyError, amqp_body, inflate, to_openwire_body,
    to_petrel_body,
)

MAP_VALUES = {"s": "petrel", "i": 42, "l": JavaLong(1 << 40), "h": JavaShort(-3), "b": JavaByte(7),
              "f": JavaFloat(1.5), "d": 2.25, "t": True, "raw": b"\x00\xff", "none": None}


def stream_content(values) -> bytes:
    return bodies._encode_stream(values)


def test_a_compressed_bytes_body_is_its_length_then_zlib_and_padding_is_cut():
    data = b"\x00\x01\x02\xffend"
    padded = zlib.compress(data + b"\x00" * 100)  # the client deflates its whole buffer
    assert inflate(BYTES, struct.pack(">i", len(data)) + padded) == data
    assert inflate(TEXT, zlib.compress(text_content("héllo"))) == text_content("héllo")
    with pytest.raises(BodyError):
        inflate(TEXT, b"not zlib at all")
    with pytest.raises(BodyError):
        inflate(BYTES, struct.pack(">i", 50) + zlib.compress(b"short"))  # says more than it holds


def test_a_compressed_body_never_inflates_past_the_bound(monkeypatch):
    monkeypatch.setattr(bodies, "MAX_INFLATED", 1000)
    with pytest.raises(BodyError):
        inflate(TEXT, zlib.compress(b"\x00" * 100_000))


def test_a_map_is_json_for_other_protocols_and_comes_back_to_jms_exactly():
    content = encode_map(MAP_VALUES)
    props: dict = {}
    body = to_petrel_body(MAP, content, props)
    assert json.loads(body) == {"s": "petrel", "i": 42, "l": 1 << 40, "h": -3, "b": 7, "f": 1.5, "d": 2.25,
                                "t": True, "raw": "AP8=", "none": None}
    props[KIND] = MAP
    assert to_openwire_body(props, body) == (MAP, content)
    jms_type, section, ctype = amqp_body(props)
    assert jms_type == 2 and ctype is None
    value = amqp.decode(section).value
    assert type(value["i"]) is amqp.Int and type(value["l"]) is int and type(value["h"]) is amqp.Short
    assert type(value["b"]) is amqp.Byte and type(value["f"]) is amqp.Float and value["raw"] == b"\x00\xff"
    # an AMQP map (as Qpid JMS sends it) comes to JMS as a map with the same Java types
    kind, back = to_openwire_body({"_AMQP_BODY": "amqp"}, section)
    assert kind == MAP
    again = decode_map(back)
    assert again == MAP_VALUES and {k: type(v) for k, v in again.items()} == {k: type(v) for k, v in MAP_VALUES.items()}


def test_a_stream_is_a_json_array_and_an_amqp_list():
    values = ["s", JavaLong(7), -3, False, b"\x01"]
    content = stream_content(values)
    props: dict = {}
    assert json.loads(to_petrel_body(STREAM, content, props)) == ["s", 7, -3, False, "AQ=="]
    props[KIND] = STREAM
    assert props[CONTENT] == content
    section = amqp_body(props)[1]
    assert amqp.decode(section).value == ["s", 7, -3, False, b"\x01"]
    assert to_openwire_body({"_AMQP_BODY": "amqp"}, section) == (STREAM, content)
    sequence = amqp.encode(amqp.Described(amqp.ULong(0x76), ["a", amqp.Int(1)]))
    assert to_openwire_body({"_AMQP_BODY": "amqp"}, sequence) == (STREAM, stream_content(["a", 1]))


def test_what_other_protocols_send_reaches_jms_as_text_or_bytes():
    text = "héllo".encode()
    assert to_openwire_body({"content-type": "text/plain; charset=utf-8"}, text) == (TEXT, text_content("héllo"))
    assert to_openwire_body({"content-type": "application/vnd.x+json"}, text)[0] == TEXT
    assert to_openwire_body({"_MQTT_FORMAT": 1}, text)[0] == TEXT
    assert to_openwire_body({"content-type": "text/plain"}, b"\xff\xfe") == (BYTES, b"\xff\xfe")  # not UTF-8
    assert to_openwire_body({}, text) == (BYTES, text)
    assert to_openwire_body({"_AMQP_MA_x-opt-jms-msg-type": 1}, b"\xac\xed") == (OBJECT, b"\xac\xed")
    null = amqp.encode(amqp.Described(amqp.ULong(0x77), None))
    assert to_openwire_body({"_AMQP_BODY": "amqp"}, null) == (MESSAGE, None)
    assert to_openwire_body({"_AMQP_BODY": "amqp"}, b"\x00garbage") == (BYTES, b"\x00garbage")


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from([TEXT, MAP, STREAM, BYTES, OBJECT, MESSAGE]), data=st.binary(max_size=200),
       compressed=st.booleans())
def test_any_bytes_give_a_body_or_a_body_error(kind, data, compressed):
    try:
        content = inflate(kind, data) if compressed else data
        props: dict = {}
        body = to_petrel_body(kind, content, props)
    except BodyError:
        return
    assert isinstance(body, bytes)
    props[KIND] = kind
    to_openwire_body(props, body)  # and back out, never raising
    amqp_body(props)
