"""AMQP 1.0 messages to Petrel's `Message` and back, and the addresses AMQP clients name.

Mapping (AMQP -> Petrel; the way back is the reverse):

- header: ``durable`` -> durable, ``priority`` -> priority (0-9, default 4), ``ttl`` -> expiration
  (now + ttl; properties' ``absolute-expiry-time`` wins when set). Out, a message that expires
  has both: ``absolute-expiry-time`` and the time it has left as ``ttl`` (at delivery).
- properties: ``message-id`` -> ``_AMQP_MESSAGE_ID`` (typed text), ``correlation-id`` -> the
  ``correlation-id`` property when it is a string (STOMP's name) or binary (bytes, as MQTT's
  correlation data; bytes go out as binary), else typed in ``_AMQP_CORRELATION_ID`` and as text
  in ``correlation-id``; ``reply-to`` -> ``reply-to``; ``content-type`` -> ``content-type``;
  ``subject`` -> ``subject`` (out, a JMS client's ``JMSType`` when there is no subject, as Qpid
  JMS maps it; in, a JMS consumer gets the subject as its JMSType); ``group-id`` -> ``JMSXGroupID``; ``group-sequence`` ->
  ``JMSXGroupSeq``; ``creation-time`` -> timestamp.
- out, the properties' ``user-id`` is the sending OpenWire connection's authenticated user when
  the broker knows it, else a ``JMSXUserID`` property (UTF-8; then not an application property).
- application-properties -> properties (simple values; other types as text).
- message-annotations with scalar values -> ``_AMQP_MA_<key>``; ``x-opt-delivery-time`` and
  ``x-opt-delivery-delay`` schedule the message.
- body: one data section -> body (several are joined); an amqp-value string -> its UTF-8 bytes
  (``_AMQP_BODY=text``), binary -> the bytes (``binary``); any other body -> its encoded
  sections kept as they came (``amqp``). A message from STOMP or CORE goes out as one data section;
  one from MQTT 5 marked UTF-8 (payload format indicator 1) as an amqp-value string; one from a
  JMS client (OpenWire) as Qpid JMS sends that kind, with the ``x-opt-jms-msg-type``
  annotation (`petrel.server.adapters.openwire_bodies`): a TextMessage as an amqp-value
  string, a MapMessage or StreamMessage as an amqp-value map or list.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from petrel.codec.amqp.message import BODY_DATA, BODY_VALUE, AmqpMessage, decode_message, encode_message
from petrel.codec.amqp.performatives import (
    AmqpSequence, AmqpValue, ApplicationProperties, Header, MessageAnnotations, Properties,
)
from petrel.codec.amqp.types import Byte, Described, Symbol, Timestamp, UByte, UInt, ULong, encode
from petrel.core.message import Message, RoutingType, now_ms
from petrel.core.message_props import (
    CONTENT_TYPE,
    CORRELATION_ID,
    GROUP_ID,
    GROUP_SEQ,
    INTERNAL_PREFIXES,
    REPLY_TO,
    SUBJECT,
)
from petrel.server.adapters.openwire_bodies import JMS_MSG_TYPE, amqp_body
from petrel.server.adapters.openwire_bodies import KIND as JMS_KIND

JMS_TYPE = "JMSType"  # a JMS client's JMSType, as the OpenWire adapter keeps it
JMS_USER = "JMSXUserID"  # the property a JMS client names its user with

__all__ = ["parse_address", "to_petrel", "to_amqp", "RESERVED"]

BODY = "_AMQP_BODY"
MESSAGE_ID = "_AMQP_MESSAGE_ID"
TYPED_CORRELATION_ID = "_AMQP_CORRELATION_ID"
ANNOTATION = "_AMQP_MA_"
MQTT_TEXT = "_MQTT_FORMAT"  # MQTT 5's payload format indicator (1: UTF-8 text), as the MQTT adapter keeps it
#: Properties that become AMQP header or properties fields, not application properties.
RESERVED = frozenset({BODY, MESSAGE_ID, TYPED_CORRELATION_ID, CORRELATION_ID, REPLY_TO, CONTENT_TYPE, SUBJECT,
                      GROUP_ID, GROUP_SEQ})

QUEUE_PREFIX, TOPIC_PREFIX = "queue://", "topic://"


def parse_address(address: str | None, capabilities: tuple | None) -> tuple[str | None, RoutingType | None]:
    """(name, routing type) of a source or target: ``queue://``/``topic://`` prefixes, then the
    ``queue``/``topic`` capabilities Qpid JMS sends, else the address decides (None)."""
    if not address:
        return None, None
    if address.startswith(QUEUE_PREFIX):
        return address[len(QUEUE_PREFIX):], RoutingType.ANYCAST
    if address.startswith(TOPIC_PREFIX):
        return address[len(TOPIC_PREFIX):], RoutingType.MULTICAST
    caps = set(capabilities or ())
    if "queue" in caps or "temporary-queue" in caps:
        return address, RoutingType.ANYCAST
    if "topic" in caps or "temporary-topic" in caps:
        return address, RoutingType.MULTICAST
    return address, None


def _typed(value: Any) -> str:
    if isinstance(value, uuid.UUID):
        return f"g:{value}"
    if isinstance(value, bytes):
        return f"b:{value.hex()}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"u:{int(value)}"
    return f"s:{value}"


def _untyped(text: str) -> Any:
    kind, _, value = text.partition(":")
    try:
        if kind == "g":
            return uuid.UUID(value)
        if kind == "b":
            return bytes.fromhex(value)
        if kind == "u":
            return ULong(int(value))
    except ValueError:
        pass
    return value if kind == "s" else text


def _simple(value: Any) -> Any:
    """A value a Petrel property holds: None, bool, int, float, str or bytes."""
    if value is None or type(value) in (bool, float, str, bytes):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    return str(value)


def to_petrel(payload: bytes, *, message_id: int, address: str, now: int) -> Message:
    """The Petrel message for a transfer's payload (raises `AmqpError` if it does not decode)."""
    m = decode_message(payload)
    props: dict[str, object] = {}
    if m.application_properties:
        for k, v in m.application_properties.items():
            if not str(k).startswith(INTERNAL_PREFIXES):  # (not a client's to set)
                props[str(k)] = _simple(v)
    message = Message(id=message_id, address=address, body=b"", properties=props, timestamp=now)
    h = m.header
    if h is not None:
        message.durable = bool(h.durable)
        if h.priority is not None:
            message.priority = min(int(h.priority), 9)
        if h.ttl:
            message.expiration = now + int(h.ttl)
    p = m.properties
    if p is not None:
        if p.message_id is not None:
            props[MESSAGE_ID] = _typed(p.message_id)
        corr = p.correlation_id
        if corr is not None:
            if isinstance(corr, str):
                props[CORRELATION_ID] = str(corr)
            elif isinstance(corr, bytes):  # binary: as MQTT's correlation data and CORE's bytes
                props[CORRELATION_ID] = bytes(corr)
            else:  # ulong, uuid: typed for AMQP receivers, as text for the others
                props[TYPED_CORRELATION_ID] = _typed(corr)
                props[CORRELATION_ID] = str(corr)
        for field, name in (("reply_to", REPLY_TO), ("content_type", CONTENT_TYPE), ("subject", SUBJECT),
                            ("group_id", GROUP_ID)):
            value = getattr(p, field)
            if value is not None:
                props[name] = str(value)
        if p.group_sequence is not None:
            props[GROUP_SEQ] = int(p.group_sequence)
        if p.absolute_expiry_time:
            message.expiration = int(p.absolute_expiry_time)
        if p.creation_time:
            message.timestamp = int(p.creation_time)
    if m.message_annotations:
        for k, v in m.message_annotations.items():
            if isinstance(k, str) and (v is None or isinstance(v, (bool, int, float, str))):
                props[ANNOTATION + k] = _simple(v)
        when = m.message_annotations.get("x-opt-delivery-time")
        delay = m.message_annotations.get("x-opt-delivery-delay")
        if isinstance(when, int) and when > now:
            message.scheduled = int(when)
        elif isinstance(delay, int) and delay > 0:
            message.scheduled = now + int(delay)
    if m.body_kind == BODY_DATA:
        message.body = m.body[0] if len(m.body) == 1 else b"".join(m.body)
    elif m.body_kind == BODY_VALUE and isinstance(m.body, str):
        message.body = m.body.encode("utf-8")
        props[BODY] = "text"
    elif m.body_kind == BODY_VALUE and isinstance(m.body, bytes):
        message.body = m.body
        props[BODY] = "binary"
    elif m.body_kind is not None:
        message.body = _body_sections(m)
        props[BODY] = "amqp"
    return message


