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
from dataclasses import fields
from typing import Any, Callable

from .commands import BY_TYPE, DESTINATION_TYPES, MESSAGE_TYPES, DataType, Destination, JavaThrowable, Message, \
    WireFormatInfo
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


def _unknown(type_: int) -> Callable:
    def read(data: bytes, p: int, d: int) -> Any:
        raise OpenWireProtocolError(f"unknown or unsupported data structure type {type_}")
    return read


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
    if kind == "y":
        return [f"{var} = data[p]", "p += 1", f"if {var} > 127: {var} -= 256"]
    if kind == "i":
        return [f"{var}, = _I.unpack_from(data, p)", "p += 4"]
    if kind == "q":
        return [f"{var}, = _Q.unpack_from(data, p)", "p += 8"]
    if kind == "s":
        return _read_presence(var, _read_string(var))
    if kind == "B":
        return _read_presence(var, _read_blob(var))
    if kind == "P":
        return _read_presence(var, [*_read_blob(var), f"{var} = decode_map({var}, d)"])
    if kind == "o":
        return _read_presence(var, _read_nested(var))
    if kind == "O":
        return _read_presence(var, [
            "n, = _H.unpack_from(data, p)",
            "if n < 0: _bad_length('an array of structures', n)",
            "p += 2",
            "items = []",
            "for _ in range(n):",
            *("    " + line for line in _read_presence("v", _read_nested("v"))),
            "    items.append(v)",
            f"{var} = tuple(items)",
        ])
    if kind == "T":
        return [f"if data[p] == 0:", f"    {var} = None", "    p += 1", "else:", f"    {var}, p = _throwable(data, p)"]
    raise AssertionError(f"unknown field kind {kind!r}")


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


def _args(cls: type, kind: int | None) -> list[str]:
    """The values of the fields in declaration order: the locals read, a message's or a
    destination's `kind` the type byte."""
    out, i = [], 0
    for f in fields(cls):
        if f.name == "kind":
            out.append(str(int(kind)))
        else:
            out.append(f"f{i}")
            i += 1
    return out


_NAMESPACE: dict[str, Any] = {
    "_I": _I, "_Q": _Q, "_H": _H, "_HU": _HU, "_B": _B, "_bad_bool": _bad_bool, "_past": _past,
    "_bad_length": _bad_length, "_too_deep": _too_deep, "_too_long": _too_long, "_throwable": _throwable,
    "_mutf8": mutf8_decode, "_mutf8_encode": mutf8_encode, "decode_map": decode_map, "encode_map": encode_map,
    "MAX_DEPTH": MAX_DEPTH,
}


def _compile_reader(cls: type, kind: int | None = None) -> Callable:
    lines = ["def read(data, p, d):", "    end = len(data)"]
    for i, k in enumerate(cls.WIRE):
        lines += ["    " + line for line in _reader_lines(k, f"f{i}")]
    # the fields set through their slots' descriptors (a frozen dataclass's __init__ costs twice as much)
    lines.append("    o = _new(CLS)")
    setters = {}
    for i, (name, arg) in enumerate(zip((f.name for f in fields(cls)), _args(cls, kind))):
        setters[f"S{i}"] = getattr(cls, name).__set__
        lines.append(f"    S{i}(o, {arg})")
    lines.append("    return o, p")
    namespace = {**_NAMESPACE, **setters, "CLS": cls, "_new": object.__new__}
    exec("\n".join(lines), namespace)  # noqa: S102 (source made here from WIRE, never from input)
    read = namespace["read"]
    return _cached_reader(cls.WIRE, read) if _is_identity(cls.WIRE) else read


_FIXED = {"b": 1, "y": 1, "i": 4, "q": 8}
CACHE_SIZE = 4096  # identities per type remembered by their bytes (or objects) before starting afresh


def _is_identity(wire: str) -> bool:
    """An identity or a destination: one string and fixed-size fields, so the span of its bytes
    is known from the string's length, and the same bytes always read as the same value."""
    return wire.count("s") == 1 and all(k == "s" or k in _FIXED for k in wire)


