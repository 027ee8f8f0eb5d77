"""OpenWire (ActiveMQ Classic's protocol), sans-IO, loose and tight encoding.

:class:`OpenWireConnection` turns received bytes into command events (frozen dataclasses in
`commands`) and commands into bytes; `detect` recognises a client's WireFormatInfo for the
protocol registry. Malformed input raises :class:`OpenWireProtocolError`.
"""

from .body import text_content, text_of
from .commands import *  # noqa: F403
from .commands import __all__ as _commands
from .codegen import new_message
from .connection import DEFAULT_MAX_FRAME_SIZE, NEED_DATA, VERSION, OpenWireConnection, detect
from .errors import OpenWireLocalError, OpenWireProtocolError
from .marshal import JavaByte, JavaFloat, JavaLong, JavaShort, decode_map, encode_map

__all__ = [*_commands, "OpenWireConnection", "NEED_DATA", "VERSION", "DEFAULT_MAX_FRAME_SIZE", "detect",
           "OpenWireProtocolError", "OpenWireLocalError", "text_of", "text_content",
           "decode_map", "encode_map", "new_message", "JavaLong", "JavaShort", "JavaByte", "JavaFloat"]