def _body_sections(m: AmqpMessage) -> bytes:
    if m.body_kind == BODY_VALUE:
        return encode(Described(ULong(AmqpValue), m.body))
    return b"".join(encode(Described(ULong(AmqpSequence), s)) for s in m.body)


def _wire_value(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool) and not -(1 << 63) <= v < 1 << 63:
        return str(v)
    return v


def to_amqp(message: Message, delivery_count: int) -> bytes:
    """The transfer payload for a Petrel message (from any protocol). The sections between the
    header and the body are encoded once and cached on the message (`Message.wire_put`, key
    "amqp"), so a message delivered to several AMQP receivers is encoded once, and the cache
    holds no copy of a data body; the header carries the delivery count and is encoded each time
    (or taken from a table when the message does not expire)."""
    header = _header(message, delivery_count)
    cache = message.wire_cache
    if cache is not None and cache[0] is _CACHE_KEY:
        sections, data_body = cache[1]
    else:
        got = message.wire_get(_CACHE_KEY)
        if got is None:
            got = _bare(message)
            message.wire_put(_CACHE_KEY, got, len(got[0]))
        sections, data_body = got  # type: ignore[misc]
    if not data_body:
        return header + sections
    body = message.body
    n = len(body)
    return b"".join((header, sections, _DATA + (bytes((0xa0, n)) if n < 256 else b"\xb0" + n.to_bytes(4, "big")),
                     body))


