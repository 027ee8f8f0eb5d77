"""Every JMS body kind across protocols (issue 15): what ActiveMQ Classic's JMS client sends
(text, bytes, map, stream, object and plain messages, compressed or not) as STOMP (stomp.py),
MQTT 5 (paho-mqtt), AMQP 1.0 (python-qpid-proton) and CORE (Petrel's client) receive it, and
what those clients send as the JMS client receives it; the mapping is
`petrel.server.adapters.openwire_bodies`'s; JMSType, JMSCorrelationID and JMSXUserID go with
them (to AMQP as subject, correlation-id and user-id). Real Java programs (tests/interop/JmsBodies.java)
against a real `petrel run`."""

from __future__ import annotations

import base64
import json
import queue
import subprocess
import threading

import pytest
import stomp
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from proton import Message as AmqpMessage
from proton import int32, symbol
from proton.utils import BlockingConnection

from conftest import Listener
from jms import compile_program, jms_broker, petrel_only, run  # noqa: F401 (a fixture)
from mqtt_clients import V5, Paho
from petrel.client import Connection as CoreConnection
from petrel.client import Message as CoreMessage

pytestmark = pytest.mark.system

KINDS = ("text", "bytes", "map", "stream", "object", "plain")
BYTES = b"\x00\x01\x02\xffend"
TEXT = "h\u00e9llo \u2713"
MAP = {"name": "petrel", "n": 42, "big": 1 << 40, "ratio": 2.5, "flag": True, "raw": base64.b64encode(b"\x01\x02\x03").decode()}
STREAM = ["s", 7, -3, False]
JMS_TYPES = {"object": 1, "map": 2, "bytes": 3, "stream": 4, "text": 5, "plain": 0}


@pytest.fixture
def classpath(tmp_path):
    return compile_program("JmsBodies", tmp_path / "classes")


def by_kind(items: list, kind_of) -> dict:
    out = {kind_of(item): item for item in items}
    assert sorted(out) == sorted(KINDS), sorted(out)
    return out


def check_plain_body(kind: str, body: bytes) -> None:
    """A body as STOMP, MQTT and CORE get it."""
    if kind == "text":
        assert body.decode() == TEXT
    elif kind == "bytes":
        assert body == BYTES
    elif kind == "map":
        assert json.loads(body) == MAP
    elif kind == "stream":
        assert json.loads(body) == STREAM
    elif kind == "object":
        assert body[:2] == b"\xac\xed" and b"an object" in body  # Java serialization
    else:
        assert body == b""