def _cached_reader(wire: str, read: Callable) -> Callable:
    """`read` behind a cache keyed by the structure's bytes: the ids and destinations of a
    connection's commands repeat, and a hit costs a slice and a lookup instead of a parse."""
    before = sum(_FIXED[k] for k in wire[:wire.index("s")])
    after = sum(_FIXED[k] for k in wire[wire.index("s") + 1:])
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
        if q == e:
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
    if kind == "y":
        return [f"out += _B.pack({var})"]
    if kind == "i":
        return [f"out += _I.pack({var})"]
    if kind == "q":
        return [f"out += _Q.pack({var})"]
    if kind == "s":
        return _write_string(var)
    if kind in "BP":
        value = var if kind == "B" else f"encode_map({var})"
        return [f"if {var} is None:", "    out.append(0)", "else:", f"    raw = {value}", "    out.append(1)",
                "    out += _I.pack(len(raw))", "    out += raw"]
    if kind == "o":
        return _write_nested(var)
    if kind == "O":
        return [f"if {var} is None:", "    out.append(0)", "else:", "    out.append(1)",
                f"    out += _H.pack(len({var}))", f"    for v in {var}:",
                *("        " + line for line in _write_nested("v"))]
    if kind == "T":
        return [f"if {var} is None:", "    out.append(0)", "else:", "    out.append(1)",
                *("    " + line for line in _write_string(f"{var}.class_name")),
                *("    " + line for line in _write_string(f"{var}.message"))]
    raise AssertionError(f"unknown field kind {kind!r}")


def _compile_writer(cls: type) -> Callable:
    names = [f.name for f in fields(cls) if f.name != "kind"]
    if len(names) != len(cls.WIRE):
        raise AssertionError(f"{cls.__name__}: {len(names)} fields, WIRE has {len(cls.WIRE)}")
    type_byte = "obj.kind" if cls is Message or cls is Destination else str(int(cls.TYPE))
    lines = ["def write(obj, out):", f"    out.append({type_byte})"]
    for i, (k, name) in enumerate(zip(cls.WIRE, names)):
        lines.append(f"    f{i} = obj.{name}")
        lines += ["    " + line for line in _writer_lines(k, f"f{i}")]
    namespace = {**_NAMESPACE, "WRITERS": WRITERS}
    exec("\n".join(lines), namespace)  # noqa: S102 (source made here from WIRE, never from input)
    write = namespace["write"]
    return _cached_writer(write) if _is_identity(cls.WIRE) else write


def _cached_writer(write: Callable) -> Callable:
    """`write` behind a cache of the bytes of the objects it wrote (by identity: the adapter
    sends the same consumer id, destination and producer id objects again and again)."""
    cache: dict[int, tuple[Any, bytes]] = {}

    def cached(obj: Any, out: bytearray) -> None:
        hit = cache.get(id(obj))
        if hit is not None and hit[0] is obj:
            out += hit[1]
            return
        start = len(out)
        write(obj, out)
        if len(cache) >= CACHE_SIZE:
            cache.clear()
        cache[id(obj)] = (obj, bytes(out[start:]))  # (the object kept: its id is not reused meanwhile)

    return cached


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
READERS: list[Callable] = [_unknown(t) for t in range(256)]
WRITERS[WireFormatInfo] = _write_wire_format_info
_NAMESPACE["READERS"] = READERS

READERS[DataType.WIREFORMAT_INFO] = _wire_format_info
for _type, _cls in BY_TYPE.items():
    READERS[_type] = _compile_reader(_cls)
    WRITERS[_cls] = _compile_writer(_cls)
for _type in DESTINATION_TYPES:
    READERS[_type] = _compile_reader(Destination, _type)
for _type in MESSAGE_TYPES:
    READERS[_type] = _compile_reader(Message, _type)
WRITERS[Destination] = _compile_writer(Destination)
WRITERS[Message] = _compile_writer(Message)


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
    except KeyError as exc:  # (a type with no writer, at any depth)
        raise OpenWireLocalError(f"cannot encode a {getattr(exc.args[0], '__name__', exc.args[0])}") from None
    except (struct.error, TypeError, AttributeError, ValueError) as exc:
        raise OpenWireLocalError(f"cannot encode {type(command).__name__}: {exc}") from None
    return bytes(out)
