"""The bodies of OpenWire messages as the JMS client encodes them in `Message.content`.

A text message's content is a 4-byte length and the text in modified UTF-8 (no content: a
null text); a bytes message's content is the bytes. (Compressed bodies, the client's
useCompression, are not read yet.)
"""

from __future__ import annotations

import struct

from .errors import OpenWireProtocolError
from .marshal import mutf8_decode, mutf8_encode

__all__ = ["text_of", "text_content"]


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
