"""OpenWire spoken by hand (the codec as a client) to a real broker: refusals come back as
ExceptionResponses, malformed bytes end only their own connection, and a message sent over
OpenWire is received over STOMP with its text and properties."""

from __future__ import annotations

import socket

import pytest

from conftest import connect
from petrel.codec.openwire import (
    NEED_DATA,
    BrokerInfo,
    ConnectionError as OwConnectionError,
    ConnectionId,
    ConnectionInfo,
    DataType,
    Destination,
    ExceptionResponse,
    KeepAliveInfo,
    Message,
    MessageId,
    OpenWireConnection,
    ProducerId,
    Response,
    WireFormatInfo,
    text_content,
)
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system


@pytest.fixture
def b(tmp_path):
    broker = BrokerProcess(tmp_path / "b").start()
    yield broker
    broker.stop()


class Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.codec = OpenWireConnection()
        self.sock.sendall(self.codec.send(WireFormatInfo(12, {"TightEncodingEnabled": True, "CacheEnabled": True})))
        # the broker's first (as the JMS client, nothing more before it): tight encoding from then on
        assert isinstance(self.next(skip=(KeepAliveInfo, BrokerInfo)), WireFormatInfo) and self.codec.tight

    def send(self, command) -> None:
        self.sock.sendall(self.codec.send(command))

    def next(self, skip=(KeepAliveInfo, BrokerInfo, WireFormatInfo)):
        while True:
            ev = self.codec.next_event()
            if ev is NEED_DATA:
                data = self.sock.recv(65536)
                if not data:
                    return None
                self.codec.receive_data(data)
            elif not isinstance(ev, skip):
                return ev


def test_refusal_is_an_exception_response_and_garbage_ends_only_its_connection(b):
    c = Client(b.port)
    c.send(ConnectionInfo(command_id=1, response_required=True, connection_id=ConnectionId("ID:raw:1"), client_id="raw"))
    assert c.next() == Response(correlation_id=1)
    producer = ProducerId("ID:raw:1", 1, 1)
    c.send(Message(command_id=2, response_required=True, kind=DataType.ACTIVEMQ_TEXT_MESSAGE, producer_id=producer,
                   destination=Destination(DataType.ACTIVEMQ_QUEUE, "$.petrel.internal"),
                   message_id=MessageId(producer_id=producer, producer_sequence_id=1), content=text_content("x"),
                   persistent=True))
    refused = c.next()
    assert isinstance(refused, ExceptionResponse) and refused.correlation_id == 2
    assert "javax.jms" in refused.exception.class_name and refused.exception.message

    bad = Client(b.port)
    bad.sock.sendall(b"\x00\x00\x00\x05\x63garbage")  # an unknown command type
    error = bad.next()
    assert isinstance(error, OwConnectionError) and "protocol error" in error.exception.message
    assert bad.next() is None  # closed

    c.send(KeepAliveInfo(command_id=3, response_required=True))  # the first connection still works
    assert isinstance(c.next(skip=(BrokerInfo,)), KeepAliveInfo)


def test_openwire_text_reaches_stomp_with_its_properties(b):
    c = Client(b.port)
    c.send(ConnectionInfo(command_id=1, response_required=True, connection_id=ConnectionId("ID:raw:2")))
    assert c.next() == Response(correlation_id=1)
    stomp, listener = connect(b)
    stomp.subscribe("/queue/cross", id="s1", ack="auto")
    producer = ProducerId("ID:raw:2", 1, 1)
    c.send(Message(command_id=2, response_required=True, kind=DataType.ACTIVEMQ_TEXT_MESSAGE, producer_id=producer,
                   destination=Destination(DataType.ACTIVEMQ_QUEUE, "cross"),
                   message_id=MessageId(producer_id=producer, producer_sequence_id=1),
                   content=text_content("h\u00e9llo"), properties={"colour": "blue", "n": 7}, persistent=True,
                   correlation_id="corr-1"))
    assert c.next() == Response(correlation_id=2)
    frame = listener.messages.get(timeout=10)
    body = frame.body if isinstance(frame.body, str) else frame.body.decode()
    assert body == "h\u00e9llo"
    assert frame.headers["colour"] == "blue" and frame.headers["n"] == "7"
    assert frame.headers.get("correlation-id") == "corr-1"
    assert not [h for h in frame.headers if h.startswith("_OW_")]  # OpenWire's own notes stay internal
    stomp.disconnect()