#: Encoded headers of messages that do not expire, by (durable, priority, delivery count).
_HEADERS: dict[tuple[bool, int, int], bytes] = {}


def _header(message: Message, delivery_count: int) -> bytes:
    expiration = message.expiration
    if expiration:  # its ttl is the time it has left: encoded each time
        return encode(Header(durable=message.durable or None, priority=UByte(message.priority),
                             ttl=_ttl_left(expiration),
                             delivery_count=UInt(delivery_count) if delivery_count else None))
    key = (message.durable, message.priority, delivery_count)
    header = _HEADERS.get(key)
    if header is None:
        header = encode(Header(durable=message.durable or None, priority=UByte(message.priority),
                               delivery_count=UInt(delivery_count) if delivery_count else None))
        if delivery_count < 16 and len(_HEADERS) < 1024:
            _HEADERS[key] = header
    return header


_CACHE_KEY = "amqp"
_DATA = b"\x00\x53\x75"  # a data section: described by the small ulong 0x75, then a binary


def _ttl_left(expiration: int) -> UInt:
    """The header's ttl of a message that expires: the time it has left, as AMQP 1.0 (3.2.1)
    asks of an intermediary (at least 1 ms; the expiry itself is also absolute-expiry-time)."""
    return UInt(min(max(expiration - now_ms(), 1), 0xFFFFFFFF))


def _bare(message: Message) -> tuple[bytes, bool]:
    """The sections after the header, and whether a data section with the body follows them
    (then they stop before it; else they hold the body too)."""
    props = message.properties
    if not props and message.user_id is None:  # the common case, written directly
        plain = _plain_properties(message)
        if plain is not None:
            return plain, True
    app: dict[str, Any] = {}
    annotations: dict[Any, Any] = {}
    subject = props.get(SUBJECT)
    jms_type = None
    if subject is None:  # a JMS client's JMSType is the AMQP subject (as Qpid JMS maps it)
        subject = jms_type = props.get(JMS_TYPE)
    user, user_prop = message.user_id, None
    if user is None:  # a JMS client's JMSXUserID property is the AMQP user-id (as Qpid JMS maps it)
        user = user_prop = props.get(JMS_USER)
    for k, v in props.items():
        if k in RESERVED or (jms_type is not None and k == JMS_TYPE) or (user_prop is not None and k == JMS_USER):
            continue
        if k.startswith(ANNOTATION):
            annotations[Symbol(k[len(ANNOTATION):])] = _wire_value(v)
        elif not k.startswith(INTERNAL_PREFIXES):  # (ours read above, MQTT's its own)
            app[k] = _wire_value(v)
    message_id = props.get(MESSAGE_ID)
    correlation = props.get(TYPED_CORRELATION_ID)
    content_type = props.get(CONTENT_TYPE)
    jms = amqp_body(props) if JMS_KIND in props and BODY not in props else None
    if jms is not None:  # a JMS client's message: its kind noted as Qpid JMS notes it
        if annotations:
            annotations[Symbol(JMS_MSG_TYPE)] = Byte(jms[0])
        if content_type is None:
            content_type = jms[2]
    # the properties section's fields in order (as `Properties` encodes them, without building one)
    fields = [
        _untyped(message_id) if isinstance(message_id, str) else f"ID:{message.id}",
        None if user is None else str(user).encode("utf-8"),
        str(message.address),
        _str(subject),
        _str(props.get(REPLY_TO)),
        _untyped(correlation) if isinstance(correlation, str) else _correlation(props.get(CORRELATION_ID)),
        None if content_type is None else Symbol(str(content_type)),
        None,  # content-encoding
        Timestamp(message.expiration) if message.expiration else None,
        Timestamp(message.timestamp) if message.timestamp else None,
        _str(props.get(GROUP_ID)),
        _uint(props.get(GROUP_SEQ)),
    ]
    while fields[-1] is None:
        fields.pop()
    parts = []
    if annotations:
        parts.append(encode(Described(_MESSAGE_ANNOTATIONS, annotations)))
    elif jms is not None:
        parts.append(_JMS_ANNOTATIONS[jms[0]])
    parts.append(encode(Described(_PROPERTIES, fields)))
    if app:
        parts.append(encode(Described(_APPLICATION_PROPERTIES, app)))
    kind = props.get(BODY)
    if kind is None and (props.get(MQTT_TEXT) == 1 or (jms is not None and jms[0] == 5)):
        kind = "text"  # MQTT 5 said UTF-8 text, or a JMS TextMessage: an AMQP string
    if jms is not None and jms[1] is not None:
        parts.append(jms[1])  # a JMS map, stream or plain message's amqp-value
        return b"".join(parts), False
    if kind == "text":
        parts.append(_string_value(message.body))
    elif kind == "binary":
        parts.append(encode(Described(_AMQP_VALUE, bytes(message.body))))
    elif kind == "amqp":
        parts.append(message.body)
    else:
        return b"".join(parts), True  # the data section goes after (`to_amqp`)
    return b"".join(parts), False


