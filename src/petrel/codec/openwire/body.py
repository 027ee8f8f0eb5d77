"""The bodies of OpenWire messages as the JMS client encodes them in `Message.content`.

A text message's content is a 4-byte length and the text in modified UTF-8 (no content: a
null text); a bytes message's content is the bytes. A compressed message (the client's
useCompression) is a 4-byte length of the inflated bytes then a zlib stream.
"""

from __future__ import annotations

import struct
import zlib

from .errors import OpenWireProtocolError
from .marshal import mutf8_decode, mutf8_encode

__all__ = ["text_of", "text_content", "inflate"]


def inflate(content: bytes, limit: int) -> bytes:
    if len(content) < 4:
        raise OpenWireProtocolError("a compressed body without its length")
    size = struct.unpack(">i", content[:4])[0]
    if size < 0 or size > limit:
        raise OpenWireProtocolError(f"a compressed body of {size} bytes (limit {limit})")
    try:
        d = zlib.decompressobj()
        out = d.decompress(content[4:], size)
    except zlib.error as exc:
        raise OpenWireProtocolError(f"a compressed body that does not inflate: {exc}") from None
    if len(out) != size:
        raise OpenWireProtocolError("a compressed body of another size than it says")
    return out


def text_of(content: bytes | None) -> str | None:
    if content is None:
        return None
    if len(content) < 4:
        raise OpenWireProtocolError("a text body without its length")
    n = struct.unpack(">i", content[:4])[0]
    if n == -1 and len(content) == 4:
        return None
    if n != len(content) - 4:
        raise OpenWireProtocolError(f"a text body of {len(content) - 4} bytes that says {n}")
    return mutf8_decode(content[4:])


def text_content(text: str | None) -> bytes | None:
    if text is None:
        return None
    data = mutf8_encode(text)
    return struct.pack(">i", len(data)) + data