def test_a_fault_tolerant_clients_resend_is_not_duplicated(b):
    """A failover client (ConnectionInfo.faultTolerant) resending a message id it had no
    response for: the broker keeps one."""
    c = Client(b.port)
    c.send(ConnectionInfo(command_id=1, response_required=True, connection_id=ConnectionId("ID:raw:3"),
                          fault_tolerant=True))
    assert c.next() == Response(correlation_id=1)
    producer = ProducerId("ID:raw:3", 1, 1)

    def message(command_id: int, seq: int, text: str) -> Message:
        return Message(command_id=command_id, response_required=True, kind=DataType.ACTIVEMQ_TEXT_MESSAGE,
                       producer_id=producer, destination=Destination(DataType.ACTIVEMQ_QUEUE, "resent"),
                       message_id=MessageId(producer_id=producer, producer_sequence_id=seq),
                       content=text_content(text), persistent=True)

    c.send(message(2, 1, "one"))
    c.send(message(3, 1, "one"))  # the resend
    c.send(message(4, 2, "end"))
    assert [c.next(), c.next(), c.next()] == [Response(correlation_id=i) for i in (2, 3, 4)]
    stomp, listener = connect(b)
    stomp.subscribe("/queue/resent", id="s1", ack="auto")
    bodies = [listener.messages.get(timeout=10).body for _ in range(2)]
    assert [x if isinstance(x, str) else x.decode() for x in bodies] == ["one", "end"]
    stomp.disconnect()


def test_max_inactivity_keep_alives_and_a_silent_client_closed(b):
    """MaxInactivityDuration negotiated down to the client's 1 s: the broker sends KeepAliveInfo,
    and closes a client that sends nothing for longer, saying why."""
    from petrel.codec.openwire import JavaLong

    sock = socket.create_connection(("127.0.0.1", b.port), timeout=10)
    c = Client.__new__(Client)
    c.sock, c.codec = sock, OpenWireConnection()
    sock.sendall(c.codec.send(WireFormatInfo(12, {"MaxInactivityDuration": JavaLong(1000)})))
    assert isinstance(c.next(skip=(WireFormatInfo,)), KeepAliveInfo)
    seen = c.next(skip=(WireFormatInfo, KeepAliveInfo))
    assert isinstance(seen, OwConnectionError) and "inactivity" in seen.exception.message
    assert c.next() is None


