"""The sans-IO AMQP 1.0 connection: feed bytes, pull events, send performatives.

Usage, on the server side::

    conn = AmqpConnection(Role.SERVER)
    conn.receive_data(chunk)
    while (event := conn.next_event()) is not NEED_DATA:
        if isinstance(event, ProtocolHeader):
            transport.write(conn.send_header(event.protocol_id))
        elif isinstance(event, Frame):
            ...  # event.performative: Open, Begin, SaslInit...
    transport.write(conn.send(0, Open(container_id="petrel", max_frame_size=65536)))

The connection tracks the phases the specification orders: a protocol header, then (SASL)
sasl frames until the outcome and a second header, then AMQP frames: open first, close last.
It learns the peer's max-frame-size from its open and splits a transfer whose payload does not
fit over several frames (``more``); received transfers of one delivery are joined into one
:class:`Frame` event (up to ``max_message_size`` bytes).

``next_event`` raises :class:`~.errors.AmqpError` (a ``RemoteProtocolError`` carrying the AMQP
condition) when the peer breaks the protocol; the connection is failed from then on, but
``send`` still works so that a close with the error can go out.
"""

from __future__ import annotations

import dataclasses

from ..buffer import Buffer
from ..roles import Role
from .composite import Composite, decode_composite, from_described
from .errors import (
    DECODE_ERROR, FRAMING_ERROR, ILLEGAL_STATE, MESSAGE_SIZE_EXCEEDED, NOT_IMPLEMENTED, AmqpError,
    AmqpLocalError,
)
from .frames import (
    AMQP, FRAME_AMQP, FRAME_HEADER, FRAME_SASL, MIN_MAX_FRAME_SIZE, NEED_DATA, SASL, Empty, Frame,
    ProtocolHeader, protocol_header,
)
from .performatives import PERFORMATIVES, SASL_FRAMES, Open, Transfer
from .state import (
    AMQP_HEADER, CLOSED, HEADER, OPEN, SASL_HEADER, SASL_OUTCOME, SASL_PHASE, event_of, transition,
)
from .types import Described, UInt, decode_one, encode

__all__ = ["AmqpConnection", "Role", "DEFAULT_MAX_FRAME_SIZE", "DEFAULT_MAX_MESSAGE_SIZE"]

DEFAULT_MAX_FRAME_SIZE = 1024 * 1024
DEFAULT_MAX_MESSAGE_SIZE = 100 * 1024 * 1024

_AMQP_TYPES = frozenset(PERFORMATIVES)
_TRANSFER_LIST8 = b"\x00\x53\x14\xc0"  # a transfer's descriptor, then a list8 (its size and count follow)


def _uint(v: int) -> bytes:
    """A uint's compact encoding (0 <= v < 2**32)."""
    if v == 0:
        return b"\x43"
    if v < 256:
        return bytes((0x52, v))
    return b"\x70" + v.to_bytes(4, "big")
_SASL_TYPES = frozenset(SASL_FRAMES)



