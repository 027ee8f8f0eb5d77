"""`OpenWireConnection`: the sans-IO OpenWire connection (h11 shape), loose or tight encoding.

    conn = OpenWireConnection(max_frame_size=...)
    conn.receive_data(data)
    while (event := conn.next_event()) is not NEED_DATA: ...
    wire = conn.send(command)

Every frame is a 4-byte size, then the command (its type byte and fields). The first
command each way is a WireFormatInfo, always in loose encoding. The peer's is answered by
`wire_format_info()`, this side's: version 12 (10 and 11 spoken too), TightEncodingEnabled (unless made with
``tight_encoding=False``), CacheEnabled, SizePrefixDisabled and StackTraceEnabled false. Each
option is on only when both sides say so (the options of the WireFormatInfo this side sent,
when it sent its own, as a client does), so a client that prefers tight encoding (the JMS
client's default) speaks it after the exchange (`tight`), one that does not speaks loose. A
frame larger than the negotiated MaxFrameSize, a command before the WireFormatInfo or any
malformed field raises `OpenWireProtocolError`; the connection is broken from then on.
"""

from __future__ import annotations

import struct
from typing import Any

from petrel.codec.buffer import Buffer

from .commands import DataType, WireFormatInfo
from .errors import OpenWireLocalError, OpenWireProtocolError
from .loose import decode_command, encode_command
from .tight import decode_tight, encode_tight
from .marshal import MAGIC, JavaLong

__all__ = ["OpenWireConnection", "NEED_DATA", "detect", "VERSION", "DEFAULT_MAX_FRAME_SIZE"]

VERSION = 12  # the newest the codec speaks
MIN_VERSION = 10  # (versions 10 and 11 marshal the commands here as 12 does: test_openwire_tight)
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


class OpenWireConnection:
    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, max_inactivity_ms: int = 30_000,
                 tight_encoding: bool = True) -> None:
        self.max_frame_size = max_frame_size
        self.tight_encoding = tight_encoding  # this side's preference
        self.tight = False  # negotiated: both sides said TightEncodingEnabled
        self._sent: dict[str, Any] | None = None  # the options of the WireFormatInfo this side sent
        self.max_inactivity_ms = max_inactivity_ms
        self.version: int | None = None  # negotiated, once the peer's WireFormatInfo is read
        self.peer_options: dict[str, Any] = {}
        self.inactivity_ms = 0  # negotiated MaxInactivityDuration (0: none)
        self._buffer = Buffer()
        self._error: OpenWireProtocolError | None = None

    # -- negotiation -------------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """This side's WireFormatInfo options."""
        return {
            "TightEncodingEnabled": self.tight_encoding,
            "SizePrefixDisabled": False,
            "CacheEnabled": False,
            "CacheSize": 0,
            "StackTraceEnabled": False,
            "TcpNoDelayEnabled": True,
            "MaxInactivityDuration": JavaLong(self.max_inactivity_ms),
            "MaxInactivityDurationInitalDelay": JavaLong(10_000),
            "MaxFrameSize": JavaLong(self.max_frame_size),
            "ProviderName": "Petrel",
        }

    def wire_format_info(self) -> WireFormatInfo:
        return WireFormatInfo(VERSION, self.options())

    def _negotiate(self, info: WireFormatInfo) -> None:
        if info.version < MIN_VERSION:
            raise OpenWireProtocolError(f"OpenWire version {info.version} is not spoken here "
                                        f"(versions {MIN_VERSION} to {VERSION})")
        props = info.properties or {}
        self.peer_options = props
        self.version = min(VERSION, info.version)
        own = self._sent if self._sent is not None else self.options()
        self.tight = props.get("TightEncodingEnabled") is True and own.get("TightEncodingEnabled") is True
        peer_frame = props.get("MaxFrameSize")
        if isinstance(peer_frame, int) and not isinstance(peer_frame, bool) and 0 < peer_frame:
            self.max_frame_size = min(self.max_frame_size, peer_frame)
        peer_idle = props.get("MaxInactivityDuration", 0)
        if isinstance(peer_idle, int) and not isinstance(peer_idle, bool) and peer_idle > 0 \
                and self.max_inactivity_ms > 0:
            self.inactivity_ms = min(peer_idle, self.max_inactivity_ms)
        else:
            self.inactivity_ms = 0

    # -- input -------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        self._buffer.feed(data)

    def next_event(self) -> Any:
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except OpenWireProtocolError as exc:
            self._error = exc
            self._buffer.clear()
            raise

    def _next(self) -> Any:
        buf = self._buffer
        data, pos = buf.data, buf.pos
        if len(data) - pos < 4:
            return NEED_DATA
        size, = _SIZE.unpack_from(data, pos)
        if size < 1:
            raise OpenWireProtocolError(f"a frame of size {size}")
        if size > self.max_frame_size:
            raise OpenWireProtocolError(f"a frame of {size} bytes, over the maximum frame size {self.max_frame_size}")
        if len(data) - pos - 4 < size:
            return NEED_DATA
        if self.version is None and data[pos + 4] != DataType.WIREFORMAT_INFO:
            raise OpenWireProtocolError(f"a command of type {data[pos + 4]} before the WireFormatInfo")
        frame = bytes(memoryview(data)[pos + 4:pos + 4 + size])
        buf.consume_to(pos + 4 + size)
        if self.tight and frame[0] != DataType.WIREFORMAT_INFO:  # (a WireFormatInfo is always loose)
            command = decode_tight(frame)
        else:
            command = decode_command(frame)
        if isinstance(command, WireFormatInfo):
            if self.version is not None:
                raise OpenWireProtocolError("a second WireFormatInfo")
            self._negotiate(command)
        return command

    @property
    def buffered_bytes(self) -> int:
        """Received bytes not yet returned as events (the unfinished frame)."""
        return len(self._buffer)

    @property
    def trailing(self) -> bytes:
        """Bytes received and not yet part of an event."""
        return self._buffer.peek()

    # -- output ------------------------------------------------------------------------------

    def send(self, command: Any) -> bytes:
        if isinstance(command, WireFormatInfo):
            self._sent = command.properties or {}
            body = encode_command(command)
        else:
            body = encode_tight(command) if self.tight else encode_command(command)
        if len(body) > self.max_frame_size:
            raise OpenWireLocalError(f"a frame of {len(body)} bytes, over the maximum frame size "
                                     f"{self.max_frame_size}")
        return len(body).to_bytes(4, "big") + body


def detect(head: bytes) -> bool | None:
    """Whether a client's first bytes are an OpenWire WireFormatInfo (a 4-byte size, type 1,
    then "ActiveMQ"): True, False, or None (too few to tell). A client's WireFormatInfo is a few
    hundred bytes, so its size's first two bytes are zero (a WireFormatInfo over 64 KiB is not
    one a client sends)."""
    if head[:2] != b"\x00\x00"[:len(head[:2])]:
        return False
    expected = bytes((DataType.WIREFORMAT_INFO,)) + MAGIC
    rest = head[4:4 + len(expected)]
    if rest != expected[:len(rest)]:
        return False
    return True if len(rest) == len(expected) else None
