"""The bodies of JMS messages across protocols: what an OpenWire message's body becomes in
Petrel, and what a message from another protocol becomes for a JMS consumer.

JMS (OpenWire) in. A compressed body (the client's ``jms.useCompression``) is inflated first:
other protocols see the plain body. Then, by the JMS message kind:

==============  ======================================  ==========================================
JMS kind        Petrel body (STOMP, MQTT, CORE see it)  AMQP 1.0 receivers (as Qpid JMS maps it)
==============  ======================================  ==========================================
TextMessage     the text in UTF-8                       amqp-value string
BytesMessage    the bytes                               one data section
MapMessage      a JSON object (bytes as base64 text)    amqp-value map (Java types as AMQP types)
StreamMessage   a JSON array (bytes as base64 text)     amqp-value list
ObjectMessage   the Java-serialized bytes               data section, content-type
                                                        ``application/x-java-serialized-object``
Message         empty                                   amqp-value null
==============  ======================================  ==========================================

AMQP receivers also get the message annotation ``x-opt-jms-msg-type`` (a byte: 0 message,
1 object, 2 map, 3 bytes, 4 stream, 5 text), as Qpid JMS and Artemis set it. A map or stream
keeps the client's own encoding under `CONTENT` (an internal property), so JMS consumers get
it back exactly, with its Java types.

JMS out, for a message from another protocol (no JMS kind noted): an AMQP amqp-value map is a
MapMessage, a list or an amqp-sequence a StreamMessage, null a plain Message, and an
``x-opt-jms-msg-type`` of 1 (with a data section) an ObjectMessage; a text body (an AMQP
string, an MQTT 5 payload marked UTF-8, a content type that names text: ``text/*``, JSON, XML)
a TextMessage when it is UTF-8; anything else (STOMP, CORE and MQTT bodies) a BytesMessage.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from petrel.codec.amqp import types as amqp
from petrel.codec.amqp.performatives import AmqpSequence, AmqpValue
from petrel.codec.openwire import DataType, marshal, text_content, text_of
from petrel.codec.openwire.marshal import JavaByte, JavaFloat, JavaLong, JavaShort, decode_map, encode_map
from petrel.core.message_props import CONTENT_TYPE

__all__ = ["CONTENT", "KIND", "JMS_MSG_TYPE", "inflate", "to_petrel_body", "to_openwire_body", "amqp_body"]

KIND = "_OW_KIND"  # the JMS message kind (text, bytes...), for OpenWire consumers
CONTENT = "_OW_CONTENT"  # a map's or stream's content as the JMS client encoded it
JMS_MSG_TYPE = "x-opt-jms-msg-type"
AMQP_BODY = "_AMQP_BODY"  # the AMQP adapter's note of a body's kind ("text", "binary", "amqp")
AMQP_JMS_TYPE = "_AMQP_MA_" + JMS_MSG_TYPE  # the annotation as the AMQP adapter keeps it
MQTT_FORMAT = "_MQTT_FORMAT"  # MQTT 5's payload format indicator (1: UTF-8)
SERIALIZED = "application/x-java-serialized-object"

MESSAGE, BYTES, MAP = DataType.ACTIVEMQ_MESSAGE, DataType.ACTIVEMQ_BYTES_MESSAGE, DataType.ACTIVEMQ_MAP_MESSAGE
OBJECT, STREAM, TEXT = DataType.ACTIVEMQ_OBJECT_MESSAGE, DataType.ACTIVEMQ_STREAM_MESSAGE, DataType.ACTIVEMQ_TEXT_MESSAGE
#: x-opt-jms-msg-type by JMS kind (Qpid JMS's values)
AMQP_TYPES = {MESSAGE: 0, OBJECT: 1, MAP: 2, BYTES: 3, STREAM: 4, TEXT: 5}
MAX_INFLATED = 256 * 1024 * 1024  # a compressed body never inflates past this


class BodyError(ValueError):
    """A body that does not decode as its kind says."""


# -- JMS in -------------------------------------------------------------------------------


def inflate(kind: int, content: bytes) -> bytes:
    """A compressed body as the client wrote it before compressing: a bytes message's is its
    length (4 bytes) then a zlib stream of at least that many bytes, the other kinds' a zlib
    stream of their whole content."""
    if kind == BYTES and len(content) >= 4:
        length = int.from_bytes(content[:4], "big")
        try:
            out = _inflate(content[4:])
        except zlib.error:
            pass  # (not length-prefixed after all: the whole content)
        else:
            if length > len(out):
                raise BodyError(f"a compressed body of {len(out)} bytes that says {length}")
            return out[:length]  # (the client compresses its whole buffer: what follows is padding)
    try:
        return _inflate(content)
    except zlib.error as exc:
        raise BodyError(f"a compressed body that does not inflate: {exc}") from None


def _inflate(data: bytes) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, MAX_INFLATED)
    if d.unconsumed_tail:
        raise BodyError(f"a compressed body inflates past {MAX_INFLATED} bytes")
    if not d.eof:
        raise zlib.error("incomplete zlib stream")
    return out


def to_petrel_body(kind: int, content: bytes | None, props: dict[str, Any]) -> bytes:
    """The Petrel body of a JMS message's (inflated) content; notes what it needs in `props`."""
    if content is None:
        return b""
    if kind == TEXT:
        try:
            text = text_of(content)
        except Exception as exc:  # noqa: BLE001 - the codec's protocol error, said as ours
            raise BodyError(f"a text message body that does not decode: {exc}") from None
        return b"" if text is None else text.encode("utf-8", "surrogatepass")
    if kind == MAP:
        try:
            value: Any = decode_map(content)
        except Exception as exc:  # noqa: BLE001 - the codec's protocol error, said as ours
            raise BodyError(f"a map message body that does not decode: {exc}") from None
    elif kind == STREAM:
        value = _decode_stream(content)
    else:
        return content
    props[CONTENT] = content
    return json.dumps(value, default=_json_default, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _decode_stream(content: bytes) -> list:
    r = marshal.Reader(content)
    out = []
    try:
        while r.pos < r.end:
            out.append(marshal._read_value(r, 0))  # (a stream is typed values one after another)
    except Exception as exc:  # noqa: BLE001 - the codec's protocol error, said as ours
        raise BodyError(f"a stream message body that does not decode: {exc}") from None
    return out


def _encode_stream(values: list) -> bytes:
    w = marshal.Writer()
    for v in values:
        w.value(v)
    return bytes(w.out)


def _json_default(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode("ascii")
    return str(v)


# -- JMS out ------------------------------------------------------------------------------

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")


def _says_text(props: dict) -> bool:
    if props.get(AMQP_BODY) == "text" or props.get(MQTT_FORMAT) == 1:
        return True
    ctype = props.get(CONTENT_TYPE)
    if not isinstance(ctype, str):
        return False
    ctype = ctype.strip().lower()
    base = ctype.split(";", 1)[0].strip()
    return ctype.startswith(_TEXT_TYPES) or base.endswith(("+json", "+xml"))


def to_openwire_body(props: dict, body: bytes) -> tuple[int, bytes | None]:
    """(JMS kind, OpenWire content) for a Petrel message's body."""
    kind = props.get(KIND)
    if kind is not None:
        kind = int(kind)
        if kind in (MAP, STREAM):
            content = props.get(CONTENT)
            return kind, content if isinstance(content, bytes) else None
        if kind == TEXT:
            try:
                return TEXT, text_content(body.decode("utf-8", "surrogatepass"))
            except UnicodeDecodeError:  # not text after all: the bytes as they are
                return BYTES, body
        if kind == MESSAGE and not body:
            return MESSAGE, None
        return kind, body
    if props.get(AMQP_BODY) == "amqp":
        return _from_amqp_sections(body)
    jms_type = props.get(AMQP_JMS_TYPE)
    if jms_type == AMQP_TYPES[OBJECT] or (jms_type is None and props.get(CONTENT_TYPE) == SERIALIZED):
        return OBJECT, body
    if jms_type == AMQP_TYPES[MESSAGE] and not body:
        return MESSAGE, None
    if _says_text(props):
        try:
            return TEXT, text_content(body.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return BYTES, body


def _from_amqp_sections(body: bytes) -> tuple[int, bytes | None]:
    """An AMQP body other than data sections and a string or binary value (kept encoded)."""
    try:
        values, pos = [], 0
        while pos < len(body):
            section, pos = amqp.decode_one(body, pos)
            values.append(section)
        sections = [s for s in values if isinstance(s, amqp.Described)]
        codes = {int(s.descriptor) for s in sections}
        if codes == {AmqpValue} and len(sections) == 1:
            value = sections[0].value
            if value is None:
                return MESSAGE, None
            if isinstance(value, dict):
                return MAP, encode_map({str(k): _java(v) for k, v in value.items()})
            if isinstance(value, list):
                return STREAM, _encode_stream([_java(v) for v in value])
        elif codes == {AmqpSequence}:
            return STREAM, _encode_stream([_java(v) for s in sections for v in s.value])
    except Exception:  # noqa: BLE001 - what does not map goes as the bytes it is
        pass
    return BYTES, body


def _java(v: Any) -> Any:
    """An AMQP value as the Java value a JMS map or stream holds."""
    t = type(v)
    if v is None or t in (bool, str, bytes, float):
        return v
    if t is amqp.Byte:
        return JavaByte(v)
    if t is amqp.Short or t is amqp.UByte:
        return JavaShort(v)
    if t is amqp.Int or t is amqp.UShort:
        return int(v)
    if t is amqp.Float:
        return JavaFloat(v)
    if isinstance(v, int):  # long, uint, ulong, timestamp
        return JavaLong(v) if -(1 << 63) <= v < 1 << 63 else str(v)
    if isinstance(v, dict):
        return {str(k): _java(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_java(x) for x in v]
    return str(v)  # char, symbol, uuid, decimals


def _amqp(v: Any) -> Any:
    """A Java value (of a JMS map or stream) as the AMQP value of the same type."""
    t = type(v)
    if t is JavaByte:
        return amqp.Byte(v)
    if t is JavaShort:
        return amqp.Short(v)
    if t is JavaLong:
        return int(v)
    if t is JavaFloat:
        return amqp.Float(v)
    if t is int:
        return amqp.Int(v)
    if isinstance(v, dict):
        return {str(k): _amqp(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_amqp(x) for x in v]
    return v


# -- AMQP out -----------------------------------------------------------------------------


def amqp_body(props: dict) -> tuple[int, bytes | None, str | None] | None:
    """For a message a JMS client sent (None for others): its x-opt-jms-msg-type, the encoded
    amqp-value section that is its body (None: its bytes go as a data section), and the content
    type it says (an ObjectMessage's)."""
    kind = props.get(KIND)
    if kind is None:
        return None
    kind = int(kind)
    jms_type = AMQP_TYPES.get(kind, 3)
    if kind in (MAP, STREAM):
        content = props.get(CONTENT)
        if isinstance(content, bytes):
            try:
                value = decode_map(content) if kind == MAP else _decode_stream(content)
                return jms_type, amqp.encode(amqp.Described(amqp.ULong(AmqpValue), _amqp(value))), None
            except Exception:  # noqa: BLE001 - then as the bytes it is
                pass
        return 3, None, None
    if kind == MESSAGE:
        return jms_type, amqp.encode(amqp.Described(amqp.ULong(AmqpValue), None)), None
    if kind == OBJECT:
        return jms_type, None, SERIALIZED
    return jms_type, None, None
