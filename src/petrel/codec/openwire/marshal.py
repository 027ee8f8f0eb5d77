"""OpenWire's loose encoding: its primitives and primitive maps (commands: `loose`), no I/O.

Big-endian integers; a boolean is one byte (0 or 1); a string is a presence boolean then
Java's modified UTF-8 with a 2-byte length; a byte array or sequence a presence boolean, a
4-byte length and the bytes; a nested data structure a presence boolean, its type byte and
its fields (the cache, which would replace it by an index, is never negotiated here); an
array of them a presence boolean, a 2-byte count and each nested structure; a throwable a
presence boolean, class name and message (the stack trace only when StackTraceEnabled,
which this codec never negotiates). Each command's fields follow `commands` (`WIRE`), read and written by `loose`.

The message properties and WireFormatInfo's options are a primitive map: a 4-byte count
(-1: none), then each key (modified UTF-8, 2-byte length) and its typed value.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from .errors import OpenWireLocalError, OpenWireProtocolError

__all__ = ["JavaLong", "JavaShort", "JavaByte", "JavaFloat", "Reader", "Writer", "decode_map", "encode_map",
           "mutf8_encode", "mutf8_decode", "MAGIC", "MAX_DEPTH"]

MAGIC = b"ActiveMQ"
MAX_DEPTH = 8  # nested structures (a message in a dispatch in...) and maps within maps

_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_HU = struct.Struct(">H")
_D = struct.Struct(">d")
_F = struct.Struct(">f")

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
