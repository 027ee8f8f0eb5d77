"""The AMQP codec's one-pass paths say exactly what the general ones say: `decode_composite`
gives the composite `decode_one` + `from_described` give (or None, never an error of its own),
`decode_message` reads header, properties and data sections as the general reader does, and
`send_transfer` is `send(Transfer(...))`."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.codec.amqp import NEED_DATA, AmqpConnection
from petrel.codec.amqp import message as message_module
from petrel.codec.amqp.composite import decode_composite, from_described
from petrel.codec.amqp.errors import AmqpError
from petrel.codec.amqp.message import AmqpMessage, decode_message, encode_message
from petrel.codec.amqp.performatives import (
    Accepted, Attach, Disposition, Error, Flow, Header, Properties, Rejected, Source, Target, Transfer,
)
from petrel.codec.amqp.types import Described, decode_one, encode
from petrel.codec.roles import Role

SAMPLES = [
    Transfer(handle=0, delivery_id=5, delivery_tag=b"abcd", message_format=0, settled=True),
    Transfer(handle=70000, delivery_id=0xFFFFFFFF, delivery_tag=b"", settled=False, more=True, state=Accepted()),
    Disposition(role=True, first=3, last=300, settled=True,
                state=Rejected(error=Error(condition="amqp:not-found", description="d"))),
    Flow(next_incoming_id=1, incoming_window=100, next_outgoing_id=2, outgoing_window=3, handle=1,
         delivery_count=7, link_credit=1000, drain=True, properties={"a": 1}),
    Attach(name="n", handle=1, role=True, source=Source(address="q", capabilities=("queue",)), target=Target()),
    Header(durable=True, priority=4),
    Properties(message_id="x", to="q", creation_time=5),
]
MESSAGES = [
    encode_message(AmqpMessage.with_data(b"x" * n, header=Header(durable=True),
                                         properties=Properties(message_id="m", to="t")))
    for n in (0, 5, 300)
] + [
    encode_message(AmqpMessage.with_value("v", header=Header(priority=3), application_properties={"a": 1})),
    encode_message(AmqpMessage(body_kind="data", body=[b"a", b"bc"], footer={"f": 1})),
]


def _general(data: bytes):
    try:
        value, pos = decode_one(data, 0)
        if type(value) is not Described:
            return None
        return from_described(value), pos
    except (AmqpError, ValueError, TypeError, OverflowError):
        return "error"


def _mutated(draw_data, base: bytes) -> bytes:
    out = bytearray(base)
    for op, at, byte in draw_data:
        if not out and op != "insert":
            continue
        i = at % (len(out) + (1 if op == "insert" else 0))
        if op == "set":
            out[i] = byte
        elif op == "delete":
            del out[i]
        elif op == "insert":
            out.insert(i, byte)
        else:
            del out[i:]
    return bytes(out)


EDITS = st.lists(st.tuples(st.sampled_from(["set", "delete", "insert", "cut"]), st.integers(0, 1 << 16),
                           st.integers(0, 255)), max_size=3)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SAMPLES), EDITS)
def test_decode_composite_is_the_general_decoding_or_none(sample, edits):
    data = _mutated(edits, encode(sample))
    fast = decode_composite(data, 0, len(data))
    if fast is None:
        return
    general = _general(data)
    assert general == fast
    assert [type(getattr(fast[0], f)) for f in fast[0].__dataclass_fields__] == \
           [type(getattr(general[0], f)) for f in general[0].__dataclass_fields__]


def test_decode_composite_reads_the_common_forms():
    for sample in SAMPLES:
        data = encode(sample)
        assert decode_composite(data, 0, len(data)) == (sample, len(data))


def _decoded(data: bytes):
    try:
        return decode_message(data)
    except AmqpError as exc:
        return exc.condition


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(MESSAGES), st.sampled_from([b""] + MESSAGES), EDITS)
def test_decode_message_reads_as_the_general_reader(first, second, edits):
    data = _mutated(edits, first + second)
    fast = _decoded(data)
    saved = message_module._FAST_SECTIONS, message_module._data_section
    message_module._FAST_SECTIONS, message_module._data_section = (), lambda *args: None
    try:
        general = _decoded(data)
    finally:
        message_module._FAST_SECTIONS, message_module._data_section = saved
    assert fast == general


def _events(data: bytes) -> list:
    reader = AmqpConnection(Role.CLIENT)
    reader._theirs = "open"
    reader.receive_data(data)
    out = []
    while (event := reader.next_event()) is not NEED_DATA:
        out.append(event)
    return out


@pytest.mark.parametrize("max_frame", [512, 1 << 20])
def test_send_transfer_is_send_of_a_transfer(max_frame):
    conn = AmqpConnection(Role.SERVER)
    conn._ours = "open"
    conn.peer_max_frame_size = max_frame
    for handle in (0, 255, 256, 70000):
        for delivery_id in (0, 1, 255, 256, 0xFFFFFFFF):
            for settled in (True, False):
                for payload in (b"", b"x" * 10, b"y" * 3000):
                    fast = conn.send_transfer(3, handle, delivery_id, settled, payload)
                    general = conn.send(3, Transfer(handle=handle, delivery_id=delivery_id,
                                                    delivery_tag=delivery_id.to_bytes(4, "big"), message_format=0,
                                                    settled=settled or None), payload)
                    assert _events(fast) == _events(general)


@pytest.mark.parametrize("address", ["", "q", "bench.s1.0", "é" * 60, "x" * 240, "y" * 300])
@pytest.mark.parametrize("timestamp", [0, 1_700_000_000_000])
@pytest.mark.parametrize("expiration", [0, 1_800_000_000_000])
def test_the_properties_of_a_message_without_properties_are_the_general_encoding(address, timestamp, expiration,
                                                                              monkeypatch):
    from petrel.core.message import Message
    from petrel.server.adapters import amqp_convert

    for message_id in (0, 123_456, 10**18):
        message = Message(id=message_id, address=address, body=b"b", properties={}, timestamp=timestamp)
        message.expiration = expiration
        fast = amqp_convert._bare(message)
        with monkeypatch.context() as m:
            m.setattr(amqp_convert, "_plain_properties", lambda _: None)
            general = amqp_convert._bare(message)
        assert fast == general
        if len(address) < 100:
            assert amqp_convert._plain_properties(message) is not None  # (the common case is taken)
        elif len(address) == 300:
            assert amqp_convert._plain_properties(message) is None