@petrel_only
@pytest.mark.parametrize("compression", [False, True])
def test_each_jms_kind_reaches_stomp_mqtt_amqp_and_core(broker, classpath, compression):
    url = f"tcp://127.0.0.1:{broker.port}" + ("?jms.useCompression=true" if compression else "")
    st = stomp.Connection12([("127.0.0.1", broker.port)], auto_decode=False, heartbeats=(0, 0))
    listener = Listener()
    st.set_listener("l", listener)
    st.connect("guest", "guest", wait=True)
    st.subscribe("/topic/bodies", id="s1", ack="auto", headers={"receipt": "sub"})
    assert listener.receipts.get(timeout=10) == "sub"
    mqtt = Paho(broker.port, "bodies-mqtt", version=V5)
    mqtt.subscribe("bodies", 1)
    amqp = BlockingConnection(f"amqp://127.0.0.1:{broker.port}", timeout=20)
    amqp_rx = amqp.create_receiver("topic://bodies")
    core = CoreConnection(f"tcp://127.0.0.1:{broker.port}")
    core_rx = core.session().consumer("topic://bodies")
    jms_rx = JmsReceiver(classpath, url, "topic:bodies", 6)
    try:
        assert jms_rx.line() == "READY"
        assert run(classpath, "JmsBodies", url, "send", "topic:bodies") == ["SENT 6"]
        jms_lines = [jms_rx.line() for _ in range(7)]
        assert jms_lines[-1] == "RECEIVED 6"
        assert sorted(jms_lines[:-1]) == sorted([  # JMS to JMS: each kind whole, its JMS headers kept
            f"TEXT {TEXT} type=type-text corr=corr-text user=user-text kind=text",
            "BYTES [0, 1, 2, -1, 101, 110, 100] type=type-bytes corr=corr-bytes user=user-bytes kind=bytes",
            "MAP big=1099511627776:Long flag=true:Boolean n=42:Integer name=petrel:String ratio=2.5:Double "
            "raw=[1, 2, 3]:byte[] type=type-map corr=corr-map user=user-map kind=map",
            "STREAM s:String 7:Long -3:Integer false:Boolean type=type-stream corr=corr-stream user=user-stream "
            "kind=stream",
            "OBJECT an object type=type-object corr=corr-object user=user-object kind=object",
            "PLAIN type=type-plain corr=corr-plain user=user-plain kind=plain",
        ]), jms_lines

        frames = by_kind([listener.get() for _ in KINDS], lambda f: f.headers["kind"])
        for kind, frame in frames.items():
            check_plain_body(kind, frame.body)
            assert frame.headers["JMSType"] == f"type-{kind}"
            assert frame.headers["correlation-id"] == f"corr-{kind}"
            assert frame.headers["JMSXUserID"] == f"user-{kind}"
            assert not [h for h in frame.headers if h.startswith("_")], frame.headers

        got = by_kind([mqtt.messages.get(timeout=10) for _ in KINDS],
                      lambda m: dict(m.properties.UserProperty)["kind"])
        for kind, m in got.items():
            check_plain_body(kind, m.payload)
            assert m.properties.CorrelationData == f"corr-{kind}".encode()
            # (the MQTT adapter sends no JMS* property as a user property: JMSType, JMSXUserID stay out)

        core_got = []
        for _ in KINDS:
            m = core_rx.receive(timeout=10)
            assert m is not None
            m.ack()
            core_got.append(m)
        for kind, m in by_kind(core_got, lambda m: m.properties["kind"]).items():
            check_plain_body(kind, m.body)

        amqp_got = []
        for _ in KINDS:
            amqp_got.append(amqp_rx.receive(timeout=10))
            amqp_rx.accept()
        got = by_kind(amqp_got, lambda m: m.properties["kind"])
        for kind, m in got.items():
            assert m.annotations["x-opt-jms-msg-type"] == JMS_TYPES[kind], (kind, m.annotations)
            assert m.correlation_id == f"corr-{kind}"
            assert m.subject == f"type-{kind}" and "JMSType" not in m.properties  # JMSType: the subject
            assert bytes(m.user_id) == f"user-{kind}".encode() and "JMSXUserID" not in m.properties  # user-id
        assert got["text"].body == TEXT
        assert bytes(got["bytes"].body) == BYTES
        assert got["map"].body == {**MAP, "raw": b"\x01\x02\x03"}
        assert type(got["map"].body["n"]) is int32 and type(got["map"].body["big"]) is int  # Java int, long
        assert got["stream"].body == STREAM and type(got["stream"].body[2]) is int32
        assert bytes(got["object"].body)[:2] == b"\xac\xed"
        assert str(got["object"].content_type) == "application/x-java-serialized-object"
        assert got["plain"].body is None
    finally:
        jms_rx.stop()
        st.disconnect()
        mqtt.client.disconnect()
        amqp.close()
        core.close()


def test_jms_kinds_come_back_to_jms_compressed(jms_broker, tmp_path):
    """A JMS client with useCompression: every kind comes back whole to a JMS consumer (the same
    lines as from ActiveMQ 5.17 in the reference mode)."""
    classpath = compile_program("JmsKinds", tmp_path / "kinds")
    lines = run(classpath, "JmsKinds",
                f"tcp://127.0.0.1:{jms_broker.port}?jms.trustAllPackages=true&jms.useCompression=true", "kinds")
    assert lines == ["BYTES [0, 1, 2, -1]", "MAP petrel 42", "OBJECT [a, b]", "STREAM s 7",
                     f"PLAIN {1 << 40} true 3", "SELECTED 2 t6 t8"]


