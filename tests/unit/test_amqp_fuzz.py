"""Property tests of the AMQP 1.0 codec: any bytes give events or an AMQP protocol error,
nothing else; values and messages survive encode/decode."""

from __future__ import annotations


from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.codec.amqp import NEED_DATA, AmqpConnection, AmqpError, AmqpMessage, decode_message, encode_message
from petrel.codec.amqp.performatives import Attach, Begin, Open, Source, Transfer
from petrel.codec.amqp.types import (
    Array, Described, Float, Symbol, Timestamp, UByte, UInt, ULong, UShort, decode, encode,
)
from petrel.codec.roles import Role

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HEADER = b"AMQP\x00\x01\x00\x00"
VALID = [
    AmqpConnection._frame(0, 0, encode(Open(container_id="c"))),
    AmqpConnection._frame(0, 0, encode(Begin(next_outgoing_id=0, incoming_window=9, outgoing_window=9))),
    AmqpConnection._frame(0, 0, encode(Attach(name="n", handle=0, role=False, source=Source(address="q")))),
    AmqpConnection._frame(0, 0, encode(Transfer(handle=0, delivery_id=0, delivery_tag=b"t", more=True)) + b"abc"),
    AmqpConnection._frame(0, 0, encode(Transfer(handle=0)) + b"def"),
    b"\x00\x00\x00\x08\x02\x00\x00\x00",
]
TOKENS = VALID + [HEADER, b"AMQP\x03\x01\x00\x00", b"\x00\x53", b"\xc0", b"\xd0", b"\xe0", b"\xa1", b"\xff",
                  b"\x00\x00\x00\xff", b"\x02\x00\x00\x00", b"\x40", b"\x45"]


def drain(conn: AmqpConnection) -> list:
    out = []
    while (event := conn.next_event()) is not NEED_DATA:
        out.append(event)
        assert len(out) < 10_000
    return out


@SETTINGS
@given(st.lists(st.one_of(st.binary(max_size=40), st.sampled_from(TOKENS)), max_size=30),
       st.booleans(), st.integers(min_value=1, max_value=64))
def test_any_bytes_give_events_or_an_amqp_error(pieces, with_header, chunk):
    data = (HEADER if with_header else b"") + b"".join(pieces)
    conn = AmqpConnection(Role.SERVER, max_frame_size=4096, max_message_size=1 << 16)
    try:
        for i in range(0, len(data), chunk):
            conn.receive_data(data[i:i + chunk])
            drain(conn)
        conn.receive_data(b"")
        drain(conn)
    except AmqpError as exc:
        assert exc.condition.startswith("amqp:")


@SETTINGS
@given(st.binary(max_size=200))
def test_any_bytes_decode_to_a_value_or_a_decode_error(data):
    try:
        decode(data)
    except AmqpError as exc:
        assert exc.condition == "amqp:decode-error"
    try:
        decode_message(data)
    except AmqpError as exc:
        assert exc.condition.startswith("amqp:")


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.floats(allow_nan=False), st.text(max_size=300), st.binary(max_size=300),
    st.integers(min_value=0, max_value=255).map(UByte), st.integers(min_value=0, max_value=65535).map(UShort),
    st.integers(min_value=0, max_value=(1 << 32) - 1).map(UInt),
    st.integers(min_value=0, max_value=(1 << 64) - 1).map(ULong),
    st.floats(width=32, allow_nan=False).map(Float), st.integers(min_value=0, max_value=1 << 50).map(Timestamp),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=20).map(Symbol),
    st.uuids(),
)
keys = st.one_of(st.text(max_size=10), st.text(alphabet="abc", max_size=5).map(Symbol),
                 st.integers(min_value=0, max_value=1 << 20).map(ULong))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5),
        st.builds(Described, st.integers(min_value=0, max_value=1 << 40).map(ULong), inner),
        st.lists(st.text(alphabet="xyz", max_size=300), max_size=4).map(lambda xs: Array.of(Symbol, xs)),
        st.lists(st.integers(min_value=0, max_value=1 << 32 - 1), max_size=4).map(lambda xs: Array.of(UInt, xs)),
    ),
    max_leaves=20,
)


@SETTINGS
@given(values)
def test_values_round_trip(value):
    data = encode(value)
    assert decode(data) == value
    assert encode(decode(data)) == data


@SETTINGS
@given(st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=20), st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), st.booleans()), max_size=5),
       st.binary(max_size=5000), st.integers(min_value=512, max_value=2000))
def test_messages_round_trip_over_split_transfers(props, body, frame_size):
    message = AmqpMessage(application_properties=props, body_kind="data", body=[body])
    payload = encode_message(message)
    sender = AmqpConnection(Role.SERVER)
    sender.send_header(0)
    sender.send(0, Open(container_id="s"))
    sender.peer_max_frame_size = frame_size
    data = sender.send(0, Transfer(handle=3, delivery_id=1, delivery_tag=b"x"), payload)
    receiver = AmqpConnection(Role.CLIENT)
    receiver.receive_data(HEADER + AmqpConnection._frame(0, 0, encode(Open(container_id="c"))) + data)
    events = drain(receiver)
    assert events[-1].payload == payload
    assert decode_message(events[-1].payload) == message
