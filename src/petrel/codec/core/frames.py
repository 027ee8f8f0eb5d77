"""CORE wire constants: the preamble, the frame header, frame types and codes.

A connection starts with the client's 8-byte :data:`PREAMBLE`; after it both
directions are a sequence of frames::

    u32 length | u8 type | payload (length - 1 bytes, msgpack)

``length`` counts the type byte and the payload, big-endian. The payload of a
frame type is one msgpack array whose elements are the fields of its event
class (see :mod:`events`), in order.

Frame types are grouped in ranges so later subsystems get room without
renumbering: connection control, requests, sessions, then ranges reserved for
cluster links, replication and extensions (see :data:`RANGES`). Which ranges a
peer may use is agreed in the capabilities exchange of CONNECT/CONNECTED.
"""

from __future__ import annotations

import struct
from enum import IntEnum

__all__ = [
    "PREAMBLE",
    "MAGIC",
    "detect",
    "PROTOCOL_VERSIONS",
    "HEADER",
    "HEADER_SIZE",
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_LARGE_MESSAGE_SIZE",
    "CREDIT_OVERHEAD",
    "CAPABILITIES",
    "FrameType",
    "FrameRange",
    "RANGES",
    "ErrorCode",
    "DisconnectCode",
    "NO_ROUTING_TYPE",
    "NEED_DATA",
    "credit_of",
]

#: The first bytes a CORE client sends (the broker's protocol detection keys on MAGIC).
MAGIC = b"PETREL"
#: MAGIC, the preamble format (1) and a reserved byte.
PREAMBLE = MAGIC + b"\x01\x00"


def detect(head: bytes) -> bool | None:
    """Whether a client's first bytes are CORE's: True, False, or None (too few to tell)."""
    n = min(len(MAGIC), len(head))
    if head[:n] != MAGIC[:n]:
        return False
    return True if n == len(MAGIC) else None


#: Protocol versions this codec speaks, lowest first; agreed in CONNECT/CONNECTED.
PROTOCOL_VERSIONS = (1,)

HEADER = struct.Struct("!IB")
HEADER_SIZE = HEADER.size

DEFAULT_MAX_FRAME_SIZE = 10 * 1024 * 1024
#: Bodies larger than this travel as a first frame plus chunk frames (Artemis: 100 KiB).
DEFAULT_LARGE_MESSAGE_SIZE = 100 * 1024
#: Consumer credit a message costs beyond its body, so empty bodies are not free.
CREDIT_OVERHEAD = 64

#: What this implementation offers in the capabilities exchange.
CAPABILITIES = ("large-messages", "topology", "redirect", "browse", "transactions", "cluster")

#: ``routing_type`` field value meaning "the address decides".
NO_ROUTING_TYPE = -1


def credit_of(body_size: int) -> int:
    """Consumer-window bytes one delivered message takes (both ends compute the same)."""
    return body_size + CREDIT_OVERHEAD


class FrameRange(IntEnum):
    """First frame type of each range."""

    CONNECTION = 0x01
    REQUEST = 0x10
    SESSION = 0x20
    CLUSTER = 0x40
    REPLICATION = 0x60
    EXTENSION = 0x80


#: (first, last) frame type of each range, inclusive.
RANGES = {
    FrameRange.CONNECTION: (0x01, 0x0F),
    FrameRange.REQUEST: (0x10, 0x1F),
    FrameRange.SESSION: (0x20, 0x3F),
    FrameRange.CLUSTER: (0x40, 0x5F),
    FrameRange.REPLICATION: (0x60, 0x7F),
    FrameRange.EXTENSION: (0x80, 0xFF),
}


class FrameType(IntEnum):
    # connection control
    CONNECT = 0x01
    CONNECTED = 0x02
    PING = 0x03
    PONG = 0x04
    DISCONNECT = 0x05
    ERROR = 0x06
    TOPOLOGY = 0x07
    # requests (each carries a correlation id answered by RESULT)
    RESULT = 0x10
    CREATE_ADDRESS = 0x11
    DELETE_ADDRESS = 0x12
    CREATE_QUEUE = 0x13
    DELETE_QUEUE = 0x14
    QUERY = 0x15
    BROWSE = 0x16
    BROWSE_RESULT = 0x17
    # sessions
    CREATE_SESSION = 0x20
    CLOSE_SESSION = 0x21
    SEND = 0x22
    SEND_CHUNK = 0x23
    SEND_CONFIRM = 0x24
    SEND_FAILED = 0x25
    CREATE_CONSUMER = 0x26
    CLOSE_CONSUMER = 0x27
    CREDIT = 0x28
    DELIVER = 0x29
    DELIVER_CHUNK = 0x2A
    ACK = 0x2B
    NACK = 0x2C
    COMMIT = 0x2D
    ROLLBACK = 0x2E


class ErrorCode(IntEnum):
    """Outcome codes in RESULT, SEND_FAILED and ERROR frames."""

    OK = 0
    INTERNAL = 1
    PROTOCOL = 2
    UNAUTHORIZED = 3
    NOT_FOUND = 4
    ALREADY_EXISTS = 5
    INVALID = 6
    ROUTING = 7
    TRANSACTION_ROLLED_BACK = 8
    UNSUPPORTED = 9
    SHUTTING_DOWN = 10
    ADDRESS_FULL = 11


class DisconnectCode(IntEnum):
    """Why a DISCONNECT was sent."""

    NORMAL = 0
    SHUTDOWN = 1
    REDIRECT = 2
    TTL_EXPIRED = 3
    SCALE_DOWN = 4
    FAILOVER = 5


class _SentinelType(type):
    def __repr__(cls) -> str:
        return cls.__name__


class NEED_DATA(metaclass=_SentinelType):
    """Returned by ``next_event`` when no whole frame is buffered; compare with ``is``."""

    def __new__(cls) -> NEED_DATA:  # pragma: no cover - guard only
        raise TypeError("NEED_DATA is a sentinel; use the class itself")
