"""The OpenWire codec's tight encoding: negotiation, known bytes, every command a JMS client
uses whole, byte by byte and with trailing bytes, each size of long and of boolean stream,
refusals, and fuzzing (the commands are test_openwire_codec's)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from petrel.codec.openwire import (
    NEED_DATA,
    BrokerId,
    ConsumerId,
    ConsumerInfo,
    DataType,
    Message,
    MessageDispatch,
    OpenWireConnection,
    OpenWireLocalError,
    OpenWireProtocolError,
    RemoveInfo,
    WireFormatInfo,
    text_content,
)
from petrel.codec.openwire.tight import bool_stream, decode_tight, encode_tight
from test_openwire_codec import COMMANDS, PRODUCER, QUEUE, TEXT, events, events_or_error


def pair(client_tight: bool = True) -> tuple[OpenWireConnection, OpenWireConnection]:
    """A client codec and a broker codec after their WireFormatInfo exchange (the client waits
    for the broker's before it sends more, as the JMS client does)."""
    client, broker = OpenWireConnection(), OpenWireConnection()
    broker.receive_data(client.send(WireFormatInfo(12, {"TightEncodingEnabled": client_tight})))
    assert isinstance(events(broker)[0], WireFormatInfo)
    client.receive_data(broker.send(broker.wire_format_info()))
    assert isinstance(events(client)[0], WireFormatInfo)
    return client, broker


def test_negotiated_only_when_both_say_so_and_the_wire_format_info_stays_loose():
    client, broker = pair()
    assert client.tight and broker.tight
    loose_client, loose_broker = pair(client_tight=False)
    assert not loose_client.tight and not loose_broker.tight
    assert not OpenWireConnection(tight_encoding=False).wire_format_info().properties["TightEncodingEnabled"]
    one = OpenWireConnection(tight_encoding=False)
    one.receive_data(OpenWireConnection().send(WireFormatInfo(12, {"TightEncodingEnabled": True})))
    events(one)
    assert not one.tight
    # the WireFormatInfo is loose whatever was negotiated: a second one is refused all the same
    broker.receive_data(client.send(WireFormatInfo(12, {})))
    with pytest.raises(OpenWireProtocolError, match="second WireFormatInfo"):
        events(broker)


def test_known_bytes():
    """A RemoveInfo of a consumer, worked out by hand from the format: bits (response required,
    object present, its string present and ASCII, two 2-byte longs, an 8-byte long) 1111 0101 11."""
    r = RemoveInfo(command_id=1, response_required=True, object_id=ConsumerId("c", 1, 300),
                   last_delivered_sequence_id=-2)
    wire = bytes.fromhex("0c 02 af03 00000001 7a 0001 63 0001 012c fffffffffffffffe")
    assert encode_tight(r) == wire and decode_tight(wire) == r
    # a message nested in a dispatch carries the "no cached form" bit after its presence bit
    d = encode_tight(MessageDispatch(message=Message(kind=DataType.ACTIVEMQ_MESSAGE)))
    assert d[0] == DataType.MESSAGE_DISPATCH and d[1] == 5  # 5 bytes of bits: response required, consumer id,
    assert d[2] & 0b11111 == 0b01000  # destination, message present, its cached-form bit clear, its own...


def test_whole_then_byte_by_byte_then_trailing():
    client, broker = pair()
    wire = b"".join(client.send(c) for c in COMMANDS)
    broker.receive_data(wire)
    assert events(broker) == COMMANDS
    _, one = pair()
    got = []
    for i in range(len(wire)):
        one.receive_data(wire[i:i + 1])
        got += events(one)
    assert got == COMMANDS
    _, trailing = pair()
    trailing.receive_data(wire + b"\x00\x00")
    assert events(trailing) == COMMANDS and trailing.trailing == b"\x00\x00"
    loose = b"".join(pair(client_tight=False)[0].send(c) for c in COMMANDS)
    assert len(wire) < len(loose)  # (what tight is for)


@pytest.mark.parametrize("value", [0, 1, 0xFFFF, 0x10000, 0xFFFFFFFF, 0x100000000, -1, -(1 << 63), (1 << 63) - 1])
def test_each_size_of_long(value):
    m = Message(kind=DataType.ACTIVEMQ_BYTES_MESSAGE, destination=QUEUE, expiration=value, timestamp=value)
    assert decode_tight(encode_tight(m)) == m


@pytest.mark.parametrize("peers, head", [(10, b"\x07"), (200, b"\xc0\x4f"), (1000, b"\x80\x01\x7b")])
def test_each_size_of_boolean_stream(peers, head):
    """Under 64 bytes of bits, under 256 and more: 1, 2 and 3 bytes of length (3 bits a broker
    in the path, 25 besides)."""
    c = ConsumerInfo(consumer_id=ConsumerId("c", 1, 1), destination=QUEUE,
                     broker_path=tuple(BrokerId(f"b{i}") for i in range(peers)))
    wire = encode_tight(c)
    assert wire[1:1 + len(head)] == head and decode_tight(wire) == c
    assert bool_stream(b"\x01\x00" * 4 + b"\x01") == b"\x02\x55\x01"


def test_strings_ascii_flag_and_limits():
    for text in ("plain", "nul\x00inside", "h\u00e9llo \U0001f600", ""):
        m = Message(kind=DataType.ACTIVEMQ_TEXT_MESSAGE, destination=QUEUE, type=text, content=text_content(text))
        assert decode_tight(encode_tight(m)) == m
    with pytest.raises(OpenWireLocalError, match="at most"):
        encode_tight(Message(destination=QUEUE, type="x" * 40000))
    # an "ASCII only" string is one byte a character, as the client reads it
    wire = bytearray(encode_tight(Message(destination=QUEUE, type="abc")))
    wire[wire.index(b"abc")] = 0xE9
    assert decode_tight(bytes(wire)).type == "\u00e9bc"


@pytest.mark.parametrize("wire, why", [
    (b"\x0c\x05\x00", "boolean stream runs past"),
    (b"\x0c\x80\xff\xff", "boolean stream of -1"),
    (b"\x0c\x00\x00\x00\x00\x01", "runs past the end"),  # (no bits for its response-required flag)
    (b"\x63\x00", "unknown or unsupported data structure type 99"),
    (b"\x0a\x01\x00\x00\x00\x00\x01\x00", "bytes after"),
    (b"\x00", "null command"),
])
def test_malformed(wire, why):
    with pytest.raises(OpenWireProtocolError, match=why):
        decode_tight(wire)


def test_a_cached_marshalled_form_is_refused():
    wire = bytearray(encode_tight(MessageDispatch(message=Message(kind=DataType.ACTIVEMQ_MESSAGE))))
    wire[2] |= 0b10000  # the nested message's cached-form bit
    with pytest.raises(OpenWireProtocolError, match="cached marshalled form"):
        decode_tight(bytes(wire))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, len(COMMANDS) - 1), st.integers(0, 400))
def test_fuzz_events_or_protocol_error(noise, which, cut):
    client, _ = pair()
    frame = client.send(COMMANDS[which])
    for wire in (noise, frame[:cut] + noise, frame[:4] + noise):
        events_or_error(pair()[1], wire)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=50), st.integers(-(1 << 63), (1 << 63) - 1), st.booleans(), st.one_of(st.none(), st.text(max_size=20)),
       st.dictionaries(st.text(max_size=10), st.one_of(st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1),
                                                        st.floats(allow_nan=False), st.text(max_size=20)), max_size=5))
def test_round_trip_messages(text, number, flag, correlation, props):
    m = Message(kind=DataType.ACTIVEMQ_TEXT_MESSAGE, producer_id=PRODUCER, destination=QUEUE,
                content=text_content(text), properties=props, timestamp=number, expiration=abs(number) >> 1,
                persistent=flag, correlation_id=correlation, redelivery_counter=number & 0x7FFFFFFF)
    client, broker = pair()
    broker.receive_data(client.send(m) + client.send(MessageDispatch(message=m, destination=QUEUE)))
    assert events(broker) == [m, MessageDispatch(message=m, destination=QUEUE)]
    assert decode_tight(encode_tight(TEXT)) == TEXT
