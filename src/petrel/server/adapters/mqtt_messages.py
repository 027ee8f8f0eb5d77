"""MQTT PUBLISH <-> Petrel `Message`: payload, QoS, retain and the 5.0 properties.

A PUBLISH's QoS above 0 makes a durable message. 5.0 properties become message properties
that other protocols read: user properties by their own names (all of them, in order, also
under ``_MQTT_USER_PROPERTIES`` when a name repeats), the content type as ``content-type``,
the response topic as ``reply-to``, the correlation data as ``correlation-id`` (text when it
is UTF-8), the message expiry interval as the message's expiration, the payload format
indicator as ``_MQTT_FORMAT`` (an AMQP string body goes out with the indicator too). A message
from another protocol reaches MQTT 5 subscribers with its properties as user properties (those
an MQTT string cannot hold left out).
"""

from __future__ import annotations

import math

from petrel.codec.mqtt import PropertyId as P
from petrel.codec.mqtt import Publish
from petrel.core.message import Message, now_ms
from petrel.server.adapters.mqtt_topics import address_to_topic

__all__ = ["QOS", "RETAIN", "to_message", "to_publish", "message_qos"]

QOS = "_MQTT_QOS"
RETAIN = "_MQTT_RETAIN"
FORMAT = "_MQTT_FORMAT"
USER_PROPERTIES = "_MQTT_USER_PROPERTIES"
AMQP_BODY = "_AMQP_BODY"  # the AMQP adapter's body kind: "text" for an amqp-value string
# Properties another name carries, and the broker's own: not user properties on the way out.
_NOT_USER = ("_MQTT_", "_AMQ", "_PETREL", "JMS")
_MAPPED = frozenset({"content-type", "reply-to", "correlation-id"})


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
                props.setdefault(name, value)
            if len(set(names)) != len(names):
                props[USER_PROPERTIES] = [list(pair) for pair in users]
        if P.CONTENT_TYPE in pp:
            props["content-type"] = pp[P.CONTENT_TYPE]
        if P.RESPONSE_TOPIC in pp:
            props["reply-to"] = pp[P.RESPONSE_TOPIC]
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
    return Message(id=message_id, address=address, body=publish.payload, properties=props,
                   durable=publish.qos > 0, expiration=expiration, timestamp=now)


def message_qos(message: Message) -> int:
    """The QoS the message was published with (another protocol's: 1 if durable, else 0)."""
    qos = message.properties.get(QOS)
    if isinstance(qos, int) and 0 <= qos <= 2:
        return qos
    return 1 if message.durable else 0


def to_publish(message: Message, qos: int, packet_id: int | None, *, retain: bool, dup: bool, v5: bool,
               topic: str | None = None, subscription_ids: list[int] | None = None) -> Publish | None:
    """The PUBLISH for a delivery; None when the message expired meanwhile."""
    properties: dict = {}
    if v5:
        props = message.properties
        if message.expiration:
            left = math.ceil((message.expiration - now_ms()) / 1000)
            if left <= 0:
                return None
            properties[P.MESSAGE_EXPIRY_INTERVAL] = left
        if props.get(FORMAT) or props.get(AMQP_BODY) == "text":  # (an AMQP string body is UTF-8 text)
            properties[P.PAYLOAD_FORMAT_INDICATOR] = 1
        ctype = props.get("content-type")
        if ctype is not None and _fits(str(ctype)):
            properties[P.CONTENT_TYPE] = str(ctype)
        reply = props.get("reply-to")
        if reply is not None and _fits(str(reply)):
            properties[P.RESPONSE_TOPIC] = str(reply)
        corr = props.get("correlation-id")
        if corr is not None:
            data = corr if isinstance(corr, bytes) else str(corr).encode()
            if len(data) <= 0xFFFF:
                properties[P.CORRELATION_DATA] = data
        stored = props.get(USER_PROPERTIES)
        if isinstance(stored, list):
            users = [(str(k), str(v)) for k, v in stored]
        else:
            users = [(k, v if isinstance(v, str) else _text(v)) for k, v in props.items()
                     if k not in _MAPPED and not k.startswith(_NOT_USER)]
        if users:
            users = [(k, v) for k, v in users if _fits(k) and _fits(v)]  # MQTT strings: 65,535 bytes
            if users:
                properties[P.USER_PROPERTY] = users
        if subscription_ids:
            properties[P.SUBSCRIPTION_IDENTIFIER] = subscription_ids
    return Publish(topic if topic is not None else address_to_topic(message.address), message.body, qos,
                   retain, dup and qos > 0, packet_id, properties)


def _fits(text: str) -> bool:
    """Whether `text` fits an MQTT string (65,535 bytes of UTF-8, no U+0000); what does not is
    left out of the PUBLISH (another protocol's property MQTT cannot carry)."""
    if len(text) > 0xFFFF or "\x00" in text:
        return False
    return len(text) <= 0x3FFF or len(text.encode("utf-8", "surrogatepass")) <= 0xFFFF


def _text(value: object) -> str:
    """A typed property (CORE's, AMQP's) as a user property: a boolean as JMS writes it
    (true/false, not Python's True/False), a number in decimal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
