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
the end. Readers take `(data, pos, depth, flags, bit)` and return `(value, pos, bit)`.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from .codegen import CACHE_BYTES, CACHE_SIZE, compile_reader, compile_writer, fill_tables, is_identity, local_error, reader_lines, writer_lines, fail
from .commands import MESSAGE_TYPES, DataType, JavaThrowable, Message, WireFormatInfo
from .errors import OpenWireLocalError, OpenWireProtocolError
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


# -- readers -------------------------------------------------------------------------------

def _present(var: str, body: list[str]) -> list[str]:
    """`var` from a presence bit, then `body` when set."""
    return [
        "if flags[bi]:",
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
        "    if flags[bi]: _fail('a nested structure in its cached marshalled form')",
        "    bi += 1",
        f"{var}, p, bi = READERS[t](data, p + 1, d + 1, flags, bi)",
    ]


def _read_string(var: str) -> list[str]:
    return [
        "n = (data[p] << 8) | data[p + 1]",
        "p += 2",
        "e = p + n",
        "if e > end: _fail('a field runs past the end of its frame')",
        "raw = data[p:e]",
        "p = e",
        "if flags[bi]:",  # ASCII only (as the client writes it: one byte a character)
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
        return [f"{var} = flags[bi] == 1", "bi += 1"]
    if kind == "q":
        return [
            "if flags[bi]:",
            "    if flags[bi + 1]:",
            f"        {var}, = _Q.unpack_from(data, p)",
            "        p += 8",
            "    else:",
            f"        {var}, = _IU.unpack_from(data, p)",
            "        p += 4",
            "elif flags[bi + 1]:",
            f"    {var}, = _HU.unpack_from(data, p)",
            "    p += 2",
            "else:",
            f"    {var} = 0",
            "bi += 2",
        ]
    if kind == "T":
        return _present(var, [*_present("c", _read_string("c")), *_present("m", _read_string("m")),
                              f"{var} = JavaThrowable(c, m)"])
    return reader_lines(kind, var, _present, _read_string, _read_blob, _read_nested)


def _compile_reader(cls: type, kind: int | None) -> Callable:
    read = compile_reader(cls, kind, "data, p, d, flags, bi", "p, bi", _reader_lines, _NAMESPACE)
    return _cached_reader(cls.WIRE, read) if is_identity(cls.WIRE) else read


_QSIZE = (0, 4, 2, 8)  # a long's data by its two bits (first bit the low one)


def _cached_reader(wire: str, read: Callable) -> Callable:
    """`read` behind a cache keyed by the structure's bytes and bits (see `loose._cached_reader`):
    a scan finds where they end (a string's length, a long's size bits), and a hit costs the
    scan and a lookup instead of a parse."""
    lines = ["def span(data, p, flags, bi):", "    e, b = p, bi"]
    for k in wire:
        if k == "b":
            lines.append("    b += 1")
        elif k in "yi":
            lines.append(f"    e += {1 if k == 'y' else 4}")
        elif k == "q":
            lines += ["    e += _QSIZE[flags[b] | (flags[b + 1] << 1)]", "    b += 2"]
        else:  # "s"
            lines += ["    if flags[b]:", "        b += 2", "        e += 2 + ((data[e] << 8) | data[e + 1])",
                      "    else:", "        b += 1"]
    lines.append("    return e, b")
    namespace = {"_QSIZE": _QSIZE}
    exec("\n".join(lines), namespace)  # noqa: S102 (source made here from WIRE, never from input)
    span = namespace["span"]
    cache: dict[tuple, Any] = {}

    def cached(data: bytes, p: int, d: int, flags: bytes, bi: int) -> tuple[Any, int, int]:
        e, b = span(data, p, flags, bi)
        key = (data[p:e], flags[bi:b])
        hit = cache.get(key)
        if hit is not None:
            return hit, e, b
        value, q, used = read(data, p, d, flags, bi)
        if q == e and used == b and e - p <= CACHE_BYTES:
            if len(cache) >= CACHE_SIZE:
                cache.clear()
            cache[key] = value
        return value, q, used

    return cached


def _read_wire_format_info(data: bytes, p: int, d: int, flags: bytes, bi: int) -> tuple[WireFormatInfo, int, int]:
    if data[p:p + 8] != MAGIC:
        raise OpenWireProtocolError(f"a WireFormatInfo without the magic 'ActiveMQ' ({bytes(data[p:p + 8])!r})")
    version, = _I.unpack_from(data, p + 8)
    p += 12
    props = None
    if flags[bi]:
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
    return writer_lines(kind, var, "bs", _write_string, _write_nested)


def _compile_writer(cls: type) -> Callable:
    return compile_writer(cls, "out, bs", _writer_lines, _NAMESPACE)


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
    "_I": _I, "_IU": _IU, "_Q": _Q, "_H": _H, "_HU": _HU, "_B": _B, "_fail": fail, "_too_long": _too_long,
    "_mutf8": mutf8_decode, "_mutf8_encode": mutf8_encode, "decode_map": decode_map, "encode_map": encode_map,
    "MAX_DEPTH": MAX_DEPTH, "MAX_STRING": MAX_STRING, "AWARE": AWARE, "AWARE_CLASSES": frozenset({Message, WireFormatInfo}),
    "JavaThrowable": JavaThrowable,
}

#: type byte -> reader, for all 256 (unknown types raise a protocol error)
READERS: list[Callable] = []
#: class -> writer
WRITERS: dict[type, Callable] = {}
_NAMESPACE["READERS"] = READERS
_NAMESPACE["WRITERS"] = WRITERS
fill_tables(READERS, WRITERS, _compile_reader, _compile_writer, _read_wire_format_info, _write_wire_format_info)

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


_UNBITS = bytes.maketrans(b"01", b"\x00\x01")


_FLAGS: dict[bytes, bytes] = {}  # boolean streams seen (a client's commands of one shape repeat theirs)


def _flags(packed: bytes) -> bytes:
    """The bits of a boolean stream one a byte, in order."""
    flags = _FLAGS.get(packed)
    if flags is None:
        flags = format(int.from_bytes(packed, "little"), f"0{8 * len(packed)}b")[::-1].encode().translate(_UNBITS) \
            if packed else b""
        if len(packed) <= 16:  # (short ones only, and not too many)
            if len(_FLAGS) >= CACHE_SIZE:
                _FLAGS.clear()
            _FLAGS[packed] = flags
    return flags


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
        flags = _flags(data[p:p + n])
        command, pos, _ = READERS[type_](data, p + n, 0, flags, 0)
    except (IndexError, struct.error):
        raise OpenWireProtocolError("a field runs past the end of its frame") from None
    if pos != end:
        raise OpenWireProtocolError(f"{end - pos} bytes after a {type(command).__name__} in its frame")
    return command


def encode_tight(command: Any) -> bytes:
    """A command's type byte, boolean stream and fields in tight encoding (no size prefix)."""
    out, bs = bytearray(), bytearray()
    try:
        WRITERS[type(command)](command, out, bs)
    except (KeyError, struct.error, TypeError, AttributeError, ValueError) as exc:
        raise local_error(command, exc) from None
    return bytes(out[:1]) + bool_stream(bs) + bytes(out[1:])