def test_internal_properties_are_dropped_both_ways(b):
    """A client's own `_MQTT_*`, `_AMQP_*` and `_OW_*` properties never reach the broker's
    notes (a spoofed `_OW_TYPES` would retype a property), and what another protocol noted of
    itself (MQTT's QoS and retain flag) never reaches an OpenWire consumer."""
    from mqtt_clients import Paho

    from petrel.codec.openwire import ConsumerId, ConsumerInfo, JavaShort, MessageDispatch

    c = Client(b.port)
    c.send(ConnectionInfo(command_id=1, response_required=True, connection_id=ConnectionId("ID:raw:4")))
    assert c.next() == Response(correlation_id=1)
    topic = Destination(DataType.ACTIVEMQ_TOPIC, "mixed.news")
    queue = Destination(DataType.ACTIVEMQ_QUEUE, "spoofed")
    for n, dest in enumerate((topic, queue), 1):
        c.send(ConsumerInfo(command_id=10 + n, response_required=True, consumer_id=ConsumerId("ID:raw:4", 1, n),
                            destination=dest, prefetch_size=10))
        assert c.next() == Response(correlation_id=10 + n)
    producer = ProducerId("ID:raw:4", 1, 1)
    c.send(Message(command_id=2, response_required=True, kind=DataType.ACTIVEMQ_TEXT_MESSAGE, producer_id=producer,
                   destination=queue, message_id=MessageId(producer_id=producer, producer_sequence_id=1),
                   content=text_content("x"), persistent=True,
                   properties={"n": 7, "_OW_TYPES": "s:n", "_MQTT_RETAIN": True, "_AMQP_BODY": "sections"}))
    got = [c.next(), c.next()]
    assert Response(correlation_id=2) in got
    dispatch = next(ev for ev in got if isinstance(ev, MessageDispatch))
    props = dispatch.message.properties
    assert props == {"n": 7} and type(props["n"]) is not JavaShort, props

    stomp, listener = connect(b)
    stomp.subscribe("/queue/spoofed2", id="s1", ack="auto")
    c.send(Message(command_id=3, response_required=True, kind=DataType.ACTIVEMQ_TEXT_MESSAGE, producer_id=producer,
                   destination=Destination(DataType.ACTIVEMQ_QUEUE, "spoofed2"),
                   message_id=MessageId(producer_id=producer, producer_sequence_id=2), content=text_content("y"),
                   properties={"_MQTT_RETAIN": True, "_AMQP_BODY": "sections", "keep": "me"}))
    assert c.next() == Response(correlation_id=3)
    frame = listener.messages.get(timeout=10)
    assert frame.headers["keep"] == "me"
    assert not [h for h in frame.headers if h.startswith(("_MQTT_", "_AMQP_", "_OW_"))], frame.headers
    stomp.disconnect()

    paho = Paho(b.port, "ow-mixed")
    try:
        paho.client.publish("mixed/news", b"from mqtt", qos=1, retain=True).wait_for_publish(10)
    finally:
        paho.client.disconnect()
    dispatch = c.next()
    assert isinstance(dispatch, MessageDispatch) and dispatch.message.destination.name == "mixed.news"
    assert not [k for k in dispatch.message.properties or {} if k.startswith(("_MQTT_", "_AMQP_", "_OW_"))], \
        dispatch.message.properties


def test_a_large_message_from_stomp_reaches_openwire_whole(tmp_path):
    """A body over min_large_message_size sent over STOMP lives in its own file; an OpenWire
    consumer and a browser get it whole (read into one frame)."""
    from petrel.codec.openwire import ConsumerId, ConsumerInfo, MessageDispatch

    broker = BrokerProcess(tmp_path / "large", settings="min_large_message_size = 10240\n").start()
    try:
        body = bytes(range(256)) * 200  # 51,200 bytes
        stomp, listener = connect(broker)
        stomp.send("/queue/big", body, headers={"persistent": "true", "receipt": "r1", "content-length": str(len(body))})
        assert listener.receipts.get(timeout=10) == "r1"  # in its queue
        stomp.disconnect()
        c = Client(broker.port)
        c.send(ConnectionInfo(command_id=1, response_required=True, connection_id=ConnectionId("ID:raw:5")))
        assert c.next() == Response(correlation_id=1)
        big = Destination(DataType.ACTIVEMQ_QUEUE, "big")
        for n, browser in ((2, True), (3, False)):
            c.send(ConsumerInfo(command_id=n, response_required=True, consumer_id=ConsumerId("ID:raw:5", 1, n),
                                destination=big, prefetch_size=10, browser=browser))
            got = [c.next(), c.next()]  # (a consumer's first dispatch may come before its response)
            assert Response(correlation_id=n) in got
            dispatch = next(ev for ev in got if isinstance(ev, MessageDispatch))
            assert dispatch.message is not None
            assert dispatch.message.content == body, len(dispatch.message.content or b"")
            if browser:
                end = c.next()
                assert isinstance(end, MessageDispatch) and end.message is None  # the end of the browse
    finally:
        broker.stop()
