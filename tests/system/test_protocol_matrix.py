"""Cross-protocol matrix: a message sent over each protocol is received over each protocol.

One real `petrel run` process serves the whole module; every client (stomp.py, Petrel's CORE
client, paho-mqtt 2.x with MQTT 5, python-qpid-proton) talks to its all-protocols port. Each
of the 16 (sender, receiver) pairs goes through an anycast queue where both sides can name one
(STOMP ``/queue/x``, CORE and AMQP ``queue://x``) and through a topic (multicast; STOMP
``/topic/x``, CORE and AMQP ``topic://x``, MQTT ``a/b`` <-> address ``a.b``); MQTT speaks only
topics, so its pairs go through a topic alone. Four messages cross each pair: a binary one
(bytes 0x00-0xff, durable, priority 7, relative expiry), a large one (160 KiB, over the broker's
min_large_message_size, so kept in its own file; priority 9) and a UTF-8 text one (non-durable,
priority 2, the other form of expiry), each with string, numeric and boolean properties, a
correlation id (bytes where both sides can hold bytes), a reply-to and a content type; and an
empty one (priority 0, no expiry, correlation id, reply-to or content type, a property with a
non-ASCII, dotted name). For every pair the test checks all that both protocols can express;
what one side cannot carry is lost by design (table below), and nothing else. An MQTT 3.1.1
publisher (payload and QoS only) is checked against each receiver too.

What each protocol carries, and where Petrel keeps it:

================  ==================  ==================  ====================  ======================
field             STOMP 1.2           CORE                MQTT 5                AMQP 1.0
================  ==================  ==================  ====================  ======================
body bytes        body (+length)      body                payload               one data section, or
                                                                                amqp-value binary/str
text vs binary    no (content-type)   no (content-type)   payload format ind.   amqp-value string vs
                                                                                data/binary
properties        headers, strings    typed: str, int,    user properties,      application-properties,
                                      float, bool, bytes  strings               typed
priority          ``priority`` 0-9    priority 0-9        -- (not in MQTT)      header priority
expiry            ``expires`` epoch   expiration epoch    message expiry        header ttl (in) /
                  ms                  ms                  interval, seconds     absolute-expiry-time
durability        ``persistent``      durable             QoS >= 1 (in),        header durable
                                                          delivery QoS (out)
correlation id    ``correlation-id``  ``correlation-id``  correlation data      correlation-id
                  header              property            (bytes)               (string; others typed)
reply-to          ``reply-to``        ``reply-to``        response topic        reply-to
                  header              property
content type      ``content-type``    ``content-type``    content type          content-type
                                      property
================  ==================  ==================  ====================  ======================

Lost by design, and so not checked for that pair:

- MQTT has no priority: what MQTT sends arrives with the default priority 4; what it receives
  loses its priority.
- STOMP and MQTT have no typed values: a number sent from CORE or AMQP reaches them as its
  decimal text (a boolean as ``true``/``false``), and what they send reaches CORE and AMQP as
  strings.
- Whether a body is text or binary only AMQP (amqp-value string vs data) and MQTT 5 (payload
  format indicator) say, and they keep it between them: a body from STOMP or CORE reaches AMQP
  as one data section (bytes) and MQTT without the indicator; an AMQP string or an MQTT text
  payload reaches STOMP and CORE as its UTF-8 bytes. The content type is what tells them.
- MQTT expiry is in whole seconds: a message from another protocol reaches MQTT with the seconds
  left rounded up, and an MQTT expiry interval becomes an epoch-ms expiration at the broker's
  receipt; AMQP's relative ttl becomes absolute at the broker, and an AMQP receiver gets both the
  absolute-expiry-time and the time left as the header's ttl.
- Durability reaches an MQTT subscriber as the delivery's QoS (min of the subscription's 1 and
  the message's: 1 for durable, 0 for not); a QoS 0 PUBLISH is non-durable, QoS 1 durable.
- A reply-to is an address (``a.b``): MQTT's response topic ``a/b`` becomes the reply-to ``a.b``
  and a reply-to ``a.b`` reaches MQTT as the response topic ``a/b``, as topics map to addresses
  (so a service of any protocol answering an MQTT request sends to the topic the requester
  listens on). The correlation id is carried verbatim. A correlation id of bytes (MQTT
  correlation data that is not UTF-8, an AMQP binary one, a CORE bytes property) crosses between
  CORE, MQTT and AMQP as bytes; STOMP gets bytes (a correlation id or any property) as base64
  text (`petrel.core.message_props.text`), as MQTT gets a bytes property as a user property.
- Nothing else arrives: the protocols' internal properties (``_MQTT_*``, ``_AMQP_*``: QoS,
  retain, the publisher's client id, body kinds...) reach no client of any protocol.

The last test sends once to a topic read at the same time by STOMP 1.2 and 1.0, MQTT 5 and
3.1.1, and AMQP subscribers: each gets the message as its protocol renders it (a message keeps
rendered encodings on itself, `Message.wire_cache`), whatever order they render it in.
"""

