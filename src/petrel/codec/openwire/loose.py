"""OpenWire's loose encoding of commands and data structures, compiled once per type.

Each data structure type gets a reader and a writer made at import from its class's `WIRE`
(one letter a field, see `commands`): straight-line Python with every field inline (no call
per field), so a 1 KiB message decodes in a few microseconds. The encoding itself is
described in `marshal`. Readers take `(data, pos, depth)` and return `(value, pos)`; reading
past the end of the frame surfaces as an `IndexError` or `struct.error`, which
`decode_command` reports as a protocol error. Writers take `(value, out)` and append to the
bytearray `out`, the type byte first.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from .codegen import CACHE_BYTES, CACHE_SIZE, FIXED, compile_reader, compile_writer, fill_tables, is_identity, local_error, reader_lines, writer_lines, fail
from .commands import DataType, JavaThrowable, WireFormatInfo
from .errors import OpenWireLocalError, OpenWireProtocolError
from .marshal import MAGIC, MAX_DEPTH, Reader, decode_map, encode_map, mutf8_decode, mutf8_encode

__all__ = ["decode_command", "encode_command", "READERS", "WRITERS"]

_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_HU = struct.Struct(">H")
_B = struct.Struct(">b")


def _bad_bool(value: int) -> None:
    raise OpenWireProtocolError(f"a boolean of value {value}")


def _past() -> None:
    raise OpenWireProtocolError("a field runs past the end of its frame")


def _bad_length(what: str, n: int) -> None:
    raise OpenWireProtocolError(f"{what} of length {n}")


def _too_deep() -> None:
    raise OpenWireProtocolError("data structures nested too deep")


def _too_long(n: int) -> None:
    raise OpenWireLocalError(f"a string of {n} bytes (65535 at most)")


# -- readers -------------------------------------------------------------------------------

def _read_presence(var: str, body: list[str]) -> list[str]:
    """`var` from a presence boolean at `p`, then `body` (which reads from `p` on) when set."""
    return [
        "t = data[p]",
        "if t == 1:",
        "    p += 1",
        *("    " + line for line in body),
        "elif t == 0:",
        f"    {var} = None",
        "    p += 1",
        "else:",
        "    _bad_bool(t)",
    ]


def _read_string(var: str) -> list[str]:
    return [
        "n = (data[p] << 8) | data[p + 1]",
        "p += 2",
        "e = p + n",
        "if e > end: _past()",
        "raw = data[p:e]",
        "p = e",
        f"{var} = raw.decode() if raw.isascii() and 0 not in raw else _mutf8(raw)",
    ]


def _read_blob(var: str) -> list[str]:
    return [
        "n, = _I.unpack_from(data, p)",
        "if n < 0: _bad_length('a byte array', n)",
        "p += 4",
        "e = p + n",
        "if e > end: _past()",
        f"{var} = data[p:e]",
        "p = e",
    ]


def _read_nested(var: str) -> list[str]:
    return [
        "if d >= MAX_DEPTH: _too_deep()",
        f"{var}, p = READERS[data[p]](data, p + 1, d + 1)",
    ]


def _reader_lines(kind: str, var: str) -> list[str]:
    if kind == "b":
        return [f"{var} = data[p]", "p += 1", f"if {var} > 1: _bad_bool({var})", f"{var} = {var} == 1"]
    if kind == "T":
        return [f"if data[p] == 0:", f"    {var} = None", "    p += 1", "else:", f"    {var}, p = _throwable(data, p)"]
    if kind == "q":
        return [f"{var}, = _Q.unpack_from(data, p)", "p += 8"]
    return reader_lines(kind, var, _read_presence, _read_string, _read_blob, _read_nested)


def _throwable(data: bytes, p: int) -> tuple[JavaThrowable | None, int]:
    r = Reader(data, p)
    if not r.boolean():
        return None, r.pos
    return JavaThrowable(r.string(), r.string()), r.pos


def _wire_format_info(data: bytes, p: int, d: int) -> tuple[WireFormatInfo, int]:
    r = Reader(data, p)
    magic = r.take(8)
    if magic != MAGIC:
        raise OpenWireProtocolError(f"a WireFormatInfo without the magic 'ActiveMQ' ({magic!r})")
    version = r.int()
    props = r.blob()
    return WireFormatInfo(version, None if props is None else decode_map(props)), r.pos


_NAMESPACE: dict[str, Any] = {
    "_fail": fail,
    "_I": _I, "_Q": _Q, "_H": _H, "_HU": _HU, "_B": _B, "_bad_bool": _bad_bool, "_past": _past,
    "_bad_length": _bad_length, "_too_deep": _too_deep, "_too_long": _too_long, "_throwable": _throwable,
    "_mutf8": mutf8_decode, "_mutf8_encode": mutf8_encode, "decode_map": decode_map, "encode_map": encode_map,
    "MAX_DEPTH": MAX_DEPTH,
}


def _compile_reader(cls: type, kind: int | None) -> Callable:
    read = compile_reader(cls, kind, "data, p, d", "p", _reader_lines, _NAMESPACE)
    return _cached_reader(cls.WIRE, read) if is_identity(cls.WIRE) else read


def _cached_reader(wire: str, read: Callable) -> Callable:
    """`read` behind a cache keyed by the structure's bytes: the ids and destinations of a
    connection's commands repeat, and a hit costs a slice and a lookup instead of a parse."""
    before = sum(FIXED[k] for k in wire[:wire.index("s")])
    after = sum(FIXED[k] for k in wire[wire.index("s") + 1:])
    cache: dict[bytes, Any] = {}

    def cached(data: bytes, p: int, d: int) -> tuple[Any, int]:
        s = p + before
        if data[s] == 1:
            e = s + 3 + ((data[s + 1] << 8) | data[s + 2]) + after
        else:
            e = s + 1 + after
        key = data[p:e]
        hit = cache.get(key)
        if hit is not None:
            return hit, e
        value, q = read(data, p, d)
        if q == e and e - p <= CACHE_BYTES:
            if len(cache) >= CACHE_SIZE:
                cache.clear()
            cache[key] = value
        return value, q

    return cached