class AmqpConnection:
    """One end of an AMQP 1.0 connection, without any I/O."""

    def __init__(self, role: Role = Role.SERVER, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        if max_frame_size < MIN_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be at least {MIN_MAX_FRAME_SIZE}")
        self.role = role
        self.max_frame_size = max_frame_size  # what we accept
        self.max_message_size = max_message_size
        self.peer_max_frame_size = MIN_MAX_FRAME_SIZE  # what we may send, from the peer's open
        self.peer_open: Open | None = None
        self._buf = Buffer()
        self._theirs = HEADER
        self._ours = HEADER
        self._sasl = False  # the peer's frames are SASL frames
        self._error: AmqpError | None = None
        self._eof = False
        self._partial: dict[tuple[int, int], tuple[Transfer, list[bytes], int]] = {}

    # -- state ---------------------------------------------------------------------------------

    @property
    def their_phase(self) -> str:
        return self._theirs

    @property
    def our_phase(self) -> str:
        return self._ours

    @property
    def error(self) -> AmqpError | None:
        return self._error

    @property
    def they_closed(self) -> bool:
        return self._eof

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) + sum(size for _, _, size in self._partial.values())

    # -- receiving -----------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes read from the peer; ``b""`` means the peer closed (EOF)."""
        if not data:
            self._eof = True
        elif self._eof:
            raise AmqpLocalError("received data after EOF")
        elif self._error is None:
            self._buf.feed(data)

    def next_event(self) -> ProtocolHeader | Frame | Empty | type[NEED_DATA]:
        if self._error is not None:
            raise self._error
        try:
            while True:
                event = self._next()
                if event is not False:
                    return event
        except AmqpError as exc:
            self._fail(exc)
            raise
        except (ValueError, TypeError, OverflowError) as exc:  # a value our types refuse
            error = AmqpError(DECODE_ERROR, f"malformed frame: {exc}")
            self._fail(error)
            raise error from None

    def _fail(self, exc: AmqpError) -> None:
        self._error = exc
        self._buf.clear()
        self._partial.clear()

    def _next(self):
        buf = self._buf
        if self._theirs == HEADER:
            head = buf.consume_exactly(8)
            if head is None:
                return self._need()
            buf.commit()
            if head not in (protocol_header(AMQP), protocol_header(SASL)):
                raise AmqpError(NOT_IMPLEMENTED, f"unsupported protocol header {head!r}")
            self._sasl = head[4] == SASL
            self._theirs = transition(HEADER, SASL_HEADER if self._sasl else AMQP_HEADER, "header")
            return ProtocolHeader(head[4])
        if self._theirs == SASL_PHASE and self.role is Role.SERVER and buf.peek(4) == b"AMQP":
            self._expect_header_after_sasl()  # a client that sends its AMQP header right behind SASL
            return False
        if self._theirs == CLOSED:
            if len(buf):
                raise AmqpError(ILLEGAL_STATE, "bytes after close")
            return NEED_DATA
        head = buf.consume_exactly(8)
        if head is None:
            return self._need()
        size, doff, ftype, channel = FRAME_HEADER.unpack(head)
        if size < 8 or doff < 2 or doff * 4 > size:
            raise AmqpError(FRAMING_ERROR, f"malformed frame header (size {size}, doff {doff})")
        if size > self.max_frame_size:
            raise AmqpError(FRAMING_ERROR, f"frame of {size} bytes is over max-frame-size {self.max_frame_size}")
        body = buf.consume_exactly(size - 8)
        if body is None:
            buf.rollback()
            return self._need()
        buf.commit()
        start = doff * 4 - 8
        if start == len(body):
            return Empty(channel)
        want = FRAME_SASL if self._sasl else FRAME_AMQP
        if ftype != want:
            raise AmqpError(FRAMING_ERROR, f"frame type {ftype} where {'SASL' if self._sasl else 'AMQP'} frames go")
        fast = decode_composite(body, start, len(body))
        if fast is not None:
            performative, pos = fast
        else:
            described, pos = decode_one(body, start)
            if type(described) is not Described:
                raise AmqpError(DECODE_ERROR, "a frame body must start with a described performative")
            performative = from_described(described)
        allowed = _SASL_TYPES if self._sasl else _AMQP_TYPES
        if type(performative) not in allowed:
            raise AmqpError(DECODE_ERROR, f"{type(performative).__name__} is not a {'SASL' if self._sasl else 'AMQP'} frame")
        payload = bytes(body[pos:])
        if payload and type(performative) is not Transfer:
            raise AmqpError(DECODE_ERROR, f"{type(performative).__name__} frame with a payload")
        return self._received(channel, performative, payload)

    def _need(self):
        if self._eof and len(self._buf):
            raise AmqpError(FRAMING_ERROR, "connection closed in the middle of a frame")
        return NEED_DATA

    def _received(self, channel: int, p, payload: bytes):
        kind = type(p)
        if kind is Transfer and self._theirs == OPEN and not p.more and not self._partial:
            return Frame(channel, p, payload)  # (the common case of `_transfer`: open stays open)
        event = event_of(kind)
        try:
            self._theirs = transition(self._theirs, event, kind.__name__)
        except ValueError as exc:
            raise AmqpError(ILLEGAL_STATE, str(exc)) from None
        if event == SASL_OUTCOME:
            self._expect_header_after_sasl()
        elif kind is Open:
            self.peer_open = p
            self.peer_max_frame_size = max(MIN_MAX_FRAME_SIZE, min(int(p.max_frame_size), 0xFFFFFFFF))
        elif kind is Transfer:
            return self._transfer(channel, p, payload)
        return Frame(channel, p)

    def _expect_header_after_sasl(self) -> None:
        """The SASL exchange ends with the outcome; an AMQP header follows (both directions)."""
        self._theirs = HEADER
        self._sasl = False
        if self.role is Role.CLIENT:  # the client answers the outcome with its AMQP header
            self._ours = HEADER

    def _transfer(self, channel: int, t, payload: bytes):
        key = (channel, int(t.handle))
        partial = self._partial.get(key)
        if partial is None and not t.more:
            return Frame(channel, t, payload)
        if partial is None:
            first, chunks, size = t, [], 0
        else:
            first, chunks, size = partial
            if t.delivery_id is not None and t.delivery_id != first.delivery_id:
                raise AmqpError(ILLEGAL_STATE, f"delivery {t.delivery_id} began before delivery "
                                               f"{first.delivery_id} on handle {t.handle} was complete")
            first = dataclasses.replace(first, settled=first.settled or t.settled,
                                        state=t.state if t.state is not None else first.state)
        size += len(payload)
        if size > self.max_message_size:
            raise AmqpError(MESSAGE_SIZE_EXCEEDED, f"message over {self.max_message_size} bytes")
        chunks.append(payload)
        if t.aborted:
            self._partial.pop(key, None)
            return Frame(channel, dataclasses.replace(first, more=False, aborted=True), b"", len(chunks))
        if t.more:
            self._partial[key] = (first, chunks, size)
            return False
        self._partial.pop(key, None)
        return Frame(channel, dataclasses.replace(first, more=False), b"".join(chunks), len(chunks))

    # -- sending ---------------------------------------------------------------------------------

    def send_header(self, protocol_id: int) -> bytes:
        """Our protocol header: ``AMQP`` (0) or ``SASL`` (3)."""
        if protocol_id not in (AMQP, SASL):
            raise AmqpLocalError(f"no protocol header {protocol_id}")
        try:
            self._ours = transition(self._ours, SASL_HEADER if protocol_id == SASL else AMQP_HEADER, "a header")
        except ValueError as exc:
            raise AmqpLocalError(f"cannot send protocol header {protocol_id}: {exc}") from None
        return protocol_header(protocol_id)

    def send(self, channel: int, performative: Composite, payload: bytes = b"") -> bytes:
        """The bytes of ``performative`` on ``channel`` (a transfer carries ``payload``, split over
        several frames if it does not fit in the peer's max-frame-size)."""
        kind = type(performative)
        if kind not in _SASL_TYPES and kind not in _AMQP_TYPES:
            raise AmqpLocalError(f"{kind.__name__} is neither a performative nor a SASL frame")
        try:
            after = transition(self._ours, event_of(kind), kind.__name__)
        except ValueError as exc:
            raise AmqpLocalError(f"cannot send {kind.__name__}: {exc}") from None
        body = encode(performative)
        self._ours = after
        if kind in _SASL_TYPES:
            return self._frame(FRAME_SASL, channel, body)
        if kind is Open:
            self.max_frame_size = max(MIN_MAX_FRAME_SIZE, min(int(performative.max_frame_size), self.max_frame_size))
        if kind is not Transfer or len(body) + len(payload) + 8 <= self.peer_max_frame_size:
            return self._frame(FRAME_AMQP, channel, body + payload)
        return self._split(channel, performative, payload)

    def send_transfer(self, channel: int, handle: int, delivery_id: int, settled: bool, payload: bytes) -> bytes:
        """The bytes of one delivery's transfer: ``send(channel, Transfer(handle, delivery_id,
        delivery_tag=<delivery_id in 4 bytes>, message_format=0, settled=settled or None), payload)``,
        encoded without building the performative (the hot path of every delivery)."""
        if self._ours != OPEN or not (0 <= handle <= 0xFFFFFFFF and 0 <= delivery_id <= 0xFFFFFFFF):
            return self.send(channel, Transfer(handle=UInt(handle), delivery_id=UInt(delivery_id),
                                               delivery_tag=delivery_id.to_bytes(4, "big"), message_format=0,
                                               settled=settled or None), payload)
        tag = delivery_id.to_bytes(4, "big")
        fields = b"".join((_uint(handle), _uint(delivery_id), b"\xa0\x04", tag, b"\x43\x41" if settled else b"\x43"))
        count = 5 if settled else 4
        size = len(fields) + 1  # the count's byte with the fields (list8: 0xc0 size count)
        if 8 + 5 + size + len(payload) > self.peer_max_frame_size:
            return self._split(channel, Transfer(handle=UInt(handle), delivery_id=UInt(delivery_id), delivery_tag=tag,
                                                 message_format=0, settled=settled or None), payload)
        head = FRAME_HEADER.pack(8 + 5 + size + len(payload), 2, FRAME_AMQP, channel)
        return b"".join((head, _TRANSFER_LIST8, bytes((size, count)), fields, payload))

    def _split(self, channel: int, t, payload: bytes) -> bytes:
        limit = self.peer_max_frame_size - 8
        frames = []
        first = True
        pos = 0
        while True:
            p = dataclasses.replace(t, more=True) if first else Transfer(handle=t.handle, more=True)
            body = encode(p)
            room = limit - len(body)
            if room <= 0:
                raise AmqpLocalError("max-frame-size too small for a transfer")
            last = pos + room >= len(payload)
            if last:
                p = dataclasses.replace(p, more=False) if first else Transfer(handle=t.handle, more=False, settled=t.settled)
                body = encode(p)
            frames.append(self._frame(FRAME_AMQP, channel, body + payload[pos:pos + room]))
            pos += room
            first = False
            if last:
                return b"".join(frames)

    def send_empty(self, channel: int = 0) -> bytes:
        """An empty frame (a heart-beat)."""
        return FRAME_HEADER.pack(8, 2, FRAME_AMQP, channel)

    @staticmethod
    def _frame(ftype: int, channel: int, body: bytes) -> bytes:
        return FRAME_HEADER.pack(8 + len(body), 2, ftype, channel) + body

    def __repr__(self) -> str:
        return f"<AmqpConnection {self.role.value} ours={self._ours} theirs={self._theirs}{' failed' if self._error else ''}>"