from __future__ import annotations

import queue
import socket
import time
from dataclasses import dataclass, field

import pytest
import stomp
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from proton import Message as AmqpMessage
from proton.utils import BlockingConnection

from conftest import Listener, module_broker
from mqtt_clients import V5, V311, Paho
from petrel.client import Connection as CoreConnection
from petrel.client import Message as CoreMessage

pytestmark = pytest.mark.system

PROTOCOLS = ("stomp", "core", "mqtt", "amqp")
TYPED = {"core", "amqp"}  # typed property values on both ends
TEXT_KIND = {"mqtt", "amqp"}  # a body marked as text: MQTT 5's payload format indicator, AMQP's string
BINARY_CORRELATION = {"core", "mqtt", "amqp"}  # a correlation id of bytes (CORE: a bytes property)
LARGE = 160 * 1024  # a body over the broker's min_large_message_size: kept in its own file
TTL_SLACK_MS = 30_000  # an expiry matches within this (MQTT rounds to seconds; clocks read at send)


@dataclass
class Sent:
    """One message as a test means it, whatever the protocol that sends it."""

    label: str
    body: bytes
    text: bool
    props: dict[str, object]
    durable: bool
    priority: int
    ttl_ms: int  # 0: never expires
    correlation: str | bytes | None
    reply_to: str | None
    content_type: str | None
    expiration: int = 0  # epoch ms, set when sent


@dataclass
class Got:
    """A received message, read back through its protocol's client into the same terms."""

    body: bytes
    text: bool | None  # None: the protocol does not say
    props: dict[str, object]
    durable: bool
    priority: int | None  # None: the protocol has none
    expiration: int  # epoch ms, 0 = none
    correlation: object
    reply_to: object
    content_type: object
    ttl_expiration: int | None = None  # AMQP: the expiry its header's ttl gives (AMQP 1.0 3.2.1)
    raw: object = field(default=None, repr=False)