# -- writers -------------------------------------------------------------------------------

#: class -> writer
WRITERS: dict[type, Callable] = {}


def _write_string(var: str) -> list[str]:
    return [
        f"if {var} is None:",
        "    out.append(0)",
        "else:",
        f"    raw = {var}.encode() if {var}.isascii() and '\\x00' not in {var} else _mutf8_encode({var})",
        "    if len(raw) > 0xFFFF: _too_long(len(raw))",
        "    out.append(1)",
        "    out += _HU.pack(len(raw))",
        "    out += raw",
    ]


def _write_nested(var: str) -> list[str]:
    return [
        f"if {var} is None:",
        "    out.append(0)",
        "else:",
        "    out.append(1)",
        f"    WRITERS[type({var})]({var}, out)",
    ]


def _writer_lines(kind: str, var: str) -> list[str]:
    if kind == "b":
        return [f"out.append(1 if {var} else 0)"]
    if kind == "q":
        return [f"out += _Q.pack({var})"]
    return writer_lines(kind, var, "out", _write_string, _write_nested)


def _compile_writer(cls: type) -> Callable:
    return compile_writer(cls, "out", _writer_lines, _NAMESPACE)


def _write_wire_format_info(v: WireFormatInfo, out: bytearray) -> None:
    out.append(DataType.WIREFORMAT_INFO)
    out += MAGIC
    out += _I.pack(v.version)
    if v.properties is None:
        out.append(0)
    else:
        raw = encode_map(v.properties)
        out.append(1)
        out += _I.pack(len(raw))
        out += raw


#: type byte -> reader, for all 256 (unknown types raise a protocol error)
READERS: list[Callable] = []
_NAMESPACE["READERS"] = READERS
_NAMESPACE["WRITERS"] = WRITERS
fill_tables(READERS, WRITERS, _compile_reader, _compile_writer, _wire_format_info, _write_wire_format_info)


def decode_command(data: bytes) -> Any:
    """One frame's command (after its size prefix): the type byte, then its fields, all of them."""
    try:
        type_ = data[0]
        if type_ == 0:
            raise OpenWireProtocolError("a null command")
        command, pos = READERS[type_](data, 1, 0)
    except (IndexError, struct.error):
        raise OpenWireProtocolError("a field runs past the end of its frame") from None
    if pos != len(data):
        raise OpenWireProtocolError(f"{len(data) - pos} bytes after a {type(command).__name__} in its frame")
    return command


def encode_command(command: Any) -> bytes:
    """A command's type byte and fields (no size prefix)."""
    out = bytearray()
    try:
        WRITERS[type(command)](command, out)
    except (KeyError, struct.error, TypeError, AttributeError, ValueError) as exc:
        raise local_error(command, exc) from None
    return bytes(out)
