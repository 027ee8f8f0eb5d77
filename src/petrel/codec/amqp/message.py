"""AMQP 1.0 messages (part 3.2): the sections a transfer's payload holds, in order.

header, delivery-annotations, message-annotations, properties, application-properties, the
body (one or more data sections, one or more amqp-sequence sections, or one amqp-value), and
the footer. :func:`decode_message` refuses sections out of order, unknown descriptors and a
mix of body kinds with ``amqp:decode-error``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .composite import decode_composite, from_described, from_value
from .errors import DECODE_ERROR, AmqpError
from .performatives import (
    AmqpSequence, AmqpValue, ApplicationProperties, Data, DeliveryAnnotations, Footer, MessageAnnotations,
)
from .types import Described, Symbol, ULong, decode_one, encode

__all__ = ["AmqpMessage", "encode_message", "decode_message", "BODY_DATA", "BODY_VALUE", "BODY_SEQUENCE"]

BODY_DATA, BODY_VALUE, BODY_SEQUENCE = "data", "value", "sequence"

_ORDER = {0x70: 0, 0x71: 1, 0x72: 2, 0x73: 3, 0x74: 4, 0x75: 5, 0x76: 5, 0x77: 5, 0x78: 6}
_FAST_SECTIONS = (b"\x00\x53\x70", b"\x00\x53\x73")
_DATA8, _DATA32 = b"\x00\x53\x75\xa0", b"\x00\x53\x75\xb0"
_BY_SYMBOL = {
    "amqp:header:list": 0x70, "amqp:delivery-annotations:map": 0x71,
    "amqp:message-annotations:map": 0x72, "amqp:properties:list": 0x73,
    "amqp:application-properties:map": 0x74, "amqp:data:binary": 0x75,
    "amqp:amqp-sequence:list": 0x76, "amqp:amqp-value:*": 0x77, "amqp:footer:map": 0x78,
}


@dataclass(slots=True)
class AmqpMessage:
    """A message's sections. ``body_kind`` is ``data`` (``body``: a list of bytes, one per
    section), ``sequence`` (a list of lists), ``value`` (any one value) or None (no body)."""

    header: Any = None  # Header
    delivery_annotations: dict | None = None
    message_annotations: dict | None = None
    properties: Any = None  # Properties
    application_properties: dict | None = None
    body_kind: str | None = None
    body: Any = None
    footer: dict | None = None

    @classmethod
    def with_data(cls, data: bytes, **kw: Any) -> AmqpMessage:
        return cls(body_kind=BODY_DATA, body=[data], **kw)

    @classmethod
    def with_value(cls, value: Any, **kw: Any) -> AmqpMessage:
        return cls(body_kind=BODY_VALUE, body=value, **kw)


def _annotations(m: dict) -> dict:
    return {Symbol(k) if type(k) is str else k: v for k, v in m.items()}


def encode_message(m: AmqpMessage) -> bytes:
    parts = []
    if m.header is not None:
        parts.append(encode(m.header))
    if m.delivery_annotations is not None:
        parts.append(encode(Described(ULong(DeliveryAnnotations), _annotations(m.delivery_annotations))))
    if m.message_annotations is not None:
        parts.append(encode(Described(ULong(MessageAnnotations), _annotations(m.message_annotations))))
    if m.properties is not None:
        parts.append(encode(m.properties))
    if m.application_properties is not None:
        parts.append(encode(Described(ULong(ApplicationProperties), dict(m.application_properties))))
    if m.body_kind == BODY_DATA:
        parts.extend(encode(Described(ULong(Data), bytes(b))) for b in m.body)
    elif m.body_kind == BODY_SEQUENCE:
        parts.extend(encode(Described(ULong(AmqpSequence), list(s))) for s in m.body)
    elif m.body_kind == BODY_VALUE:
        parts.append(encode(Described(ULong(AmqpValue), m.body)))
    if m.footer is not None:
        parts.append(encode(Described(ULong(Footer), _annotations(m.footer))))
    return b"".join(parts)


def _map(code: int, value: Any, keys: type) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, keys) for k in value):
        names = " or ".join(k.__name__ for k in keys) if isinstance(keys, tuple) else keys.__name__
        raise AmqpError(DECODE_ERROR, f"message section 0x{code:02x} must be a map with {names} keys")
    return value


def _data_section(payload: bytes, pos: int, end: int) -> tuple[bytes, int] | None:
    """A data section at `pos` in the common form (a small-ulong descriptor and a binary that
    fits before `end`): its bytes and the position after it; else None."""
    head = payload[pos:pos + 4]
    if head == _DATA8 and pos + 5 <= end:
        start = pos + 5
        stop = start + payload[pos + 4]
    elif head == _DATA32 and pos + 8 <= end:
        start = pos + 8
        stop = start + int.from_bytes(payload[pos + 4:start], "big")
    else:
        return None
    if stop > end:
        return None
    return bytes(payload[start:stop]), stop


def decode_message(payload: bytes) -> AmqpMessage:
    m = AmqpMessage()
    pos, end, last = 0, len(payload), -1
    while pos < end:
        if payload[pos:pos + 3] in _FAST_SECTIONS:  # a header or properties list (the common form)
            fast = decode_composite(payload, pos, end)
            if fast is not None and last < _ORDER[payload[pos + 2]]:
                section, pos = fast
                last = _ORDER[section.CODE]
                if section.CODE == 0x70:
                    m.header = section
                else:
                    m.properties = section
                continue
        elif last <= 5 and (last < 5 or m.body_kind == BODY_DATA):
            data = _data_section(payload, pos, end)
            if data is not None:
                value, pos = data
                last, m.body_kind, m.body = 5, BODY_DATA, (m.body or []) + [value]
                continue
        section, pos = decode_one(payload, pos, end)
        if type(section) is not Described:
            raise AmqpError(DECODE_ERROR, "a message section must be a described value")
        d = section.descriptor
        code = int(d) if type(d) is ULong else _BY_SYMBOL.get(str(d), -1)
        order = _ORDER.get(code)
        if order is None:
            raise AmqpError(DECODE_ERROR, f"unknown message section {d!r}")
        if order < last or (order == last and code not in (0x75, 0x76)):
            raise AmqpError(DECODE_ERROR, f"message section 0x{code:02x} out of order or repeated")
        last = order
        value = section.value
        if code == 0x70:
            m.header = from_described(Described(ULong(0x70), value))
        elif code == 0x73:
            m.properties = from_described(Described(ULong(0x73), value))
        elif code == 0x71:
            m.delivery_annotations = _map(code, value, (str, int))
        elif code == 0x72:
            m.message_annotations = _map(code, value, (str, int))
        elif code == 0x74:
            m.application_properties = _map(code, value, str)
        elif code == 0x78:
            m.footer = _map(code, value, (str, int))
        else:
            kind = {0x75: BODY_DATA, 0x76: BODY_SEQUENCE, 0x77: BODY_VALUE}[code]
            if m.body_kind is not None and (m.body_kind != kind or kind == BODY_VALUE):
                raise AmqpError(DECODE_ERROR, "a message body mixes section kinds or repeats amqp-value")
            if kind == BODY_DATA and not isinstance(value, bytes):
                raise AmqpError(DECODE_ERROR, "a data section must hold binary")
            if kind == BODY_SEQUENCE and not isinstance(value, list):
                raise AmqpError(DECODE_ERROR, "an amqp-sequence section must hold a list")
            m.body_kind = kind
            if kind == BODY_VALUE:
                m.body = from_value(value)
            else:
                m.body = (m.body or []) + [value]
    return m
