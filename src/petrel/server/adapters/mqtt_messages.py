"""MQTT PUBLISH <-> Petrel `Message`: payload, QoS, retain and the 5.0 properties.

A PUBLISH's QoS above 0 makes a durable message. 5.0 properties become message properties
that other protocols read: user properties by their own names (all of them, in order, also
under ``_MQTT_USER_PROPERTIES`` when a name repeats), the content type as ``content-type``,
the response topic as ``reply-to`` in address form (``a/b`` -> ``a.b``, as topics become addresses;
a reply-to goes out to MQTT as a topic again, ``a.b`` -> ``a/b``), the correlation data as
``correlation-id`` (text when it is UTF-8), the message expiry interval as the message's expiration, the payload format
indicator as ``_MQTT_FORMAT`` (an AMQP string body goes out with the indicator too). A message
from another protocol reaches MQTT 5 subscribers with its properties as user properties
(typed values as `petrel.core.message_props.text` says, bytes in base64; the protocols' internal
``_MQTT_*``/``_AMQP_*`` properties left out, and those an MQTT string cannot hold). The
properties that do not change between deliveries are built once per message (its wire cache,
key "mqtt5").
"""

from __future__ import annotations

import math
from dataclasses import fields

from petrel.codec.mqtt import PropertyId as P
from petrel.codec.mqtt import Publish
from petrel.codec.mqtt.packets import publish
from petrel.core.message import Message, now_ms
from petrel.core.message_props import CONTENT_TYPE, CORRELATION_ID, INTERNAL_PREFIXES, REPLY_TO, text
from petrel.server.adapters.mqtt_topics import TopicError, address_to_topic, topic_to_address

__all__ = ["QOS", "RETAIN", "to_message", "to_publish", "message_qos", "static_properties"]

QOS = "_MQTT_QOS"
RETAIN = "_MQTT_RETAIN"
FORMAT = "_MQTT_FORMAT"
USER_PROPERTIES = "_MQTT_USER_PROPERTIES"
AMQP_BODY = "_AMQP_BODY"  # the AMQP adapter's body kind: "text" for an amqp-value string
# Properties another name carries, and the broker's own: not user properties on the way out.
_NOT_USER = (*INTERNAL_PREFIXES, "_AMQ", "_PETREL", "JMS")
_MAPPED = frozenset({CONTENT_TYPE, REPLY_TO, CORRELATION_ID})
_CACHE_KEY = "mqtt5"


def to_message(publish: Publish, message_id: int, address: str, *, v5: bool) -> Message:
    now = now_ms()
    props: dict[str, object] = {}
    if publish.qos:
        props[QOS] = publish.qos
    if publish.retain:
        props[RETAIN] = True
    expiration = 0
    if v5 and publish.properties:
        pp = publish.properties
        users = pp.get(P.USER_PROPERTY)
        if users:
            names = [name for name, _ in users]
            for name, value in users:
                if not name.startswith(INTERNAL_PREFIXES):  # (not a client's to set)
                    props.setdefault(name, value)
            if len(set(names)) != len(names):
                props[USER_PROPERTIES] = [list(pair) for pair in users]
        if P.CONTENT_TYPE in pp:
            props["content-type"] = pp[P.CONTENT_TYPE]
        if P.RESPONSE_TOPIC in pp:
            props[REPLY_TO] = response_to_address(pp[P.RESPONSE_TOPIC])
        if P.CORRELATION_DATA in pp:
            data = pp[P.CORRELATION_DATA]
            try:
                props["correlation-id"] = data.decode("utf-8")
            except UnicodeDecodeError:
                props["correlation-id"] = data
        if pp.get(P.PAYLOAD_FORMAT_INDICATOR):
            props[FORMAT] = 1
        if P.MESSAGE_EXPIRY_INTERVAL in pp:
            expiration = now + pp[P.MESSAGE_EXPIRY_INTERVAL] * 1000
    # (positional: half the cost of keywords, one message per PUBLISH; the order is checked below)
    return Message(message_id, address, publish.payload, props, publish.qos > 0, 4, expiration, now)


assert [f.name for f in fields(Message)][:8] == ["id", "address", "body", "properties", "durable", "priority",
                                                "expiration", "timestamp"]
