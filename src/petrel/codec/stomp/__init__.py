"""STOMP 1.0/1.1/1.2 codec, sans-IO.

:class:`StompConnection` turns received bytes into :class:`Frame` and
:class:`Heartbeat` events and frames into bytes, enforcing the connection state
table, header escaping per version and size limits.
"""

from .connection import StompConnection, parse_accept_version
from .frames import (
    CLIENT_COMMANDS,
    HEARTBEAT,
    NEED_DATA,
    SERVER_COMMANDS,
    VERSIONS,
    BodyChunk,
    Frame,
    FrameEnd,
    FrameHeader,
    Heartbeat,
)
from .heartbeat import format_heartbeat, negotiate_heartbeat, parse_heartbeat
from .state import Phase, Role

__all__ = [
    "StompConnection",
    "Role",
    "Phase",
    "Frame",
    "Heartbeat",
    "HEARTBEAT",
    "FrameHeader",
    "BodyChunk",
    "FrameEnd",
    "NEED_DATA",
    "CLIENT_COMMANDS",
    "SERVER_COMMANDS",
    "VERSIONS",
    "parse_heartbeat",
    "format_heartbeat",
    "negotiate_heartbeat",
    "parse_accept_version",
]