_MESSAGE_ANNOTATIONS, _PROPERTIES = ULong(MessageAnnotations), ULong(Properties.CODE)
_APPLICATION_PROPERTIES, _AMQP_VALUE = ULong(ApplicationProperties), ULong(AmqpValue)
#: The message-annotations section of a JMS client's message with no other annotation, by its kind.
_JMS_ANNOTATIONS = {t: encode(Described(_MESSAGE_ANNOTATIONS, {Symbol(JMS_MSG_TYPE): Byte(t)})) for t in range(6)}


def _string_value(body: bytes) -> bytes:
    """An amqp-value string section of a UTF-8 body, written directly (its bytes are the
    string's; a body that is not UTF-8 has its bad bytes replaced)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        body = body.decode("utf-8", "replace").encode("utf-8")
    n = len(body)
    return b"".join((b"\x00\x53\x77", bytes((0xa1, n)) if n < 256 else b"\xb1" + n.to_bytes(4, "big"), body))


def _plain_properties(message: Message) -> bytes | None:
    """The properties section of a message without properties (message-id ``ID:<id>``, to, and
    its expiry and creation times), as `_bare` encodes it, written at once; None when it does not
    fit the short form (list8, str8), which leaves it to `_bare`."""
    message_id = b"ID:%d" % message.id
    to = message.address.encode("utf-8")
    expiration, timestamp = message.expiration, message.timestamp
    if not (0 <= expiration < 1 << 63 and 0 <= timestamp < 1 << 63):
        return None
    if timestamp:
        times, count = (_NULLS5 + (b"\x83" + _S_Q.pack(expiration) if expiration else b"\x40")
                        + b"\x83" + _S_Q.pack(timestamp)), 10
    elif expiration:
        times, count = _NULLS5 + b"\x83" + _S_Q.pack(expiration), 9
    else:
        times, count = b"", 3
    size = 1 + 2 + len(message_id) + 1 + 2 + len(to) + len(times)  # count, message-id, user-id, to, the rest
    if size > 255 or len(to) > 255:
        return None
    return b"".join((_PROPERTIES_LIST8, bytes((size, count, 0xa1, len(message_id))), message_id,
                     b"\x40\xa1", bytes((len(to),)), to, times))


_PROPERTIES_LIST8 = b"\x00\x53\x73\xc0"
_NULLS5 = b"\x40" * 5  # subject, reply-to, correlation-id, content-type, content-encoding
_S_Q = struct.Struct(">q")


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _correlation(v: Any) -> str | bytes | None:
    """A correlation id from another protocol: bytes stay binary (MQTT's correlation data)."""
    return bytes(v) if isinstance(v, (bytes, bytearray)) else _str(v)


def _uint(v: Any) -> UInt | None:
    if v is None:
        return None
    try:
        n = int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return UInt(n) if 0 <= n < 1 << 32 else None
