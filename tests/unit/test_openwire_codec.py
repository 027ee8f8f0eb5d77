"""The OpenWire codec (loose encoding; tight: test_openwire_tight.py): frames whole, byte by byte and with trailing bytes,
round trips of every command a JMS client uses, negotiation, and fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from petrel.codec.openwire import (
    NEED_DATA,
    AckType,
    BrokerId,
    BrokerInfo,
    ConnectionControl,
    ConnectionId,
    ConnectionInfo,
    ConsumerId,
    ConsumerInfo,
    DataType,
    Destination,
    ExceptionResponse,
    JavaFloat,
    JavaLong,
    JavaShort,
    KeepAliveInfo,
    Message,
    MessageAck,
    MessageDispatch,
    MessageId,
    MessagePull,
    OpenWireConnection,
    OpenWireProtocolError,
    ProducerAck,
    ProducerId,
    ProducerInfo,
    RemoveInfo,
    Response,
    SessionId,
    SessionInfo,
    ShutdownInfo,
    WireFormatInfo,
    detect,
    text_content,
    text_of,
)
from petrel.codec.openwire.commands import JavaThrowable

CONN = "ID:host-1-2-1:1"
PRODUCER = ProducerId(CONN, 1, 1)
QUEUE = Destination(DataType.ACTIVEMQ_QUEUE, "orders")
MID = MessageId(producer_id=PRODUCER, producer_sequence_id=7, broker_sequence_id=0)
TEXT = Message(command_id=9, response_required=True, kind=DataType.ACTIVEMQ_TEXT_MESSAGE, producer_id=PRODUCER,
               destination=QUEUE, message_id=MID, persistent=True, priority=4, timestamp=1_700_000_000_000,
               content=text_content("h\u00e9llo \U0001f600 \x00"), reply_to=Destination(DataType.ACTIVEMQ_TEMP_QUEUE, "t"),
               properties={"i": 1, "l": JavaLong(2), "s": "x", "sh": JavaShort(3), "f": JavaFloat(1.5), "d": 2.5,
                           "b": True, "n": None, "raw": b"\x00\x01", "m": {"k": [1, "z"]}})
COMMANDS = [
    ConnectionInfo(command_id=1, response_required=True, connection_id=ConnectionId(CONN), client_id="c1",
                   user_name="u", password="p"),
    SessionInfo(command_id=2, session_id=SessionId(CONN, 1)),
    ProducerInfo(command_id=3, response_required=True, producer_id=PRODUCER, destination=QUEUE),
    ConsumerInfo(command_id=4, response_required=True, consumer_id=ConsumerId(CONN, 1, 1), destination=QUEUE,
                 prefetch_size=1000, selector="a > 1", subscription_name="s", priority=-1,
                 broker_path=(BrokerId("b1"),)),
    TEXT,
    Message(kind=DataType.ACTIVEMQ_BYTES_MESSAGE, destination=Destination(DataType.ACTIVEMQ_TOPIC, "t"),
            content=b"\xff" * 300),
    MessageDispatch(consumer_id=ConsumerId(CONN, 1, 1), destination=QUEUE, message=TEXT, redelivery_counter=2),
    MessageAck(command_id=5, destination=QUEUE, consumer_id=ConsumerId(CONN, 1, 1), ack_type=AckType.STANDARD,
               first_message_id=MID, last_message_id=MID, message_count=1,
               poison_cause=JavaThrowable("java.lang.Exception", "why")),
    Response(command_id=6, correlation_id=5),
    ExceptionResponse(correlation_id=7, exception=JavaThrowable("javax.jms.JMSException", "no")),
    RemoveInfo(command_id=8, object_id=ConsumerId(CONN, 1, 1), last_delivered_sequence_id=-1),
    ShutdownInfo(command_id=9),
    KeepAliveInfo(),
    BrokerInfo(broker_id=BrokerId("petrel-1"), broker_name="petrel", broker_url="tcp://h:61616"),
    ConnectionControl(fault_tolerant=True, connected_brokers="tcp://a:1,tcp://b:2"),
    # a browser, a pull, the broker's dispatch without a message (a pull's timeout, a browse's end),
    # a producer's window and the ProducerAck that frees it
    ConsumerInfo(command_id=10, response_required=True, consumer_id=ConsumerId(CONN, 1, 2), destination=QUEUE,
                 browser=True, prefetch_size=0, selector="index < 3"),
    MessagePull(consumer_id=ConsumerId(CONN, 1, 2), destination=QUEUE, timeout=-1),
    MessagePull(consumer_id=ConsumerId(CONN, 1, 2), destination=QUEUE, timeout=5000, correlation_id="c",
                message_id=MID),
    MessageDispatch(consumer_id=ConsumerId(CONN, 1, 2), destination=QUEUE),
    ProducerInfo(command_id=11, response_required=True, producer_id=PRODUCER, window_size=4096),
    ProducerAck(producer_id=PRODUCER, size=1100),
    MessageAck(command_id=12, destination=QUEUE, consumer_id=ConsumerId(CONN, 1, 1), ack_type=AckType.POISON,
               first_message_id=MID, last_message_id=MID, message_count=1,
               poison_cause=JavaThrowable("java.lang.Throwable", "Delivery[3] exceeds redelivery policy limit")),
    RemoveInfo(command_id=13, object_id=ConsumerId(CONN, 1, 1), last_delivered_sequence_id=42),
    Message(kind=DataType.ACTIVEMQ_TEXT_MESSAGE, destination=Destination(DataType.ACTIVEMQ_QUEUE, "a,topic://b"),
            content=text_content("composite"), redelivery_counter=3),
]


def client_wire(commands) -> bytes:
    c = OpenWireConnection()
    return c.send(WireFormatInfo(12, {"TightEncodingEnabled": False, "MaxInactivityDuration": JavaLong(30000)})) \
        + b"".join(c.send(x) for x in commands)


def events(codec: OpenWireConnection) -> list:
    out = []
    while (ev := codec.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def test_whole_then_byte_by_byte_then_trailing():
    wire = client_wire(COMMANDS)
    whole = OpenWireConnection()
    whole.receive_data(wire)
    got = events(whole)
    assert got[1:] == COMMANDS
    assert isinstance(got[0], WireFormatInfo) and whole.version == 12 and whole.inactivity_ms == 30000
    one = OpenWireConnection()
    got1 = []
    for i in range(len(wire)):
        one.receive_data(wire[i:i + 1])
        got1 += events(one)
    assert got1 == got
    trailing = OpenWireConnection()
    trailing.receive_data(wire + b"\x00\x00")
    assert events(trailing) == got and trailing.trailing == b"\x00\x00"


def test_text_body_and_properties_keep_java_types():
    assert text_of(TEXT.content) == "h\u00e9llo \U0001f600 \x00"
    assert b"\xc0\x80" in TEXT.content and b"\x00\x00\x00" not in TEXT.content[4:]  # modified UTF-8
    codec = OpenWireConnection()
    codec.receive_data(client_wire([TEXT]))
    got = events(codec)[1]
    assert type(got.properties["l"]) is JavaLong and type(got.properties["sh"]) is JavaShort


def test_negotiation_answers_loose():
    codec = OpenWireConnection(max_frame_size=1000, tight_encoding=False)
    info = codec.wire_format_info()
    assert info.properties["TightEncodingEnabled"] is False and info.properties["CacheEnabled"] is False
    assert OpenWireConnection().wire_format_info().properties["TightEncodingEnabled"] is True  # (test_openwire_tight)
    assert type(info.properties["MaxInactivityDuration"]) is JavaLong  # the Java client casts it to Long
    assert detect(codec.send(info)[:13]) is True
    assert detect(b"\x00\x00") is None and detect(b"CONNECT\n") is False and detect(b"\x00\x01\x02") is False


@pytest.mark.parametrize("wire, why", [
    (b"\x00\x00\x00\x00", "size 0"),
    (b"\x00\x00\x00\x05\x03\x00\x00\x00\x01", "before the WireFormatInfo"),
    (b"\x00\x00\x00\x0d\x01ActiveMQ\x00\x00\x00\x0b", "runs past"),
    (b"\x00\x00\x00\x0e\x01ActiveMQ\x00\x00\x00\x09\x00", "version 9"),
    (b"\x00\x00\x00\x0e\x01ActiveMX\x00\x00\x00\x0c\x00", "magic"),
    (b"\x7f\x00\x00\x00", "maximum frame size"),
])
def test_malformed(wire, why):
    codec = OpenWireConnection()
    codec.receive_data(wire)
    with pytest.raises(OpenWireProtocolError, match=why):
        events(codec)
    with pytest.raises(OpenWireProtocolError):  # broken from then on
        codec.next_event()


def test_unknown_type_and_trailing_field_bytes():
    head = client_wire([])
    for frame in (b"\x00\x00\x00\x01\x63", b"\x00\x00\x00\x07\x0a\x00\x00\x00\x01\x00\x00"):
        codec = OpenWireConnection()
        codec.receive_data(head + frame)
        with pytest.raises(OpenWireProtocolError):
            events(codec)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, len(COMMANDS) - 1), st.integers(0, 400))
def test_fuzz_events_or_protocol_error(noise, which, cut):
    for wire in (client_wire([]) + noise, client_wire([COMMANDS[which]])[:cut] + noise, noise):
        events_or_error(OpenWireConnection(), wire)


def events_or_error(codec: OpenWireConnection, wire: bytes) -> None:
    """Whatever `wire` is, events or a protocol error (nothing else)."""
    codec.receive_data(wire)
    try:
        events(codec)
    except OpenWireProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=50), st.dictionaries(st.text(max_size=10), st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), st.floats(allow_nan=False), st.text(max_size=20),
    st.binary(max_size=20)), max_size=5))
def test_round_trip_text_messages(text, props):
    m = Message(kind=DataType.ACTIVEMQ_TEXT_MESSAGE, destination=QUEUE, content=text_content(text), properties=props)
    codec = OpenWireConnection()
    codec.receive_data(client_wire([m]))
    got = events(codec)[1]
    assert got == m and text_of(got.content) == text
