"""AMQP 1.0 framing (part 2.3): protocol headers, frame headers, detection and the events.

A frame is SIZE (4 bytes, the whole frame), DOFF (1, the header's length in 4-byte words),
TYPE (1: 0 AMQP, 1 SASL), a channel (2), an extended header (skipped), then the body: one
described performative and, for a transfer, the message payload. A frame of 8 bytes is
empty (a heart-beat).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "detect", "protocol_header", "ProtocolHeader", "Frame", "Empty", "NEED_DATA",
    "AMQP", "SASL", "TLS", "FRAME_AMQP", "FRAME_SASL", "MIN_MAX_FRAME_SIZE", "FRAME_HEADER",
]

AMQP, TLS, SASL = 0, 2, 3  # protocol ids in the protocol header
FRAME_AMQP, FRAME_SASL = 0, 1  # frame types
VERSION = (1, 0, 0)
#: Every peer takes frames this large, before and after open (2.7.1).
MIN_MAX_FRAME_SIZE = 512
FRAME_HEADER = struct.Struct(">IBBH")


def protocol_header(protocol_id: int) -> bytes:
    return b"AMQP" + bytes((protocol_id, *VERSION))


def detect(head: bytes) -> bool | None:
    """Whether a client's first bytes are AMQP 1.0's (``AMQP`` then protocol id 0 or 3 and
    version 1.0.0): True, False, or None (too few to tell)."""
    n = min(len(head), 8)
    for wanted in (protocol_header(AMQP), protocol_header(SASL)):
        if head[:n] == wanted[:n]:
            return True if n == 8 else None
    return False


class NEED_DATA:  # noqa: N801 - a sentinel, as in h11
    """``next_event`` has nothing to return until more bytes arrive."""


@dataclass(frozen=True, slots=True)
class ProtocolHeader:
    """The peer's protocol header: ``protocol_id`` 0 (AMQP) or 3 (SASL)."""

    protocol_id: int


@dataclass(frozen=True, slots=True)
class Frame:
    """A frame's performative on ``channel``; for a transfer, ``payload`` is the delivery's
    whole message (the frames of a multi-frame transfer are joined into one event, ``frames``
    says how many there were: each counts against the session's incoming window)."""

    channel: int
    performative: Any
    payload: bytes = b""
    frames: int = 1


@dataclass(frozen=True, slots=True)
class Empty:
    """An empty frame: a heart-beat keeping the connection alive."""

    channel: int = 0
