"""OpenWire's loose encoding: commands and data structures to and from bytes, no I/O.

Big-endian integers; a boolean is one byte (0 or 1); a string is a presence boolean then
Java's modified UTF-8 with a 2-byte length; a byte array or sequence a presence boolean, a
4-byte length and the bytes; a nested data structure a presence boolean, its type byte and
its fields (the cache, which would replace it by an index, is never negotiated here); an
array of them a presence boolean, a 2-byte count and each nested structure; a throwable a
presence boolean, class name and message (the stack trace only when StackTraceEnabled,
which this codec never negotiates). Each command's fields follow `commands` (`WIRE`).

The message properties and WireFormatInfo's options are a primitive map: a 4-byte count
(-1: none), then each key (modified UTF-8, 2-byte length) and its typed value.
"""

from __future__ import annotations

import re
import struct
from dataclasses import fields
from typing import Any

from .commands import (
    BY_TYPE,
    DESTINATION_TYPES,
    MESSAGE_TYPES,
    DataType,
    Destination,
    JavaThrowable,
    Message,
    WireFormatInfo,
)
from .errors import OpenWireLocalError, OpenWireProtocolError

__all__ = ["JavaLong", "JavaShort", "JavaByte", "JavaFloat", "Reader", "Writer", "decode_command", "encode_command", "decode_map", "encode_map",
           "mutf8_encode", "mutf8_decode", "MAGIC"]

MAGIC = b"ActiveMQ"
MAX_DEPTH = 8  # nested structures (a message in a dispatch in...) and maps within maps

_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_HU = struct.Struct(">H")
_D = struct.Struct(">d")
_F = struct.Struct(">f")

# field names in wire order, per class (a message's and a destination's `kind` is its type byte)
_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = tuple(f.name for f in fields(cls) if f.name != "kind")
        if len(names) != len(cls.WIRE):
            raise AssertionError(f"{cls.__name__}: {len(names)} fields, WIRE has {len(cls.WIRE)}")
        _NAMES[cls] = names
    return names


for _cls in (*BY_TYPE.values(), Message, Destination):
    _names(_cls)

class JavaLong(int):
    """An int a primitive map keeps as a Java long (type 6) even when it is small."""


class JavaShort(int):
    """A Java short in a primitive map."""


class JavaByte(int):
    """A Java byte in a primitive map."""


class JavaFloat(float):
    """A Java float in a primitive map."""


_SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")


def _split(match: re.Match) -> str:
    c = ord(match.group()) - 0x10000
    return chr(0xD800 + (c >> 10)) + chr(0xDC00 + (c & 0x3FF))


def mutf8_encode(text: str) -> bytes:
    """Java's modified UTF-8: NUL as C0 80, characters beyond the BMP as two 3-byte surrogates."""
    if text.isascii():
        return text.encode().replace(b"\x00", b"\xc0\x80")
    if _SUPPLEMENTARY.search(text):
        text = _SUPPLEMENTARY.sub(_split, text)
    return text.encode("utf-8", "surrogatepass").replace(b"\x00", b"\xc0\x80")


def mutf8_decode(data: bytes) -> str:
    if data.isascii():
        if 0 in data:
            raise OpenWireProtocolError("a NUL byte in a modified UTF-8 string")
        return data.decode()
    try:
        text = data.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
        if any("\ud800" <= c <= "\udfff" for c in text):
            text = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be")
    except UnicodeError as exc:
        raise OpenWireProtocolError(f"a string that is not modified UTF-8: {exc}") from None
    return text


