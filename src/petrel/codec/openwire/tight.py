"""OpenWire's tight encoding of commands and data structures, compiled once per type.

Negotiated when both WireFormatInfos say TightEncodingEnabled (ActiveMQ's JMS client does by
default). A command is its type byte, a boolean stream, then its fields' data. The boolean
stream holds every field's flags as bits (least significant bit of its first byte first),
preceded by its length in bytes: one byte under 64, else 0xC0 and one byte, else 0x80 and a
2-byte length. Field by field, in `WIRE` order, what goes in the stream and what in the data:

- boolean (b): one bit, no data. byte (y), int (i): 1 and 4 bytes of data, no bit.
- long (q): two bits saying its size: 00 zero (no data), 01 two bytes, 10 four bytes (both
  read unsigned), 11 eight bytes.
- string (s): a presence bit, then (present) an "ASCII only" bit; the data is a 2-byte
  length and the bytes (modified UTF-8, or one byte a character when ASCII only).
- byte array and primitive map (B, P): a presence bit; the data a 4-byte length and the bytes.
- nested structure (o): a presence bit; then, for a message (a "marshal aware" type), a bit
  saying a cached marshalled form follows (never sent by the JMS client: refused here); then
  the nested structure's own bits. The data is its type byte and its fields.
- array of structures (O): a presence bit; the data a 2-byte count, then each nested one.
- throwable (T): a presence bit, then its class name's and message's string bits (stack
  traces are never negotiated here).

Bits and data are written in one pass here (both follow the fields in order) and joined at
the end. Readers take `(data, pos, depth, bits, bit)` and return `(value, pos, bit)`.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from typing import Any, Callable

from .commands import BY_TYPE, DESTINATION_TYPES, MESSAGE_TYPES, DataType, Destination, JavaThrowable, Message, \
    WireFormatInfo
from .errors import OpenWireLocalError, OpenWireProtocolError
from .loose import _args
from .marshal import MAGIC, MAX_DEPTH, decode_map, encode_map, mutf8_decode, mutf8_encode

__all__ = ["decode_tight", "encode_tight", "bool_stream"]

_I = struct.Struct(">i")
_IU = struct.Struct(">I")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_HU = struct.Struct(">H")
_B = struct.Struct(">b")
#: types whose nested form carries the "cached marshalled form" bit (messages, WireFormatInfo)
AWARE = frozenset({*MESSAGE_TYPES, DataType.WIREFORMAT_INFO})
MAX_STRING = 0x7FFE  # the longest string the reference client encodes in tight form


def _fail(why: str) -> None:
    raise OpenWireProtocolError(why)


def _unknown(type_: int) -> Callable:
    def read(data: bytes, p: int, d: int, bits: int, bi: int) -> Any:
        raise OpenWireProtocolError(f"unknown or unsupported data structure type {type_}")
    return read


# -- readers -------------------------------------------------------------------------------

def _present(var: str, body: list[str]) -> list[str]:
    """`var` from a presence bit, then `body` when set."""
    return [
        "if (bits >> bi) & 1:",
        "    bi += 1",
        *("    " + line for line in body),
        "else:",
        "    bi += 1",
        f"    {var} = None",
    ]


def _read_nested(var: str) -> list[str]:
    return [
        "if d >= MAX_DEPTH: _fail('data structures nested too deep')",
        "t = data[p]",
        "if t in AWARE:",
        "    if (bits >> bi) & 1: _fail('a nested structure in its cached marshalled form')",
        "    bi += 1",
        f"{var}, p, bi = READERS[t](data, p + 1, d + 1, bits, bi)",
    ]


def _read_string(var: str) -> list[str]:
    return [
        "n = (data[p] << 8) | data[p + 1]",
        "p += 2",
        "e = p + n",
        "if e > end: _fail('a field runs past the end of its frame')",
        "raw = data[p:e]",
        "p = e",
        "if (bits >> bi) & 1:",  # ASCII only (as the client writes it: one byte a character)
        "    if n > 0x7FFF: _fail(f'a string of length {n - 0x10000}')",
        f"    {var} = raw.decode('latin-1')",
        "else:",
        f"    {var} = raw.decode() if raw.isascii() and 0 not in raw else _mutf8(raw)",
        "bi += 1",
    ]


def _read_blob(var: str) -> list[str]:
    return [
        "n, = _I.unpack_from(data, p)",
        "if n < 0: _fail(f'a byte array of length {n}')",
        "p += 4",
        "e = p + n",
        "if e > end: _fail('a field runs past the end of its frame')",
        f"{var} = data[p:e]",
        "p = e",
    ]


def _reader_lines(kind: str, var: str) -> list[str]:
    if kind == "b":
        return [f"{var} = (bits >> bi) & 1 == 1", "bi += 1"]
    if kind == "y":
        return [f"{var} = data[p]", "p += 1", f"if {var} > 127: {var} -= 256"]
    if kind == "i":
        return [f"{var}, = _I.unpack_from(data, p)", "p += 4"]
    if kind == "q":
        return [
            "if (bits >> bi) & 1:",
            "    if (bits >> (bi + 1)) & 1:",
            f"        {var}, = _Q.unpack_from(data, p)",
            "        p += 8",
            "    else:",
            f"        {var}, = _IU.unpack_from(data, p)",
            "        p += 4",
            "elif (bits >> (bi + 1)) & 1:",
            f"    {var}, = _HU.unpack_from(data, p)",
            "    p += 2",
            "else:",
            f"    {var} = 0",
            "bi += 2",
        ]
    if kind == "s":
        return _present(var, _read_string(var))
    if kind == "B":
        return _present(var, _read_blob(var))
    if kind == "P":
        return _present(var, [*_read_blob(var), f"{var} = decode_map({var}, d)"])
    if kind == "o":
        return _present(var, _read_nested(var))
    if kind == "O":
        return _present(var, [
            "n, = _H.unpack_from(data, p)",
            "if n < 0: _fail(f'an array of {n} structures')",
            "p += 2",
            "items = []",
            "for _ in range(n):",
            *("    " + line for line in _present("v", _read_nested("v"))),
            "    items.append(v)",
            f"{var} = tuple(items)",
        ])
    if kind == "T":
        return _present(var, [*_present("c", _read_string("c")), *_present("m", _read_string("m")),
                              f"{var} = JavaThrowable(c, m)"])
    raise AssertionError(f"unknown field kind {kind!r}")


def _compile_reader(cls: type, kind: int | None = None) -> Callable:
    lines = ["def read(data, p, d, bits, bi):", "    end = len(data)"]
    for i, k in enumerate(cls.WIRE):
        lines += ["    " + line for line in _reader_lines(k, f"f{i}")]
    lines.append("    o = _new(CLS)")
    setters = {}
    for i, (name, arg) in enumerate(zip((f.name for f in fields(cls)), _args(cls, kind))):
        setters[f"S{i}"] = getattr(cls, name).__set__
        lines.append(f"    S{i}(o, {arg})")
    lines.append("    return o, p, bi")
    namespace = {**_NAMESPACE, **setters, "CLS": cls, "_new": object.__new__}
    exec("\n".join(lines), namespace)  # noqa: S102 (source made here from WIRE, never from input)
    return namespace["read"]


def _read_wire_format_info(data: bytes, p: int, d: int, bits: int, bi: int) -> tuple[WireFormatInfo, int, int]:
    if data[p:p + 8] != MAGIC:
        raise OpenWireProtocolError(f"a WireFormatInfo without the magic 'ActiveMQ' ({bytes(data[p:p + 8])!r})")
    version, = _I.unpack_from(data, p + 8)
    p += 12
    props = None
    if (bits >> bi) & 1:
        n, = _I.unpack_from(data, p)
        if n < 0 or p + 4 + n > len(data):
            raise OpenWireProtocolError(f"a byte array of length {n}")
        props = decode_map(data[p + 4:p + 4 + n])
        p += 4 + n
    return WireFormatInfo(version, props), p, bi + 1


# -- writers -------------------------------------------------------------------------------

def _write_string(var: str) -> list[str]:
    return [
        f"if {var} is None:",
        "    bs.append(0)",
        "else:",
        f"    if {var}.isascii() and '\\x00' not in {var}:",
        f"        raw = {var}.encode()",
        "        bs += b'\\x01\\x01'",
        "    else:",
        f"        raw = _mutf8_encode({var})",
        "        bs += b'\\x01\\x00'",
        "    if len(raw) > MAX_STRING: _too_long(len(raw))",
        "    out += _HU.pack(len(raw))",
        "    out += raw",
    ]


def _write_nested(var: str) -> list[str]:
    return [
        f"if {var} is None:",
        "    bs.append(0)",
        "else:",
        f"    if type({var}) in AWARE_CLASSES:",
        "        bs += b'\\x01\\x00'",
        "    else:",
        "        bs.append(1)",
        f"    WRITERS[type({var})]({var}, out, bs)",
    ]


def _writer_lines(kind: str, var: str) -> list[str]:
    if kind == "b":
        return [f"bs.append(1 if {var} else 0)"]
    if kind == "y":
        return [f"out += _B.pack({var})"]
    if kind == "i":
        return [f"out += _I.pack({var})"]
    if kind == "q":
        return [
            f"if {var} == 0:",
            "    bs += b'\\x00\\x00'",
            f"elif ({var} & -0x10000) == 0:",
            "    bs += b'\\x00\\x01'",
            f"    out += _HU.pack({var})",
            f"elif ({var} & -0x100000000) == 0:",
            "    bs += b'\\x01\\x00'",
            f"    out += _IU.pack({var})",
            "else:",
            "    bs += b'\\x01\\x01'",
            f"    out += _Q.pack({var})",
        ]
    if kind == "s":
        return _write_string(var)
    if kind in "BP":
        value = var if kind == "B" else f"encode_map({var})"
        return [f"if {var} is None:", "    bs.append(0)", "else:", f"    raw = {value}", "    bs.append(1)",
                "    out += _I.pack(len(raw))", "    out += raw"]
    if kind == "o":
        return _write_nested(var)
    if kind == "O":
        return [f"if {var} is None:", "    bs.append(0)", "else:", "    bs.append(1)",
                f"    out += _H.pack(len({var}))", f"    for v in {var}:",
                *("        " + line for line in _write_nested("v"))]
    if kind == "T":
        return [f"if {var} is None:", "    bs.append(0)", "else:", "    bs.append(1)",
                *("    " + line for line in _write_string(f"{var}.class_name")),
                *("    " + line for line in _write_string(f"{var}.message"))]
    raise AssertionError(f"unknown field kind {kind!r}")


def _compile_writer(cls: type) -> Callable:
    names = [f.name for f in fields(cls) if f.name != "kind"]
    type_byte = "obj.kind" if cls is Message or cls is Destination else str(int(cls.TYPE))
    lines = ["def write(obj, out, bs):", f"    out.append({type_byte})"]
    for i, (k, name) in enumerate(zip(cls.WIRE, names)):
        lines.append(f"    f{i} = obj.{name}")
        lines += ["    " + line for line in _writer_lines(k, f"f{i}")]
    namespace = {**_NAMESPACE, "WRITERS": WRITERS}
    exec("\n".join(lines), namespace)  # noqa: S102 (source made here from WIRE, never from input)
    return namespace["write"]


def _write_wire_format_info(v: WireFormatInfo, out: bytearray, bs: bytearray) -> None:
    out.append(DataType.WIREFORMAT_INFO)
    out += MAGIC
    out += _I.pack(v.version)
    if v.properties is None:
        bs.append(0)
    else:
        raw = encode_map(v.properties)
        bs.append(1)
        out += _I.pack(len(raw))
        out += raw


def _too_long(n: int) -> None:
    raise OpenWireLocalError(f"a string of {n} bytes ({MAX_STRING} at most in tight encoding)")


_NAMESPACE: dict[str, Any] = {
    "_I": _I, "_IU": _IU, "_Q": _Q, "_H": _H, "_HU": _HU, "_B": _B, "_fail": _fail, "_too_long": _too_long,
    "_mutf8": mutf8_decode, "_mutf8_encode": mutf8_encode, "decode_map": decode_map, "encode_map": encode_map,
    "MAX_DEPTH": MAX_DEPTH, "MAX_STRING": MAX_STRING, "AWARE": AWARE, "AWARE_CLASSES": frozenset({Message, WireFormatInfo}),
    "JavaThrowable": JavaThrowable,
}

#: type byte -> reader, for all 256 (unknown types raise a protocol error)
READERS: list[Callable] = [_unknown(t) for t in range(256)]
#: class -> writer
WRITERS: dict[type, Callable] = {WireFormatInfo: _write_wire_format_info}
_NAMESPACE["READERS"] = READERS

READERS[DataType.WIREFORMAT_INFO] = _read_wire_format_info
for _type, _cls in BY_TYPE.items():
    READERS[_type] = _compile_reader(_cls)
    WRITERS[_cls] = _compile_writer(_cls)
for _type in DESTINATION_TYPES:
    READERS[_type] = _compile_reader(Destination, _type)
for _type in MESSAGE_TYPES:
    READERS[_type] = _compile_reader(Message, _type)
WRITERS[Destination] = _compile_writer(Destination)
WRITERS[Message] = _compile_writer(Message)

_BITS = bytes.maketrans(b"\x00\x01", b"01")


def bool_stream(bs: bytes | bytearray) -> bytes:
    """The boolean stream of these bits (one 0/1 byte each, in order): its length, then the
    bits packed least significant first."""
    n = (len(bs) + 7) // 8
    packed = int(bytes(bs[::-1]).translate(_BITS), 2).to_bytes(n, "little") if bs else b""
    if n < 64:
        return bytes((n,)) + packed
    if n < 256:
        return bytes((0xC0, n)) + packed
    return b"\x80" + _H.pack(n) + packed


def decode_tight(data: bytes) -> Any:
    """One frame's command in tight encoding (after its size prefix)."""
    end = len(data)
    try:
        type_ = data[0]
        if type_ == 0:
            raise OpenWireProtocolError("a null command")
        n, p = data[1], 2
        if n == 0xC0:
            n, p = data[2], 3
        elif n == 0x80:
            n, = _H.unpack_from(data, 2)
            p = 4
            if n < 0:
                raise OpenWireProtocolError(f"a boolean stream of {n} bytes")
        if p + n > end:
            raise OpenWireProtocolError("a boolean stream runs past the end of its frame")
        bits = int.from_bytes(data[p:p + n], "little")
        command, pos, used = READERS[type_](data, p + n, 0, bits, 0)
    except (IndexError, struct.error):
        raise OpenWireProtocolError("a field runs past the end of its frame") from None
    if used > 8 * n:
        raise OpenWireProtocolError(f"a {type(command).__name__} reads {used} bits of a {8 * n}-bit boolean stream")
    if pos != end:
        raise OpenWireProtocolError(f"{end - pos} bytes after a {type(command).__name__} in its frame")
    return command


def encode_tight(command: Any) -> bytes:
    """A command's type byte, boolean stream and fields in tight encoding (no size prefix)."""
    out, bs = bytearray(), bytearray()
    try:
        WRITERS[type(command)](command, out, bs)
    except KeyError as exc:  # (a type with no writer, at any depth)
        raise OpenWireLocalError(f"cannot encode a {getattr(exc.args[0], '__name__', exc.args[0])}") from None
    except (struct.error, TypeError, AttributeError, ValueError) as exc:
        raise OpenWireLocalError(f"cannot encode {type(command).__name__}: {exc}") from None
    return bytes(out[:1]) + bool_stream(bs) + bytes(out[1:])