class JmsReceiver:
    """JmsBodies receiving in the background: lines as they come."""

    def __init__(self, classpath: str, url: str, dest: str, n: int) -> None:
        self.proc = subprocess.Popen(["java", "-cp", classpath, "JmsBodies", url, "receive", dest, str(n)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def line(self, timeout: float = 60) -> str:
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"JmsBodies ended early: {self.proc.stderr.read()[-3000:]}"
        return line


@petrel_only
def test_each_protocols_bodies_reach_jms_as_their_kind(broker, classpath):
    rx = JmsReceiver(classpath, f"tcp://127.0.0.1:{broker.port}", "topic:tojms", 10)
    try:
        assert rx.line() == "READY"
        st = stomp.Connection12([("127.0.0.1", broker.port)], auto_decode=False, heartbeats=(0, 0))
        st.connect("guest", "guest", wait=True)
        st.send("/topic/tojms", BYTES, headers={"kind": "stomp-bytes", "JMSType": "t-stomp",
                                                "correlation-id": "c-stomp"})
        st.send("/topic/tojms", TEXT.encode(), headers={"kind": "stomp-text", "content-type": "text/plain"})
        st.disconnect()
        # a SEND without content-length (nor content type): a TextMessage, as ActiveMQ makes it
        st = stomp.Connection12([("127.0.0.1", broker.port)], auto_decode=False, heartbeats=(0, 0),
                                auto_content_length=False)
        st.connect("guest", "guest", wait=True)
        st.send("/topic/tojms", TEXT.encode(), headers={"kind": "stomp-nolength"})
        st.disconnect()
        mqtt = Paho(broker.port, "tojms-mqtt", version=V5)
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("kind", "mqtt-bytes")]
        props.CorrelationData = b"c-mqtt"
        mqtt.client.publish("tojms", BYTES, 1, properties=props).wait_for_publish(10)
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("kind", "mqtt-text")]
        props.PayloadFormatIndicator = 1
        mqtt.client.publish("tojms", TEXT.encode(), 1, properties=props).wait_for_publish(10)
        mqtt.client.disconnect()
        core = CoreConnection(f"tcp://127.0.0.1:{broker.port}")
        core.session().producer("topic://tojms").send(
            CoreMessage(BYTES, {"kind": "core-bytes", "correlation-id": b"c-core"}), wait=True)
        core.close()
        amqp = BlockingConnection(f"amqp://127.0.0.1:{broker.port}", timeout=20)
        tx = amqp.create_sender("topic://tojms")
        tx.send(AmqpMessage(body={"name": "petrel", "n": int32(42), "big": 1 << 40, "ratio": 2.5, "flag": True,
                                  "raw": b"\x01\x02\x03"}, properties={"kind": "amqp-map"}))
        tx.send(AmqpMessage(body=["s", 7, int32(-3), False], properties={"kind": "amqp-list"}))
        tx.send(AmqpMessage(body=TEXT, properties={"kind": "amqp-text"}, subject="t-amqp"))
        data = AmqpMessage(body=BYTES, properties={"kind": "amqp-data"}, correlation_id=b"c-amqp")
        data.inferred = True
        data.annotations = {symbol("x-opt-jms-msg-type"): 3}
        tx.send(data)
        amqp.close()
        lines = [rx.line() for _ in range(11)]
    finally:
        rx.stop()
    assert lines[-1] == "RECEIVED 10"
    got = {line.rsplit(" kind=", 1)[1]: line.rsplit(" type=", 1)[0] for line in lines[:-1]}
    meta = {line.rsplit(" kind=", 1)[1]: line.rsplit(" kind=", 1)[0].split(" type=", 1)[1] for line in lines[:-1]}
    assert got == {
        "stomp-bytes": "BYTES [0, 1, 2, -1, 101, 110, 100]",
        "stomp-text": f"TEXT {TEXT}",
        "stomp-nolength": f"TEXT {TEXT}",
        "mqtt-bytes": "BYTES [0, 1, 2, -1, 101, 110, 100]",
        "mqtt-text": f"TEXT {TEXT}",
        "core-bytes": "BYTES [0, 1, 2, -1, 101, 110, 100]",
        "amqp-map": "MAP big=1099511627776:Long flag=true:Boolean n=42:Integer name=petrel:String "
                    "ratio=2.5:Double raw=[1, 2, 3]:byte[]",
        "amqp-list": "STREAM s:String 7:Long -3:Integer false:Boolean",
        "amqp-text": f"TEXT {TEXT}",
        "amqp-data": "BYTES [0, 1, 2, -1, 101, 110, 100]",
    }, lines
    assert meta["stomp-bytes"].startswith("t-stomp corr=c-stomp ")
    assert " corr=c-mqtt " in meta["mqtt-bytes"] and " corr=c-core " in meta["core-bytes"]
    assert " corr=c-amqp " in meta["amqp-data"]
    assert meta["amqp-text"].startswith("t-amqp ")  # an AMQP subject: the JMSType
