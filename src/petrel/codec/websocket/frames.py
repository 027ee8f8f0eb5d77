"""WebSocket frames (RFC 6455 section 5), the server's side, sans-IO.

`FrameDecoder` reads what a client sends: `receive_data(bytes)`, then `next_event()` until it
returns `NEED_DATA`. A data message's payload streams out as `Data` pieces as soon as its bytes
arrive (unmasked; a text message's UTF-8 checked as it goes), so once its events are read the
decoder holds at most part of one frame header or one control frame (125 bytes), however large
a message is: the size limits are those of the protocol carried inside. Control frames come out whole as `Ping`, `Pong` and `Close`.
Anything RFC 6455 forbids (an unmasked client frame, reserved bits without an extension, a
continuation without a message, a fragmented or long control frame, invalid UTF-8 in a text
message, a bad close code) raises `FrameError`, whose `code` is the close code to answer with.

`frame` and `frame_header` encode the server's (unmasked) frames; `close_payload` a Close's body.
No extension (permessage-deflate) is ever negotiated.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from enum import IntEnum

from petrel.codec.buffer import Buffer
from petrel.codec.errors import RemoteProtocolError

__all__ = ["NEED_DATA", "Close", "CloseCode", "Data", "FrameDecoder", "FrameError", "Opcode", "Ping", "Pong",
           "close_payload", "frame", "frame_header", "unmask"]

NEED_DATA = object()  # next_event: no whole event in what was received
MAX_CONTROL_PAYLOAD = 125


class Opcode(IntEnum):
    CONTINUATION = 0x0
    TEXT = 0x1
    BINARY = 0x2
    CLOSE = 0x8
    PING = 0x9
    PONG = 0xA


class CloseCode(IntEnum):
    NORMAL_CLOSURE = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    UNSUPPORTED_DATA = 1003
    NO_STATUS_RCVD = 1005  # never sent: a Close without a code
    INVALID_FRAME_PAYLOAD_DATA = 1007
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011


# Close codes a peer may send (RFC 6455 7.4.1 and the IANA registry; 3000-4999 are applications')
_VALID_CLOSE = frozenset((1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014))


class FrameError(RemoteProtocolError):
    """The client broke RFC 6455: close the connection with `code`."""

    def __init__(self, message: str, code: int = CloseCode.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = int(code)


@dataclass(frozen=True, slots=True)
class Data:
    """A piece of a data message's payload; `end` on the message's last piece."""

    payload: bytes
    text: bool
    end: bool


@dataclass(frozen=True, slots=True)
class Ping:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Close:
    code: int | None  # None: the Close carried no code (1005)
    reason: str


def unmask(data: bytes, mask: bytes, offset: int = 0) -> bytes:
    """`data` XOR the 4-byte `mask`, `data` starting `offset` bytes into the frame's payload."""
    n = len(data)
    if not n:
        return b""
    shift = offset & 3
    if shift:
        mask = mask[shift:] + mask[:shift]
    key = (mask * ((n >> 2) + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def frame_header(opcode: int, length: int, *, fin: bool = True) -> bytes:
    """The header of an unmasked (server) frame of `length` payload bytes."""
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        return bytes((first, length))
    if length < 1 << 16:
        return bytes((first, 126)) + length.to_bytes(2, "big")
    return bytes((first, 127)) + length.to_bytes(8, "big")


def frame(opcode: int, payload: bytes = b"", *, fin: bool = True) -> bytes:
    return frame_header(opcode, len(payload), fin=fin) + payload


def close_payload(code: int, reason: str = "") -> bytes:
    """A Close frame's body: the code, then the reason cut to fit 125 bytes as whole characters."""
    raw = reason.encode("utf-8")[:MAX_CONTROL_PAYLOAD - 2].decode("utf-8", "ignore").encode("utf-8")
    return int(code).to_bytes(2, "big") + raw


class FrameDecoder:
    """Frames from a client (masked, as RFC 6455 requires), as events."""

    def __init__(self) -> None:
        self._buf = Buffer()
        self._opcode = -1  # the current frame's; -1 between frames
        self._fin = False
        self._mask = b""
        self._remaining = 0  # payload bytes of the current frame still to come
        self._offset = 0  # payload bytes of the current frame already read
        self._message: Opcode | None = None  # the data message under way (TEXT or BINARY)
        self._utf8 = None  # its incremental UTF-8 check, for a text message
        self.closed = False  # a Close came: nothing after it is read

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def receive_data(self, data: bytes) -> None:
        if not self.closed:
            self._buf.feed(data)

    def next_event(self):
        """The next event (`Data`, `Ping`, `Pong`, `Close`) or `NEED_DATA`; raises `FrameError`."""
        while not self.closed:
            if self._opcode < 0 and not self._read_header():
                return NEED_DATA
            if self._opcode >= Opcode.CLOSE:
                return self._control()
            event = self._data()
            if event is not None:
                return event
            if self._opcode >= 0:
                return NEED_DATA
        return NEED_DATA

    # -- frames -----------------------------------------------------------------------------------

    def _read_header(self) -> bool:
        buf = self._buf
        data, pos = buf.data, buf.pos
        avail = len(data) - pos
        if avail < 2:
            return False
        first, second = data[pos], data[pos + 1]
        length = second & 0x7F
        size = 2 if length < 126 else 4 if length == 126 else 10
        masked = second & 0x80
        if masked:
            size += 4
        if avail < size:
            return False
        if length == 126:
            length = int.from_bytes(data[pos + 2:pos + 4], "big")
        elif length == 127:
            length = int.from_bytes(data[pos + 2:pos + 10], "big")
        mask = bytes(data[pos + size - 4:pos + size]) if masked else b""
        buf.consume_to(pos + size)
        fin, opcode = bool(first & 0x80), first & 0x0F
        if first & 0x70:
            raise FrameError("reserved bits set, but no extension was negotiated")
        if opcode not in Opcode._value2member_map_:
            raise FrameError(f"unknown opcode {opcode:#x}")
        if not masked:
            raise FrameError("a client's frames must be masked")
        if length >> 63:
            raise FrameError("payload length over 2**63")
        if opcode >= Opcode.CLOSE:
            if not fin:
                raise FrameError("a fragmented control frame")
            if length > MAX_CONTROL_PAYLOAD:
                raise FrameError(f"a control frame of {length} bytes (at most {MAX_CONTROL_PAYLOAD})")
        elif opcode == Opcode.CONTINUATION:
            if self._message is None:
                raise FrameError("a continuation frame with no message to continue")
        elif self._message is not None:
            raise FrameError("a new message began before the last one ended")
        else:
            self._message = Opcode(opcode)
            self._utf8 = None  # made at the message's first byte over 0x7f
        self._opcode, self._fin, self._mask, self._remaining, self._offset = opcode, fin, mask, length, 0
        return True

    def _data(self) -> Data | None:
        """The payload bytes of the current data frame received so far (None: none yet, or the
        frame ended empty without ending its message)."""
        buf = self._buf
        pos = buf.pos
        end_at = min(pos + self._remaining, len(buf.data))
        chunk = bytes(buf.data[pos:end_at])
        buf.consume_to(end_at)
        if self._remaining and not chunk:
            return None
        payload = unmask(chunk, self._mask, self._offset)
        self._offset += len(chunk)
        self._remaining -= len(chunk)
        end = self._fin and not self._remaining
        text = self._message == Opcode.TEXT
        if text and (self._utf8 is not None or not payload.isascii()):
            # (ASCII before the first other byte leaves no character unfinished)
            if self._utf8 is None:
                self._utf8 = codecs.getincrementaldecoder("utf-8")()
            try:
                self._utf8.decode(payload, final=end)
            except UnicodeDecodeError:
                raise FrameError("a text message that is not UTF-8", CloseCode.INVALID_FRAME_PAYLOAD_DATA) from None
        if not self._remaining:
            self._opcode = -1
            if end:
                self._message = self._utf8 = None
        if not payload and not end:
            return None
        return Data(payload, text, end)

    def _control(self):
        raw = self._buf.consume_exactly(self._remaining)
        if raw is None:
            self._buf.rollback()
            return NEED_DATA
        self._buf.commit()
        opcode, self._opcode = self._opcode, -1
        payload = unmask(raw, self._mask)
        if opcode == Opcode.PING:
            return Ping(payload)
        if opcode == Opcode.PONG:
            return Pong(payload)
        self.closed = True
        if not payload:
            return Close(None, "")
        if len(payload) == 1:
            raise FrameError("a Close frame with a 1-byte body")
        code = int.from_bytes(payload[:2], "big")
        if code not in _VALID_CLOSE and not 3000 <= code <= 4999:
            raise FrameError(f"close code {code} is not one a peer may send")
        try:
            reason = payload[2:].decode("utf-8")
        except UnicodeDecodeError:
            raise FrameError("a close reason that is not UTF-8", CloseCode.INVALID_FRAME_PAYLOAD_DATA) from None
        return Close(code, reason)