assert Message.__dataclass_fields__["priority"].default == 4  # (to_message's priority)


def message_qos(message: Message) -> int:
    """The QoS the message was published with (another protocol's: 1 if durable, else 0)."""
    qos = message.properties.get(QOS)
    if isinstance(qos, int) and 0 <= qos <= 2:
        return qos
    return 1 if message.durable else 0


def response_to_address(topic: str) -> str:
    """A response topic as a reply-to: the address its topic is (``a/b`` -> ``a.b``); one that
    names no address (an empty level) is kept as it is."""
    try:
        return topic_to_address(topic)
    except TopicError:
        return topic


def to_publish(message: Message, qos: int, packet_id: int | None, *, retain: bool, dup: bool, v5: bool,
               topic: str | None = None, subscription_ids: list[int] | None = None) -> Publish | None:
    """The PUBLISH for a delivery; None when the message expired meanwhile."""
    properties: dict = {}
    if v5:
        properties = static_properties(message)
        if message.expiration or subscription_ids:
            properties = dict(properties)  # (the cached ones stay as they are)
            if message.expiration:
                left = math.ceil((message.expiration - now_ms()) / 1000)
                if left <= 0:
                    return None
                properties[P.MESSAGE_EXPIRY_INTERVAL] = left
            if subscription_ids:
                properties[P.SUBSCRIPTION_IDENTIFIER] = subscription_ids
    return publish(topic if topic is not None else address_to_topic(message.address), message.body, qos,
                   retain, dup and qos > 0, packet_id, properties)


def static_properties(message: Message) -> dict:
    """The 5.0 properties of `message` that are the same at every delivery (cached on it)."""
    cache = message.wire_cache
    if cache is not None and cache[0] is _CACHE_KEY:
        return cache[1]
    properties = message.wire_get(_CACHE_KEY)
    if properties is None:
        properties, size = _static_properties(message.properties)
        message.wire_put(_CACHE_KEY, properties, size)
    return properties  # type: ignore[return-value]


def _static_properties(props: dict) -> tuple[dict, int]:
    """The 5.0 properties of a message that are the same at every delivery, and about how many
    bytes they take."""
    properties: dict = {}
    size = 0
    if props.get(FORMAT) or props.get(AMQP_BODY) == "text":  # (an AMQP string body is UTF-8 text)
        properties[P.PAYLOAD_FORMAT_INDICATOR] = 1
    ctype = props.get(CONTENT_TYPE)
    if ctype is not None and _fits(ctype := text(ctype)):
        properties[P.CONTENT_TYPE] = ctype
        size += len(ctype)
    reply = props.get(REPLY_TO)
    if reply is not None and _fits(reply := address_to_topic(text(reply))):
        properties[P.RESPONSE_TOPIC] = reply
        size += len(reply)
    corr = props.get(CORRELATION_ID)
    if corr is not None:
        data = bytes(corr) if isinstance(corr, (bytes, bytearray, memoryview)) else text(corr).encode()
        if len(data) <= 0xFFFF:
            properties[P.CORRELATION_DATA] = data
            size += len(data)
    stored = props.get(USER_PROPERTIES)
    if isinstance(stored, list):
        users = [(str(k), text(v)) for k, v in stored]
    else:
        users = [(k, v if isinstance(v, str) else text(v)) for k, v in props.items()
                 if k not in _MAPPED and not k.startswith(_NOT_USER)]
    if users:
        users = [(k, v) for k, v in users if _fits(k) and _fits(v)]  # MQTT strings: 65,535 bytes
        if users:
            properties[P.USER_PROPERTY] = users
            size += sum(len(k) + len(v) + 4 for k, v in users)
    return properties, size


def _fits(s: str) -> bool:
    """Whether `s` fits an MQTT string (65,535 bytes of UTF-8, no U+0000); what does not is
    left out of the PUBLISH (another protocol's property MQTT cannot carry)."""
    if len(s) > 0xFFFF or "\x00" in s:
        return False
    return len(s) <= 0x3FFF or len(s.encode("utf-8", "surrogatepass")) <= 0xFFFF
