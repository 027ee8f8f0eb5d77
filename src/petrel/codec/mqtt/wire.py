"""MQTT's data representations (section 1.5): integers, variable byte integers, UTF-8 strings,
binary data, string pairs, and the 5.0 property list.

`Reader` reads one packet's bytes (already known to be whole); running off its end, or any
value the specification forbids, raises `MqttProtocolError` with MALFORMED_PACKET.
"""

from __future__ import annotations

import struct

from .codes import PropertyId, ReasonCode
from .errors import MqttProtocolError

__all__ = ["MAX_VARINT", "Reader", "encode_varint", "encode_str", "encode_bin", "encode_properties",
           "decode_varint_prefix"]

MAX_VARINT = 268_435_455  # four bytes of seven bits

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

# What each property holds: "u8", "u16", "u32", "varint", "str", "bin" or "pair".
PROPERTY_TYPES: dict[int, str] = {
    PropertyId.PAYLOAD_FORMAT_INDICATOR: "u8",
    PropertyId.MESSAGE_EXPIRY_INTERVAL: "u32",
    PropertyId.CONTENT_TYPE: "str",
    PropertyId.RESPONSE_TOPIC: "str",
    PropertyId.CORRELATION_DATA: "bin",
    PropertyId.SUBSCRIPTION_IDENTIFIER: "varint",
    PropertyId.SESSION_EXPIRY_INTERVAL: "u32",
    PropertyId.ASSIGNED_CLIENT_IDENTIFIER: "str",
    PropertyId.SERVER_KEEP_ALIVE: "u16",
    PropertyId.AUTHENTICATION_METHOD: "str",
    PropertyId.AUTHENTICATION_DATA: "bin",
    PropertyId.REQUEST_PROBLEM_INFORMATION: "u8",
    PropertyId.WILL_DELAY_INTERVAL: "u32",
    PropertyId.REQUEST_RESPONSE_INFORMATION: "u8",
    PropertyId.RESPONSE_INFORMATION: "str",
    PropertyId.SERVER_REFERENCE: "str",
    PropertyId.REASON_STRING: "str",
    PropertyId.RECEIVE_MAXIMUM: "u16",
    PropertyId.TOPIC_ALIAS_MAXIMUM: "u16",
    PropertyId.TOPIC_ALIAS: "u16",
    PropertyId.MAXIMUM_QOS: "u8",
    PropertyId.RETAIN_AVAILABLE: "u8",
    PropertyId.USER_PROPERTY: "pair",
    PropertyId.MAXIMUM_PACKET_SIZE: "u32",
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE: "u8",
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE: "u8",
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE: "u8",
}
#: Properties that may appear more than once (their value is a list).
REPEATABLE = frozenset({PropertyId.USER_PROPERTY, PropertyId.SUBSCRIPTION_IDENTIFIER})
# Properties whose value must be 0 or 1.
_BOOLEAN = frozenset({PropertyId.PAYLOAD_FORMAT_INDICATOR, PropertyId.REQUEST_PROBLEM_INFORMATION,
                      PropertyId.REQUEST_RESPONSE_INFORMATION, PropertyId.MAXIMUM_QOS,
                      PropertyId.RETAIN_AVAILABLE, PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE,
                      PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE, PropertyId.SHARED_SUBSCRIPTION_AVAILABLE})


def malformed(what: str) -> MqttProtocolError:
    return MqttProtocolError(f"malformed packet: {what}", ReasonCode.MALFORMED_PACKET)


def decode_varint_prefix(data: bytes | bytearray, start: int) -> tuple[int, int] | None:
    """(value, bytes used) of the variable byte integer at `start`, None when more bytes are
    needed; a fifth continuation byte is malformed."""
    value = 0
    for i in range(4):
        if start + i >= len(data):
            return None
        byte = data[start + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, i + 1
    raise malformed("a variable byte integer longer than four bytes")


def encode_varint(value: int) -> bytes:
    if not 0 <= value <= MAX_VARINT:
        raise ValueError(f"{value} does not fit a variable byte integer")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_str(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0xFFFF:
        raise ValueError("a string longer than 65535 bytes")
    return _U16.pack(len(data)) + data


def encode_bin(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ValueError("binary data longer than 65535 bytes")
    return _U16.pack(len(data)) + bytes(data)


def _encode_value(kind: str, value) -> bytes:
    if kind == "u8":
        return bytes((value,))
    if kind == "u16":
        return _U16.pack(value)
    if kind == "u32":
        return _U32.pack(value)
    if kind == "varint":
        return encode_varint(value)
    if kind == "str":
        return encode_str(value)
    if kind == "bin":
        return encode_bin(value)
    name, text = value
    return encode_str(name) + encode_str(text)


def encode_properties(properties: dict) -> bytes:
    """The property length and the properties (5.0)."""
    out = bytearray()
    for pid, value in properties.items():
        kind = PROPERTY_TYPES[pid]
        for item in value if pid in REPEATABLE else (value,):
            out += encode_varint(pid)
            out += _encode_value(kind, item)
    return encode_varint(len(out)) + bytes(out)


class Reader:
    """Reads one packet's body from the front."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    @property
    def left(self) -> int:
        return self.end - self.pos

    def take(self, n: int) -> bytes:
        if self.pos + n > self.end:
            raise malformed("the packet ends inside a field")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def rest(self) -> bytes:
        out = self.data[self.pos:self.end]
        self.pos = self.end
        return out

    def u8(self) -> int:
        if self.pos >= self.end:
            raise malformed("the packet ends inside a field")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def u16(self) -> int:
        return _U16.unpack(self.take(2))[0]

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def varint(self) -> int:
        got = decode_varint_prefix(self.data[:self.end], self.pos)
        if got is None:
            raise malformed("the packet ends inside a variable byte integer")
        value, used = got
        self.pos += used
        return value

    def bin(self) -> bytes:
        return self.take(self.u16())

    def str(self) -> str:
        raw = self.take(self.u16())
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise malformed("a string that is not well-formed UTF-8") from None
        if "\x00" in text:
            raise malformed("a string holding U+0000")
        return text

    def properties(self) -> dict:
        length = self.varint()
        if length > self.left:
            raise malformed("a property length past the end of the packet")
        stop = self.pos + length
        inner = Reader(self.data, self.pos, stop)
        props: dict = {}
        while inner.left:
            raw_id = inner.varint()
            try:
                pid = PropertyId(raw_id)
            except ValueError:
                raise malformed(f"unknown property identifier {raw_id:#x}") from None
            kind = PROPERTY_TYPES[pid]
            if kind == "pair":
                value = (inner.str(), inner.str())
            else:
                value = getattr(inner, kind)()
            if pid in _BOOLEAN and value not in (0, 1):
                raise MqttProtocolError(f"property {pid.name} must be 0 or 1, not {value}",
                                        ReasonCode.PROTOCOL_ERROR)
            if pid == PropertyId.SUBSCRIPTION_IDENTIFIER and value == 0:
                raise MqttProtocolError("a subscription identifier of 0", ReasonCode.PROTOCOL_ERROR)
            if pid in REPEATABLE:
                props.setdefault(pid, []).append(value)
            elif pid in props:
                raise MqttProtocolError(f"property {pid.name} given twice", ReasonCode.PROTOCOL_ERROR)
            else:
                props[pid] = value
        self.pos = stop
        return props
