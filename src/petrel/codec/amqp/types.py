"""The AMQP 1.0 type system (part 1 of the specification): encode and decode every primitive
type, described types, lists, maps and arrays.

Python values stand for AMQP types: ``None`` null, ``bool`` boolean, ``int`` long, ``float``
double, ``str`` string, ``bytes`` binary, ``uuid.UUID`` uuid, ``list`` list, ``dict`` map.
The other types have a marker class (``UInt(5)``, ``Symbol("amqp:accepted:list")``...), a
subclass of the plain value, so they compare equal to it and keep their type through a round
trip. Decoding returns the marker classes, so ``decode(encode(v)) == v`` and re-encoding gives
the same type codes back (the compact forms may differ: ``uint0`` is read back as ``UInt``).

Malformed bytes raise :class:`AmqpDecodeError` (condition ``amqp:decode-error``).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from .errors import DECODE_ERROR, AmqpError

__all__ = [
    "UByte", "UShort", "UInt", "ULong", "Byte", "Short", "Int", "Long", "Float", "Char",
    "Timestamp", "Symbol", "Decimal32", "Decimal64", "Decimal128", "Described", "Array",
    "AmqpDecodeError", "encode", "decode", "decode_one", "MAX_DEPTH",
]

#: Compound values nested deeper than this are refused (a bound on recursion).
MAX_DEPTH = 64


class AmqpDecodeError(AmqpError):
    def __init__(self, message: str) -> None:
        super().__init__(DECODE_ERROR, message)


class UByte(int):
    __slots__ = ()


class UShort(int):
    __slots__ = ()


class UInt(int):
    __slots__ = ()


class ULong(int):
    __slots__ = ()


class Byte(int):
    __slots__ = ()


class Short(int):
    __slots__ = ()


class Int(int):
    __slots__ = ()


class Long(int):
    __slots__ = ()


class Timestamp(int):
    """Milliseconds since the Unix epoch."""

    __slots__ = ()


class Float(float):
    """A 32-bit float (plain ``float`` is a double)."""

    __slots__ = ()


class Char(str):
    """One Unicode code point."""

    __slots__ = ()


class Symbol(str):
    """An ASCII symbolic value (``amqp:accepted:list``, ``PLAIN``, ``queue``)."""

    __slots__ = ()


class Decimal32(bytes):
    __slots__ = ()


class Decimal64(bytes):
    __slots__ = ()


class Decimal128(bytes):
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Described:
    """A described value: a descriptor (a ``ULong`` code or a ``Symbol``) and the value."""

    descriptor: object
    value: object


@dataclass(frozen=True, slots=True)
class Array:
    """An AMQP array: every element has the type of format ``code`` (``0xa3`` symbols...);
    ``descriptor`` is set for an array of described values."""

    code: int
    items: tuple
    descriptor: object = None

    @classmethod
    def of(cls, kind: type, items) -> Array:
        """An array of ``kind`` (``Symbol``, ``str``, ``UInt``...), choosing the format code."""
        items = tuple(items)
        code = _ARRAY_CODES[kind]  # strings, symbols, binary: widened when encoded if need be
        return cls(code, tuple(kind(x) if kind not in (str, bytes) else x for x in items))


_ARRAY_CODES = {
    Symbol: 0xa3, str: 0xa1, bytes: 0xa0, bool: 0x56, UByte: 0x50, UShort: 0x60, UInt: 0x70,
    ULong: 0x80, Byte: 0x51, Short: 0x61, Int: 0x71, Long: 0x81, int: 0x81, Float: 0x72,
    float: 0x82, Char: 0x73, Timestamp: 0x83, uuid.UUID: 0x98,
}

_S_B = struct.Struct(">B")
_S_b = struct.Struct(">b")
_S_H = struct.Struct(">H")
_S_h = struct.Struct(">h")
_S_I = struct.Struct(">I")
_S_i = struct.Struct(">i")
_S_Q = struct.Struct(">Q")
_S_q = struct.Struct(">q")
_S_f = struct.Struct(">f")
_S_d = struct.Struct(">d")
_S_BB = struct.Struct(">BB")
_S_II = struct.Struct(">II")

# ---------------------------------------------------------------------------------------------
# encoding


def encode(value: object) -> bytes:
    """The bytes of one value, constructor included."""
    out = bytearray()
    _encode(value, out)
    return bytes(out)


def _check(cond: bool, what: str, value: object) -> None:
    if not cond:
        raise ValueError(f"{value!r} does not fit in an AMQP {what}")


def _encode(v: object, out: bytearray) -> None:  # noqa: C901 - one dispatch on the type
    t = type(v)
    if v is None:
        out.append(0x40)
    elif t is Described:  # (composites and message sections: first, as the commonest compound)
        out.append(0x00)
        _encode(v.descriptor, out)  # type: ignore[union-attr]
        _encode(v.value, out)  # type: ignore[union-attr]
    elif t is bool:
        out.append(0x41 if v else 0x42)
    elif t is str:
        b = v.encode("utf-8")  # type: ignore[union-attr]
        _variable(0xa1, 0xb1, b, out)
    elif t is Symbol:
        try:
            b = v.encode("ascii")  # type: ignore[union-attr]
        except UnicodeEncodeError:
            raise ValueError(f"symbol {v!r} is not ASCII") from None
        _variable(0xa3, 0xb3, b, out)
    elif t is bytes or t is bytearray or t is memoryview:
        _variable(0xa0, 0xb0, bytes(v), out)  # type: ignore[arg-type]
    elif t is UInt:
        _check(0 <= v < 1 << 32, "uint", v)  # type: ignore[operator]
        if v == 0:
            out.append(0x43)
        elif v < 256:  # type: ignore[operator]
            out += _S_BB.pack(0x52, v)
        else:
            out.append(0x70)
            out += _S_I.pack(v)
    elif t is ULong:
        _check(0 <= v < 1 << 64, "ulong", v)  # type: ignore[operator]
        if v == 0:
            out.append(0x44)
        elif v < 256:  # type: ignore[operator]
            out += _S_BB.pack(0x53, v)
        else:
            out.append(0x80)
            out += _S_Q.pack(v)
    elif t is int or t is Long:
        _check(-(1 << 63) <= v < 1 << 63, "long", v)  # type: ignore[operator]
        if -128 <= v <= 127:  # type: ignore[operator]
            out.append(0x55)
            out += _S_b.pack(v)
        else:
            out.append(0x81)
            out += _S_q.pack(v)
    elif t is Int:
        _check(-(1 << 31) <= v < 1 << 31, "int", v)  # type: ignore[operator]
        if -128 <= v <= 127:  # type: ignore[operator]
            out.append(0x54)
            out += _S_b.pack(v)
        else:
            out.append(0x71)
            out += _S_i.pack(v)
    elif t is Timestamp:  # (before the other fixed-width types: every message's creation time)
        _check(-(1 << 63) <= v < 1 << 63, "long", v)  # type: ignore[operator]
        out.append(0x83)
        out += _S_q.pack(v)
    elif t is float:
        out.append(0x82)
        out += _S_d.pack(v)
    elif t is list or t is tuple:
        _encode_list(v, out)  # type: ignore[arg-type]
    elif t is dict:
        _encode_map(v, out)  # type: ignore[arg-type]
    elif t is Array:
        _encode_array(v, out)  # type: ignore[arg-type]
    elif t in _FIXED:
        code = _FIXED[t]
        out.append(code)
        out += _fixed_body(code, v)
    elif hasattr(v, "to_described"):
        _encode(v.to_described(), out)  # type: ignore[union-attr]
    elif isinstance(v, bool):
        out.append(0x41 if v else 0x42)
    elif isinstance(v, int):
        _encode(int(v), out)
    elif isinstance(v, str):
        _encode(str(v), out)
    else:
        raise ValueError(f"no AMQP type for {type(v).__name__}")


_FIXED = {
    UByte: 0x50, UShort: 0x60, Byte: 0x51, Short: 0x61, Float: 0x72, Char: 0x73,
    Timestamp: 0x83, uuid.UUID: 0x98, Decimal32: 0x74, Decimal64: 0x84, Decimal128: 0x94,
}


def _fixed_body(code: int, v) -> bytes:  # noqa: C901 - one table of the fixed-width codes
    if code == 0x50:
        _check(0 <= v < 256, "ubyte", v)
        return _S_B.pack(v)
    if code == 0x60:
        _check(0 <= v < 1 << 16, "ushort", v)
        return _S_H.pack(v)
    if code == 0x70:
        _check(0 <= v < 1 << 32, "uint", v)
        return _S_I.pack(v)
    if code == 0x80:
        _check(0 <= v < 1 << 64, "ulong", v)
        return _S_Q.pack(v)
    if code == 0x51:
        _check(-128 <= v < 128, "byte", v)
        return _S_b.pack(v)
    if code == 0x61:
        _check(-(1 << 15) <= v < 1 << 15, "short", v)
        return _S_h.pack(v)
    if code == 0x71:
        _check(-(1 << 31) <= v < 1 << 31, "int", v)
        return _S_i.pack(v)
    if code in (0x81, 0x83):
        _check(-(1 << 63) <= v < 1 << 63, "long", v)
        return _S_q.pack(v)
    if code == 0x72:
        return _S_f.pack(v)
    if code == 0x82:
        return _S_d.pack(v)
    if code == 0x73:
        _check(len(v) == 1, "char", v)
        return _S_I.pack(ord(v))
    if code == 0x98:
        return v.bytes
    if code == 0x56:
        return b"\x01" if v else b"\x00"
    size = {0x74: 4, 0x84: 8, 0x94: 16}[code]
    _check(len(v) == size, "decimal", v)
    return bytes(v)


def _variable(short: int, wide: int, b: bytes, out: bytearray) -> None:
    n = len(b)
    if n < 256:
        out += _S_BB.pack(short, n)
    else:
        _check(n < 1 << 32, "variable-width value", n)
        out.append(wide)
        out += _S_I.pack(n)
    out += b


def _compound(short: int, wide: int, count: int, body: bytes, out: bytearray) -> None:
    if len(body) + 1 < 256 and count < 256:
        out += _S_BB.pack(short, len(body) + 1)
        out.append(count)
    else:
        out.append(wide)
        out += _S_II.pack(len(body) + 4, count)
    out += body


def _encode_list(items: list, out: bytearray) -> None:
    if not items:
        out.append(0x45)
        return
    body = bytearray()
    for item in items:
        if item is None:  # (most fields of a composite: no call for them)
            body.append(0x40)
        else:
            _encode(item, body)
    _compound(0xc0, 0xd0, len(items), bytes(body), out)


def _encode_map(m: dict, out: bytearray) -> None:
    body = bytearray()
    for k, v in m.items():
        _encode(k, body)
        _encode(v, body)
    _compound(0xc1, 0xd1, 2 * len(m), bytes(body), out)


def _element_body(code: int, v) -> bytes:
    if code in (0xa1, 0xa3, 0xa0, 0xb1, 0xb3, 0xb0):
        b = v.encode("utf-8") if code in (0xa1, 0xb1) else v.encode("ascii") if code in (0xa3, 0xb3) else bytes(v)
        if code < 0xb0:
            _check(len(b) < 256, "8-bit-size array element", v)
            return _S_B.pack(len(b)) + b
        return _S_I.pack(len(b)) + b
    if code in (0xd0, 0xd1):
        out = bytearray()
        (_encode_list if code == 0xd0 else _encode_map)(v, out)
        if out[0] == 0x45:
            return _S_II.pack(4, 0)
        if out[0] in (0xc0, 0xc1):  # re-frame in the 32-bit form every element shares
            size, count = out[1], out[2]
            return _S_II.pack(size + 3, count) + bytes(out[3:])
        return bytes(out[1:])
    if code == 0x40:
        return b""
    return _fixed_body(code, v)


_WIDE = {0xa0: 0xb0, 0xa1: 0xb1, 0xa3: 0xb3}
_NARROW = {wide: short for short, wide in _WIDE.items()}


def _encode_array(a: Array, out: bytearray) -> None:
    code = a.code
    if code in _WIDE and any(len(x.encode() if isinstance(x, str) else x) > 255 for x in a.items):
        a = Array(_WIDE[code], a.items, a.descriptor)
    constructor = bytearray()
    if a.descriptor is not None:
        constructor.append(0x00)
        _encode(a.descriptor, constructor)
    constructor.append(a.code)
    body = bytes(constructor) + b"".join(_element_body(a.code, x) for x in a.items)
    _compound(0xe0, 0xf0, len(a.items), body, out)


# ---------------------------------------------------------------------------------------------
# decoding

_FIXED_SIZES = {
    0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0,
    0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1,
    0x60: 2, 0x61: 2,
    0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4,
    0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8,
    0x94: 16, 0x98: 16,
}


def decode(data: bytes) -> object:
    """The one value ``data`` holds; trailing bytes are an error."""
    value, pos = decode_one(data, 0)
    if pos != len(data):
        raise AmqpDecodeError(f"{len(data) - pos} bytes after the value")
    return value


def decode_one(data: bytes, pos: int, end: int | None = None) -> tuple[object, int]:
    """The value at ``pos`` and the position after it (reading no further than ``end``)."""
    return _read(data, pos, len(data) if end is None else end, 0)


def read_value(data: bytes, pos: int, end: int, depth: int) -> tuple[object, int]:
    """`decode_one` for a value nested `depth` deep (its limit counts from there)."""
    return _read(data, pos, end, depth)


def _need(pos: int, n: int, end: int) -> None:
    if pos + n > end:
        raise AmqpDecodeError("value runs past the end of its frame or container")


def _read(data: bytes, pos: int, end: int, depth: int) -> tuple[object, int]:
    _need(pos, 1, end)
    code = data[pos]
    pos += 1
    if code == 0x00:
        if depth >= MAX_DEPTH:
            raise AmqpDecodeError("values nested too deeply")
        descriptor, pos = _read(data, pos, end, depth + 1)
        if type(descriptor) not in (ULong, Symbol):
            raise AmqpDecodeError(f"a descriptor must be a ulong or a symbol, not {type(descriptor).__name__}")
        value, pos = _read(data, pos, end, depth + 1)
        return Described(descriptor, value), pos
    return _body(code, data, pos, end, depth)


def _body(code: int, data: bytes, pos: int, end: int, depth: int) -> tuple[object, int]:  # noqa: C901
    size = _FIXED_SIZES.get(code)
    if size is not None:
        _need(pos, size, end)
        return _fixed(code, data, pos), pos + size
    if code in (0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3):
        if code < 0xb0:
            _need(pos, 1, end)
            n = data[pos]
            pos += 1
        else:
            _need(pos, 4, end)
            n = _S_I.unpack_from(data, pos)[0]
            pos += 4
        _need(pos, n, end)
        raw = bytes(data[pos:pos + n])
        pos += n
        if code in (0xa0, 0xb0):
            return raw, pos
        try:
            return (raw.decode("utf-8") if code in (0xa1, 0xb1) else Symbol(raw.decode("ascii"))), pos
        except UnicodeDecodeError:
            raise AmqpDecodeError("a string or symbol that is not valid UTF-8/ASCII") from None
    if code in (0xc0, 0xc1, 0xd0, 0xd1, 0xe0, 0xf0):
        if depth >= MAX_DEPTH:
            raise AmqpDecodeError("values nested too deeply")
        if code in (0xc0, 0xc1, 0xe0):
            _need(pos, 2, end)
            size, count = data[pos], data[pos + 1]
            start, pos = pos + 1, pos + 2
        else:
            _need(pos, 8, end)
            size, count = _S_II.unpack_from(data, pos)
            start, pos = pos + 4, pos + 8
        stop = start + size
        if stop > end or stop < pos:
            raise AmqpDecodeError("a compound value's size runs past its container")
        if code in (0xe0, 0xf0):
            value = _read_array(data, pos, stop, count, depth + 1)
        else:
            items = []
            for _ in range(count):
                if pos >= stop:
                    raise AmqpDecodeError("a compound value holds fewer elements than its count")
                item, pos = _read(data, pos, stop, depth + 1)
                items.append(item)
            if pos != stop:
                raise AmqpDecodeError("a compound value's elements do not fill its size")
            value = items if code in (0xc0, 0xd0) else _to_map(items)
        return value, stop
    raise AmqpDecodeError(f"unknown format code 0x{code:02x}")


def _to_map(items: list) -> dict:
    if len(items) % 2:
        raise AmqpDecodeError("a map with an odd number of elements")
    try:
        return {items[i]: items[i + 1] for i in range(0, len(items), 2)}
    except TypeError:
        raise AmqpDecodeError("a map key that cannot be a key (a list or a map)") from None


def _fixed(code: int, data: bytes, pos: int) -> object:  # noqa: C901 - one table
    if code == 0x40:
        return None
    if code == 0x41:
        return True
    if code == 0x42:
        return False
    if code == 0x43:
        return UInt(0)
    if code == 0x44:
        return ULong(0)
    if code == 0x45:
        return []
    if code == 0x56:
        b = data[pos]
        if b > 1:
            raise AmqpDecodeError(f"boolean byte 0x{b:02x}")
        return b == 1
    if code == 0x50:
        return UByte(data[pos])
    if code == 0x52:
        return UInt(data[pos])
    if code == 0x53:
        return ULong(data[pos])
    if code == 0x51:
        return Byte(_S_b.unpack_from(data, pos)[0])
    if code == 0x54:
        return Int(_S_b.unpack_from(data, pos)[0])
    if code == 0x55:
        return _S_b.unpack_from(data, pos)[0]
    if code == 0x60:
        return UShort(_S_H.unpack_from(data, pos)[0])
    if code == 0x61:
        return Short(_S_h.unpack_from(data, pos)[0])
    if code == 0x70:
        return UInt(_S_I.unpack_from(data, pos)[0])
    if code == 0x71:
        return Int(_S_i.unpack_from(data, pos)[0])
    if code == 0x72:
        return Float(_S_f.unpack_from(data, pos)[0])
    if code == 0x73:
        point = _S_I.unpack_from(data, pos)[0]
        if point > 0x10FFFF or 0xD800 <= point <= 0xDFFF:
            raise AmqpDecodeError(f"char U+{point:X} is not a Unicode scalar value")
        return Char(chr(point))
    if code == 0x74:
        return Decimal32(data[pos:pos + 4])
    if code == 0x80:
        return ULong(_S_Q.unpack_from(data, pos)[0])
    if code == 0x81:
        return _S_q.unpack_from(data, pos)[0]
    if code == 0x82:
        return _S_d.unpack_from(data, pos)[0]
    if code == 0x83:
        return Timestamp(_S_q.unpack_from(data, pos)[0])
    if code == 0x84:
        return Decimal64(data[pos:pos + 8])
    if code == 0x94:
        return Decimal128(data[pos:pos + 16])
    return uuid.UUID(bytes=bytes(data[pos:pos + 16]))  # 0x98


def _read_array(data: bytes, pos: int, stop: int, count: int, depth: int) -> Array:
    descriptor = None
    _need(pos, 1, stop)
    code = data[pos]
    pos += 1
    if code == 0x00:
        descriptor, pos = _read(data, pos, stop, depth + 1)
        _need(pos, 1, stop)
        code = data[pos]
        pos += 1
    if code in (0x00, 0xe0, 0xf0) or (code not in _FIXED_SIZES and code not in (
            0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3, 0xc0, 0xc1, 0xd0, 0xd1)):
        raise AmqpDecodeError(f"array element format code 0x{code:02x}")
    if code in _FIXED_SIZES and _FIXED_SIZES[code] == 0 and count > stop - pos + 1 << 16:
        raise AmqpDecodeError("an array of empty elements with an implausible count")
    items = []
    for _ in range(count):
        item, pos = _body(code, data, pos, stop, depth)
        items.append(item)
    if pos != stop:
        raise AmqpDecodeError("an array's elements do not fill its size")
    if code in _NARROW:  # the width is chosen again when encoding
        code = _NARROW[code]
    return Array(code, tuple(items), descriptor)