def messages(src: str, dst: str) -> list[Sent]:
    tag = f"{src}>{dst}"
    binary_corr = src in BINARY_CORRELATION and dst in BINARY_CORRELATION
    return [
        Sent("binary", bytes(range(256)) + b"\x00end", False,
             {"colour": "blue", "pair": tag, "count": 42, "ratio": 2.5, "flag": True},
             durable=True, priority=7, ttl_ms=600_000, reply_to="matrix-replies",
             correlation=f"corr-bin-{tag}".encode() + b"\x00\xff" if binary_corr else f"corr-bin-{tag}",
             content_type="application/octet-stream"),
        Sent("large", bytes(range(256)) * (LARGE // 256) + tag.encode(), False,
             {"colour": "red", "pair": tag, "count": 1 << 40},
             durable=True, priority=9, ttl_ms=900_000, correlation=f"corr-large-{tag}", reply_to="matrix-replies",
             content_type="application/octet-stream"),
        Sent("empty", b"", False, {"pair": tag, "ключ.dotted-name": "значение"},
             durable=True, priority=0, ttl_ms=0, correlation=None, reply_to=None, content_type=None),
        Sent("text", "héllo wörld ✓ — ünïcode".encode(), True,
             {"colour": "green", "pair": tag, "count": -7, "ratio": 0.25, "flag": False},
             durable=False, priority=2, ttl_ms=1_200_000, correlation=f"corr-text-{tag}",
             reply_to="matrix-replies.text",
             content_type="text/plain; charset=utf-8"),
    ]


# -- the four clients, each with the same small interface ------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


class StompSide:
    MAPPED = {"correlation-id", "reply-to", "content-type"}
    OWN = {"subscription", "message-id", "destination", "persistent", "priority", "expires", "timestamp",
           "redelivered", "ack", "content-length"}

    def __init__(self, port: int, version: str = "1.2") -> None:
        cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
        kwargs = {} if version == "1.0" else {"heartbeats": (0, 0)}
        self.conn = cls([("127.0.0.1", port)], auto_decode=False, **kwargs)
        self.listener = Listener()
        self.conn.set_listener("matrix", self.listener)
        self.conn.connect("guest", "guest", wait=True)
        self.n = 0

    def _receipt(self) -> str:
        self.n += 1
        return f"r-{self.n}"

    def _await_receipt(self, rid: str) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.listener.receipts.get(timeout=0.2) == rid:
                    return
            except queue.Empty:
                pass
            assert self.listener.errors.empty(), self.listener.errors.get().headers
        raise TimeoutError(f"no RECEIPT {rid}")

    @staticmethod
    def destination(kind: str, address: str) -> str:
        return f"/{kind}/{address}"

    def subscribe(self, kind: str, address: str) -> None:
        rid = self._receipt()
        self.conn.subscribe(self.destination(kind, address), id=rid, ack="auto", headers={"receipt": rid})
        self._await_receipt(rid)

    def send(self, kind: str, address: str, m: Sent) -> None:
        rid = self._receipt()
        m.expiration = now_ms() + m.ttl_ms if m.ttl_ms else 0
        headers = {k: as_text(v) for k, v in m.props.items()}
        headers.update({"persistent": "true" if m.durable else "false", "priority": str(m.priority), "receipt": rid})
        for name, value in (("expires", m.expiration and str(m.expiration)), ("correlation-id", m.correlation),
                            ("reply-to", m.reply_to), ("content-type", m.content_type)):
            if value:
                headers[name] = value
        self.conn.send(self.destination(kind, address), m.body, headers=headers)
        self._await_receipt(rid)

    def receive(self) -> Got:
        frame = self.listener.get(timeout=10)
        h = frame.headers
        body = frame.body if isinstance(frame.body, bytes) else frame.body.encode()
        return Got(body, None, {k: v for k, v in h.items() if k not in self.OWN | self.MAPPED},
                   durable=h.get("persistent") == "true", priority=int(h["priority"]),
                   expiration=int(h.get("expires", 0)), correlation=h.get("correlation-id"),
                   reply_to=h.get("reply-to"), content_type=h.get("content-type"), raw=frame)

    def close(self) -> None:
        self.conn.disconnect()


class RawStomp10Side(StompSide):
    """A STOMP 1.0 subscriber on a plain socket: headers read as they come (stomp.py unescapes
    1.0 headers as if they were 1.2's, so it cannot show what a 1.0 client is sent)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""
        self.sock.sendall(b"CONNECT\nlogin:guest\npasscode:guest\n\n\x00")
        command, _, _ = self._frame()
        assert command == "CONNECTED", command

    def _frame(self) -> tuple[str, dict[str, str], bytes]:
        deadline = time.monotonic() + 10
        while True:
            head_end = self.buffer.find(b"\n\n")
            if head_end >= 0:
                lines = self.buffer[:head_end].decode().lstrip("\r\n").split("\n")
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers.setdefault(k, v)
                start = head_end + 2
                end = start + int(headers["content-length"]) if "content-length" in headers \
                    else self.buffer.find(b"\x00", start)
                if 0 <= end < len(self.buffer):
                    body, self.buffer = self.buffer[start:end], self.buffer[end + 1:]
                    return lines[0], headers, body
            if time.monotonic() > deadline:
                raise TimeoutError("no whole STOMP frame")
            self.buffer += self.sock.recv(65536)

    def subscribe(self, kind: str, address: str) -> None:
        self.sock.sendall(f"SUBSCRIBE\nid:1\ndestination:/{kind}/{address}\nreceipt:sub\n\n\x00".encode())
        command, headers, _ = self._frame()
        assert (command, headers.get("receipt-id")) == ("RECEIPT", "sub"), (command, headers)

    def receive(self) -> Got:
        command, h, body = self._frame()
        assert command == "MESSAGE", (command, h)
        return Got(body, None, {k: v for k, v in h.items() if k not in self.OWN | self.MAPPED},
                   durable=h.get("persistent") == "true", priority=int(h["priority"]),
                   expiration=int(h.get("expires", 0)), correlation=h.get("correlation-id"),
                   reply_to=h.get("reply-to"), content_type=h.get("content-type"))

    def close(self) -> None:
        self.sock.close()


class CoreSide:
    MAPPED = {"correlation-id", "reply-to", "content-type"}

    def __init__(self, port: int) -> None:
        self.conn = CoreConnection(f"tcp://127.0.0.1:{port}")
        self.session = self.conn.session()
        self.consumer = None

    @staticmethod
    def destination(kind: str, address: str) -> str:
        return f"{kind}://{address}"

    def subscribe(self, kind: str, address: str) -> None:
        self.consumer = self.session.consumer(self.destination(kind, address))

    def send(self, kind: str, address: str, m: Sent) -> None:
        m.expiration = now_ms() + m.ttl_ms if m.ttl_ms else 0
        props = dict(m.props)
        for name, value in (("correlation-id", m.correlation), ("reply-to", m.reply_to),
                            ("content-type", m.content_type)):
            if value is not None:
                props[name] = value
        message = CoreMessage(m.body, props, durable=m.durable, priority=m.priority, expiration=m.expiration)
        self.session.producer(self.destination(kind, address)).send(message, wait=True)

    def receive(self) -> Got:
        m = self.consumer.receive(timeout=10)
        assert m is not None, "nothing received over CORE"
        m.ack()
        p = m.properties
        return Got(m.body, None, {k: v for k, v in p.items() if k not in self.MAPPED}, durable=m.durable,
                   priority=m.priority, expiration=m.expiration, correlation=p.get("correlation-id"),
                   reply_to=p.get("reply-to"), content_type=p.get("content-type"), raw=m)

    def close(self) -> None:
        self.conn.close()


class MqttSide:
    """MQTT 5 (3.1.1 for a receiver only: it carries the body and the QoS)."""

    def __init__(self, port: int, client_id: str, version=V5) -> None:
        self.version = version
        self.client = Paho(port, client_id, version=version)

    @staticmethod
    def topic(address: str) -> str:
        return address.replace(".", "/")

    def subscribe(self, kind: str, address: str) -> None:
        assert kind == "topic", "MQTT speaks topics only"
        self.client.subscribe(self.topic(address), 1)

    def send(self, kind: str, address: str, m: Sent) -> None:
        assert kind == "topic", "MQTT speaks topics only"
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [(k, as_text(v)) for k, v in m.props.items()]
        if m.ttl_ms:
            props.MessageExpiryInterval = m.ttl_ms // 1000
        if m.content_type is not None:
            props.ContentType = m.content_type
        if m.reply_to is not None:
            props.ResponseTopic = self.topic(m.reply_to)  # the topic of the address replies go to
        if m.correlation is not None:
            props.CorrelationData = m.correlation if isinstance(m.correlation, bytes) else m.correlation.encode()
        if m.text:
            props.PayloadFormatIndicator = 1
        m.expiration = now_ms() + m.ttl_ms if m.ttl_ms else 0
        self.client.publish(self.topic(address), m.body, 1 if m.durable else 0, properties=props)

    def receive(self) -> Got:
        msg = self.client.get(timeout=10)
        p = msg.properties
        expiry = getattr(p, "MessageExpiryInterval", None)
        corr = getattr(p, "CorrelationData", None)
        fmt = getattr(p, "PayloadFormatIndicator", None)
        return Got(msg.payload, None if fmt is None else fmt == 1, dict(getattr(p, "UserProperty", []) or []),
                   durable=msg.qos >= 1, priority=None,
                   expiration=now_ms() + expiry * 1000 if expiry else 0,
                   correlation=corr,  # bytes: compared as text when text was sent
                   reply_to=getattr(p, "ResponseTopic", None), content_type=getattr(p, "ContentType", None), raw=msg)

    def close(self) -> None:
        self.client.close()


class AmqpSide:
    def __init__(self, port: int) -> None:
        self.conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=20)
        self.receiver = None
        self.senders: dict = {}  # one link per address (a link name is attached once)

    @staticmethod
    def destination(kind: str, address: str) -> str:
        return f"{kind}://{address}"

    def subscribe(self, kind: str, address: str) -> None:
        self.receiver = self.conn.create_receiver(self.destination(kind, address))

    def send(self, kind: str, address: str, m: Sent) -> None:
        sent_at = now_ms()
        msg = AmqpMessage(properties=dict(m.props), durable=m.durable, priority=m.priority)
        for name, value in (("correlation_id", m.correlation), ("reply_to", m.reply_to),
                            ("content_type", m.content_type)):
            if value is not None:
                setattr(msg, name, value)
        if m.text:
            msg.body = m.body.decode()  # an amqp-value string
            if m.ttl_ms:
                msg.expiry_time = (sent_at + m.ttl_ms) / 1000  # absolute-expiry-time
        else:
            msg.body = m.body
            msg.inferred = True  # one data section, as a JMS BytesMessage
            if m.ttl_ms:
                msg.ttl = m.ttl_ms / 1000  # header ttl
        m.expiration = sent_at + m.ttl_ms if m.ttl_ms else 0
        target = self.destination(kind, address)
        if target not in self.senders:
            self.senders[target] = self.conn.create_sender(target)
        self.senders[target].send(msg)  # returns once accepted

    def receive(self) -> Got:
        m = self.receiver.receive(timeout=10)
        self.receiver.accept()
        text = isinstance(m.body, str)
        body = m.body.encode() if text else bytes(m.body)
        expiration = round(m.expiry_time * 1000) if m.expiry_time else 0
        ttl_expiration = now_ms() + round(m.ttl * 1000) if m.ttl else 0  # the header's ttl: the time left
        corr = bytes(m.correlation_id) if isinstance(m.correlation_id, (bytes, memoryview)) else m.correlation_id
        return Got(body, text, dict(m.properties or {}), durable=bool(m.durable), priority=m.priority,
                   expiration=expiration, correlation=corr, reply_to=m.reply_to,
                   # (proton reads an unset content type as the symbol 'None')
                   content_type=None if str(m.content_type) == "None" else str(m.content_type),
                   ttl_expiration=ttl_expiration, raw=m)

    def close(self) -> None:
        self.conn.close()


# -- the broker and the checks ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    yield from module_broker(tmp_path_factory, "matrix", settings=f"min_large_message_size = {LARGE // 2}\n")


@pytest.fixture
def clients(broker):
    """`open(protocol, label)`: a connected client over the all-protocols port, closed after the test."""
    opened = []

    def open_(protocol: str, label: str, **options):
        side = {"stomp": lambda: StompSide(broker.port, **options),
                "stomp10": lambda: RawStomp10Side(broker.port),
                "core": lambda: CoreSide(broker.port),
                "mqtt": lambda: MqttSide(broker.port, f"matrix-{label}", **options),
                "amqp": lambda: AmqpSide(broker.port)}[protocol]()
        opened.append(side)
        return side

    yield open_
    for side in reversed(opened):
        try:
            side.close()
        except Exception:  # a client a failed test left broken: the others still close
            pass


def expected_property(value: object, src: str, dst: str) -> object:
    """A property as the receiver should see it: typed between typed protocols, else its text."""
    if src in TYPED and dst in TYPED:
        return value
    return as_text(value)


def as_text(value: object) -> str:
    """A value as text, where a protocol has no types (a boolean as JMS writes it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def check(sent: Sent, got: Got, src: str, dst: str) -> list[str]:
    """Every difference between what was sent and what arrived that the pair can express."""
    problems = []

    def differ(what: str, want: object, have: object) -> None:
        problems.append(f"{sent.label} {src}->{dst}: {what}: sent {want!r}, got {have!r}")

    if got.body != sent.body:
        differ("body", sent.body, got.body)
    internal = sorted(k for k in got.props if k.startswith(("_MQTT_", "_AMQP_")))
    if internal:
        differ("internal properties (none should reach a client)", [], internal)
    if src in TEXT_KIND and dst in TEXT_KIND and bool(got.text) != sent.text:
        differ("text or binary (AMQP string / MQTT payload format indicator)", sent.text, got.text)
    for k, v in sent.props.items():
        want = expected_property(v, src, dst)
        have = got.props.get(k, "<missing>")
        if have != want or type(have) is not type(want):
            differ(f"property {k}", want, have)
    if "mqtt" not in (src, dst):
        if got.priority != sent.priority:
            differ("priority", sent.priority, got.priority)
    elif src == "mqtt" and got.priority is not None and got.priority != 4:
        differ("priority (MQTT has none: the default 4)", 4, got.priority)
    if abs(got.expiration - sent.expiration) > TTL_SLACK_MS or (got.expiration == 0) != (sent.expiration == 0):
        differ("expiration (epoch ms)", sent.expiration, got.expiration)
    if got.ttl_expiration is not None and (abs(got.ttl_expiration - sent.expiration) > TTL_SLACK_MS
                                           or (got.ttl_expiration == 0) != (sent.expiration == 0)):
        differ("header ttl (as epoch ms)", sent.expiration, got.ttl_expiration)
    if got.durable != sent.durable:
        differ("durable", sent.durable, got.durable)
    correlation = got.correlation
    if dst == "mqtt" and isinstance(sent.correlation, str) and isinstance(correlation, bytes):
        correlation = correlation.decode("utf-8", "replace")  # MQTT's correlation data is bytes
    reply_to = sent.reply_to
    if dst == "mqtt" and reply_to is not None:
        reply_to = MqttSide.topic(reply_to)  # an address reaches MQTT as its topic
    for what, want, have in (("correlation id", sent.correlation, correlation),
                             ("reply-to", reply_to, got.reply_to),
                             ("content type", sent.content_type, got.content_type)):
        if have != want or type(have) is not type(want):
            differ(what, want, have)
    return problems


def routes(src: str, dst: str) -> list[str]:
    return ["topic"] if "mqtt" in (src, dst) else ["queue", "topic"]


PAIRS = [pytest.param(src, dst, kind, id=f"{src}-to-{dst}-{kind}")
         for src in PROTOCOLS for dst in PROTOCOLS for kind in routes(src, dst)]


@pytest.mark.parametrize(("src", "dst", "kind"), PAIRS)
def test_message_crosses_protocols_intact(clients, src, dst, kind):
    address = f"matrix.{kind}.{src}.{dst}"
    receiver = clients(dst, f"rx-{src}-{dst}-{kind}")
    sender = clients(src, f"tx-{src}-{dst}-{kind}")
    receiver.subscribe(kind, address)
    sent = messages(src, dst)
    for m in sent:
        sender.send(kind, address, m)
    got: dict[str, Got] = {}
    for _ in sent:
        g = receiver.receive()
        label = next((m.label for m in sent if m.body == g.body), "?")
        assert label not in got, f"{label} twice"
        got[label] = g
    problems = [p for m in sent for p in check(m, got[m.label], src, dst) if m.label in got]
    unknown = got.pop("?", None)
    assert unknown is None, f"a body that was not sent ({len(unknown.body)} bytes): {unknown.body[:64]!r}"
    assert not problems, "\n".join(problems)


def test_one_send_read_by_stomp_mqtt_and_amqp_subscribers_at_once(clients):
    """One message, rendered for five subscribers of one topic (two STOMP versions, two MQTT
    levels, AMQP), for each of two messages: each gets its protocol's rendering."""
    address = "matrix.fanout"
    subs = {
        "stomp": clients("stomp", "fan-stomp12"),
        "stomp10": clients("stomp10", "fan-stomp10"),
        "mqtt": clients("mqtt", "fan-mqtt5"),
        "mqtt311": clients("mqtt", "fan-mqtt311", version=V311),
        "amqp": clients("amqp", "fan-amqp"),
    }
    for side in subs.values():
        side.subscribe("topic", address)
    sender = clients("core", "fan-core")
    for m in messages("core", "fanout"):
        m.props["path"] = "a:b\\c"  # escaped by STOMP 1.2 (\c, \\), verbatim in 1.0
        sender.send("topic", address, m)
        for name, side in subs.items():
            got = side.receive()
            assert got.body == m.body, (name, m.label)
            if name == "mqtt311":  # no properties in 3.1.1: the body and the QoS
                assert got.durable == m.durable
                continue
            dst = "stomp" if name == "stomp10" else name
            problems = check(m, got, "core", dst)
            assert not problems, name + ": " + "\n".join(problems)


@pytest.mark.parametrize("dst", PROTOCOLS)
def test_mqtt_311_publish_reaches_each_protocol(clients, dst):
    """MQTT 3.1.1 carries a payload and a QoS only: the body arrives intact, QoS 1 durable and
    QoS 0 not, with the default priority and no expiry, correlation or content type."""
    address = f"matrix.topic.mqtt311.{dst}"
    receiver = clients(dst, f"rx-mqtt311-{dst}")
    sender = clients("mqtt", f"tx-mqtt311-{dst}", version=V311)
    receiver.subscribe("topic", address)
    bodies = {bytes(range(256)) + b"qos1": 1, "ünïcode qos0".encode(): 0}
    for body, qos in bodies.items():
        sender.client.publish(MqttSide.topic(address), body, qos)
    for _ in range(len(bodies)):
        got = receiver.receive()
        assert got.body in bodies, got.body[:64]
        assert got.durable == (bodies.pop(got.body) == 1)
        assert got.priority in (None, 4) and got.expiration == 0
        assert (got.correlation, got.reply_to, got.content_type) == (None, None, None)


@pytest.mark.parametrize("service", ["stomp", "core", "amqp"])
def test_a_service_answers_an_mqtt_request_where_the_requester_listens(clients, service):
    """An MQTT 5 requester names its response topic ``a/b/c``; a service of another protocol
    answers to the reply-to it reads, and the answer reaches the requester's subscription."""
    requests, responses = f"matrix.requests.{service}", f"matrix/responses/{service}/r1"
    server = clients(service, f"svc-{service}")
    server.subscribe("topic", requests)
    requester = clients("mqtt", f"req-{service}")
    requester.client.subscribe(responses, 1)
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = responses
    props.CorrelationData = b"req-1"
    requester.client.publish(MqttSide.topic(requests), b"question", 1, properties=props)
    request = server.receive()
    assert request.body == b"question"
    assert request.reply_to == f"matrix.responses.{service}.r1"  # an address, not the topic
    answer = Sent("answer", b"answer", False, {}, durable=True, priority=4, ttl_ms=0, correlation="req-1",
                  reply_to=None, content_type=None)
    server.send("topic", request.reply_to, answer)
    got = requester.receive()
    assert (got.body, got.raw.topic, got.correlation) == (b"answer", responses, b"req-1")


@pytest.mark.parametrize("src", ["core", "amqp"])
@pytest.mark.parametrize("dst", ["stomp", "mqtt"])
def test_bytes_properties_reach_text_protocols_as_base64(clients, src, dst):
    """A bytes property (CORE and AMQP can hold one) reaches STOMP headers and MQTT user
    properties as its standard base64, never as Python's ``b'...'``."""
    address = f"matrix.topic.bytes.{src}.{dst}"
    receiver = clients(dst, f"rx-bytes-{src}-{dst}")
    sender = clients(src, f"tx-bytes-{src}-{dst}")
    receiver.subscribe("topic", address)
    blob = b"\x00\x01\xfe\xffbytes"
    sender.send("topic", address, Sent("bytes", b"b", False, {"blob": blob, "plain": "text"}, durable=False,
                                       priority=4, ttl_ms=0, correlation=None, reply_to=None, content_type=None))
    got = receiver.receive()
    assert got.props.get("blob") == "AAH+/2J5dGVz"  # base64 of blob
    assert got.props.get("plain") == "text"


@pytest.mark.parametrize("src", PROTOCOLS)
def test_no_client_sets_another_protocols_internal_properties(clients, src):
    """Properties named like a protocol's internal ones (``_AMQP_BODY=amqp`` would make AMQP
    receivers take a body for encoded sections; ``_MQTT_CLIENT`` is what No Local compares) are
    not a client's to set: they are dropped from its send, and the message arrives as sent."""
    address = f"matrix.topic.spoof.{src}"
    receivers = {"amqp": clients("amqp", f"rx-spoof-amqp-{src}"), "stomp": clients("stomp", f"rx-spoof-stomp-{src}")}
    for side in receivers.values():
        side.subscribe("topic", address)
    sender = clients(src, f"tx-spoof-{src}")
    spoofed = {"_AMQP_BODY": "amqp", "_MQTT_CLIENT": "someone-else", "_MQTT_RETAIN": "true", "kept": "yes"}
    sender.send("topic", address, Sent("spoof", b"plain bytes", False, spoofed, durable=False, priority=4,
                                       ttl_ms=0, correlation=None, reply_to=None, content_type=None))
    for name, side in receivers.items():
        got = side.receive()
        assert got.body == b"plain bytes", name
        assert {k: v for k, v in got.props.items() if k != "kept"} == {}, (name, got.props)
        assert got.props["kept"] == "yes", name