class Reader:
    """Reads one frame's bytes; running past the end is a protocol error."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def take(self, n: int) -> bytes:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise OpenWireProtocolError(f"a field of {n} bytes runs past the end of its frame")
        self.pos = pos + n
        return self.data[pos:pos + n]

    def byte(self) -> int:
        pos = self.pos
        if pos >= self.end:
            raise OpenWireProtocolError("a field runs past the end of its frame")
        self.pos = pos + 1
        return self.data[pos]

    def boolean(self) -> bool:
        b = self.byte()
        if b > 1:
            raise OpenWireProtocolError(f"a boolean of value {b}")
        return b == 1

    def int(self) -> int:
        return _I.unpack(self.take(4))[0]

    def long(self) -> int:
        return _Q.unpack(self.take(8))[0]

    def short(self) -> int:
        return _H.unpack(self.take(2))[0]

    def utf(self) -> str:
        return mutf8_decode(self.take(_HU.unpack(self.take(2))[0]))

    def string(self) -> str | None:
        return self.utf() if self.boolean() else None

    def blob(self) -> bytes | None:
        if not self.boolean():
            return None
        n = self.int()
        if n < 0:
            raise OpenWireProtocolError(f"a byte array of length {n}")
        return self.take(n)

    def throwable(self) -> JavaThrowable | None:
        if not self.boolean():
            return None
        return JavaThrowable(self.string(), self.string())

    def nested(self, depth: int) -> Any:
        if not self.boolean():
            return None
        return self.structure(self.byte(), depth + 1)

    def array(self, depth: int) -> tuple | None:
        if not self.boolean():
            return None
        n = self.short()
        if n < 0:
            raise OpenWireProtocolError(f"an array of {n} structures")
        return tuple(self.nested(depth) for _ in range(n))

    def structure(self, type_: int, depth: int = 0) -> Any:
        """The fields of a data structure of type `type_` (its type byte already read)."""
        if depth > MAX_DEPTH:
            raise OpenWireProtocolError("data structures nested too deep")
        if type_ == DataType.WIREFORMAT_INFO:
            magic = self.take(8)
            if magic != MAGIC:
                raise OpenWireProtocolError(f"a WireFormatInfo without the magic 'ActiveMQ' ({magic!r})")
            version = self.int()
            props = self.blob()
            return WireFormatInfo(version, None if props is None else decode_map(props))
        cls = BY_TYPE.get(type_)
        values: list[Any] = []
        if cls is None:
            if type_ in DESTINATION_TYPES:
                return Destination(type_, self.string())
            if type_ not in MESSAGE_TYPES:
                raise OpenWireProtocolError(f"unknown or unsupported data structure type {type_}")
            cls = Message
        for kind in cls.WIRE:
            if kind == "o":
                values.append(self.nested(depth))
            elif kind == "s":
                values.append(self.string())
            elif kind == "b":
                values.append(self.boolean())
            elif kind == "i":
                values.append(self.int())
            elif kind == "q":
                values.append(self.long())
            elif kind == "y":
                b = self.byte()
                values.append(b - 256 if b > 127 else b)
            elif kind == "B":
                values.append(self.blob())
            elif kind == "P":
                blob = self.blob()
                values.append(None if blob is None else decode_map(blob, depth))
            elif kind == "O":
                values.append(self.array(depth))
            else:  # "T"
                values.append(self.throwable())
        if cls is Message:
            return Message(kind=type_, **dict(zip(_names(Message), values)))
        return cls(*values)


def decode_command(data: bytes, pos: int = 0, end: int | None = None) -> Any:
    """One frame's command (after its size prefix): the type byte, then its fields, all of them."""
    r = Reader(data, pos, end)
    type_ = r.byte()
    if type_ == 0:
        raise OpenWireProtocolError("a null command")
    command = r.structure(type_)
    if r.pos != r.end:
        raise OpenWireProtocolError(f"{r.end - r.pos} bytes after a {type(command).__name__} in its frame")
    return command


# -- primitive maps ----------------------------------------------------------------------

def decode_map(data: bytes, depth: int = 0) -> dict[str, Any]:
    r = Reader(data)
    out = _read_map(r, depth)
    if r.pos != r.end:
        raise OpenWireProtocolError(f"{r.end - r.pos} bytes after a properties map")
    return out


def _read_map(r: Reader, depth: int) -> dict[str, Any]:
    n = r.int()
    if n < 0:
        return {}
    if n > r.end - r.pos:
        raise OpenWireProtocolError(f"a map of {n} entries in {r.end - r.pos} bytes")
    out = {}
    for _ in range(n):
        key = r.utf()
        out[key] = _read_value(r, depth)
    return out


def _read_value(r: Reader, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise OpenWireProtocolError("maps nested too deep")
    t = r.byte()
    if t == 0:
        return None
    if t == 1:
        return r.boolean()
    if t == 2:
        b = r.byte()
        return JavaByte(b - 256 if b > 127 else b)
    if t == 3:
        return chr(_HU.unpack(r.take(2))[0])
    if t == 4:
        return JavaShort(r.short())
    if t == 5:
        return r.int()
    if t == 6:
        return JavaLong(r.long())
    if t == 7:
        return _D.unpack(r.take(8))[0]
    if t == 8:
        return JavaFloat(_F.unpack(r.take(4))[0])
    if t == 9:
        return r.utf()
    if t == 10:
        n = r.int()
        return r.take(n)
    if t == 11:
        return _read_map(r, depth + 1)
    if t == 12:
        n = r.int()
        if n < 0 or n > r.end - r.pos:
            raise OpenWireProtocolError(f"a list of {n} values")
        return [_read_value(r, depth + 1) for _ in range(n)]
    if t == 13:
        n = r.int()
        return mutf8_decode(r.take(n))
    raise OpenWireProtocolError(f"a map value of unknown type {t}")


def encode_map(values: dict[str, Any]) -> bytes:
    w = Writer()
    w.map(values)
    return bytes(w.out)


# -- writing ------------------------------------------------------------------------------

class Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def boolean(self, v: bool) -> None:
        self.out.append(1 if v else 0)

    def utf(self, text: str) -> None:
        data = mutf8_encode(text)
        if len(data) > 0xFFFF:
            raise OpenWireLocalError(f"a string of {len(data)} bytes (65535 at most)")
        self.out += _HU.pack(len(data)) + data

    def string(self, v: str | None) -> None:
        if v is None:
            self.out.append(0)
        else:
            self.out.append(1)
            self.utf(v)

    def blob(self, v: bytes | None) -> None:
        if v is None:
            self.out.append(0)
        else:
            self.out.append(1)
            self.out += _I.pack(len(v))
            self.out += v

    def nested(self, v: Any) -> None:
        if v is None:
            self.out.append(0)
            return
        self.out.append(1)
        self.structure(v)

    def structure(self, v: Any) -> None:
        out = self.out
        if isinstance(v, WireFormatInfo):
            out.append(DataType.WIREFORMAT_INFO)
            out += MAGIC
            out += _I.pack(v.version)
            self.blob(None if v.properties is None else encode_map(v.properties))
            return
        cls = type(v)
        if cls is Message or cls is Destination:
            out.append(v.kind)
        elif cls.TYPE:
            out.append(cls.TYPE)
        else:
            raise OpenWireLocalError(f"cannot encode a {cls.__name__}")
        for kind, name in zip(cls.WIRE, _names(cls)):
            value = getattr(v, name)
            if kind == "o":
                self.nested(value)
            elif kind == "s":
                self.string(value)
            elif kind == "b":
                out.append(1 if value else 0)
            elif kind == "i":
                out += _I.pack(value)
            elif kind == "q":
                out += _Q.pack(value)
            elif kind == "y":
                out += struct.pack(">b", value)
            elif kind == "B":
                self.blob(value)
            elif kind == "P":
                self.blob(None if value is None else encode_map(value))
            elif kind == "O":
                if value is None:
                    out.append(0)
                else:
                    out.append(1)
                    out += _H.pack(len(value))
                    for item in value:
                        self.nested(item)
            else:  # "T"
                if value is None:
                    out.append(0)
                else:
                    out.append(1)
                    self.string(value.class_name)
                    self.string(value.message)

    def map(self, values: dict[str, Any]) -> None:
        self.out += _I.pack(len(values))
        for key, value in values.items():
            self.utf(key)
            self.value(value)

    def value(self, v: Any) -> None:
        out = self.out
        if v is None:
            out.append(0)
        elif v is True or v is False:
            out += bytes((1, 1 if v else 0))
        elif isinstance(v, int):
            cls = type(v)
            if cls is JavaLong:
                out.append(6)
                out += _Q.pack(v)
            elif cls is JavaShort:
                out.append(4)
                out += _H.pack(v)
            elif cls is JavaByte:
                out += struct.pack(">Bb", 2, v)
            elif -(1 << 31) <= v < (1 << 31):
                out.append(5)
                out += _I.pack(v)
            else:
                out.append(6)
                out += _Q.pack(v)
        elif type(v) is JavaFloat:
            out.append(8)
            out += _F.pack(v)
        elif isinstance(v, float):
            out.append(7)
            out += _D.pack(v)
        elif isinstance(v, str):
            data = mutf8_encode(v)
            if len(data) < 8191:  # (the reference client's bound for a short string)
                out.append(9)
                out += _HU.pack(len(data)) + data
            else:
                out.append(13)
                out += _I.pack(len(data)) + data
        elif isinstance(v, (bytes, bytearray)):
            out.append(10)
            out += _I.pack(len(v)) + bytes(v)
        elif isinstance(v, dict):
            out.append(11)
            self.map(v)
        elif isinstance(v, (list, tuple)):
            out.append(12)
            out += _I.pack(len(v))
            for item in v:
                self.value(item)
        else:
            raise OpenWireLocalError(f"a map value of type {type(v).__name__}")


def encode_command(command: Any) -> bytes:
    """A command's type byte and fields (no size prefix)."""
    w = Writer()
    try:
        w.structure(command)
    except (struct.error, TypeError, AttributeError, ValueError) as exc:
        raise OpenWireLocalError(f"cannot encode {type(command).__name__}: {exc}") from None
    return bytes(w.out)
