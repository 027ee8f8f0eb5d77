"""The sans-IO CORE connection: feed bytes, pull events, send events.

On the server::

    conn = CoreConnection(Role.SERVER)
    conn.receive_data(chunk)               # b"" signals EOF
    while (event := conn.next_event()) is not NEED_DATA:
        if isinstance(event, Connect):
            version = conn.accept(event)   # None: no common version
            ...
    transport.write(conn.send(Connected(version=version, ...)))

A client's :meth:`CoreConnection.send` of its CONNECT writes the preamble
first; a server expects the preamble before the first frame. The version and
capabilities are agreed by :meth:`CoreConnection.accept` on the server and
checked when CONNECTED is received on the client; both ends then expose them
as :attr:`version` and :attr:`capabilities`.

Errors. ``next_event`` raises ``RemoteProtocolError`` when the peer breaks the
protocol (bad preamble, oversized or malformed frame, a frame not allowed
now); the connection then stays failed and raises again, but ``send`` still
works so an ERROR frame can go out. ``send`` raises ``LocalProtocolError`` for
a frame this side may not send now, leaving the state unchanged.
"""

from __future__ import annotations

import msgspec

from ..buffer import Buffer
from ..errors import LocalProtocolError, RemoteProtocolError
from .events import (
    EVENT_TYPES,
    Browsed,
    BrowseResult,
    Connect,
    Connected,
    Deliver,
    Event,
    Send,
)
from .frames import (
    CAPABILITIES,
    DEFAULT_MAX_FRAME_SIZE,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    NEED_DATA,
    PREAMBLE,
    PROTOCOL_VERSIONS,
    FrameType,
)
from .state import ConnectionState, Phase, Role

__all__ = ["CoreConnection", "encode_frame", "decode_payload"]

_encode = msgspec.msgpack.Encoder().encode
_unpack_header = HEADER.unpack_from
_pack_header = HEADER.pack
_SCALARS = frozenset({type(None), bool, int, float, str, bytes})
_DecodeErrors = (msgspec.DecodeError, msgspec.ValidationError)


def _decoders() -> dict[int, msgspec.msgpack.Decoder]:
    return {code: msgspec.msgpack.Decoder(cls) for code, cls in EVENT_TYPES.items()}


def _check_properties(props: dict) -> str | None:
    if type(props) is msgspec.Raw:  # a map the sender encoded itself (a server's cached DELIVER properties)
        return None
    for value in props.values():
        if type(value) not in _SCALARS:
            return f"message property values must be scalars, not {type(value).__name__}"
    return None


def _check_browse(event: BrowseResult) -> str | None:
    for message in event.messages:
        problem = _check_properties(message.properties)
        if problem:
            return problem
    return None


# Per frame type, a check of the event beyond what its types say: the problem, or None.
_CHECKS = {
    FrameType.SEND: lambda e: _check_properties(e.properties) if e.properties else None,
    FrameType.DELIVER: lambda e: _check_properties(e.properties) if e.properties else None,
    FrameType.BROWSE_RESULT: _check_browse,
}


def _encode_checked(event: Event) -> bytes:
    try:
        return _encode(event)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode {type(event).__name__.upper()}: {_line(exc)}") from None


def encode_frame(event: Event) -> bytes:
    """The bytes of one frame, without any state check."""
    payload = _encode(event)
    return _pack_header(len(payload) + 1, event.TYPE) + payload


def decode_payload(code: int, payload: bytes) -> Event:
    """Decode one frame's payload (``RemoteProtocolError`` if it is not a valid ``code`` frame)."""
    cls = EVENT_TYPES.get(code)
    if cls is None:
        raise RemoteProtocolError(f"unknown frame type {code:#x}")
    try:
        event = msgspec.msgpack.decode(payload, type=cls)
    except _DecodeErrors as exc:
        raise RemoteProtocolError(f"malformed {cls.__name__.upper()} frame: {_line(exc)}") from None
    check = _CHECKS.get(code)
    problem = check(event) if check is not None else None
    if problem:
        raise RemoteProtocolError(problem)
    return event


def _line(exc: Exception) -> str:
    return str(exc).replace("\r", " ").replace("\n", " ")[:200]


class CoreConnection:
    """One end of a CORE connection, without any I/O."""

    def __init__(
        self,
        role: Role = Role.SERVER,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        capabilities: tuple[str, ...] = CAPABILITIES,
        versions: tuple[int, ...] = PROTOCOL_VERSIONS,
    ) -> None:
        if max_frame_size < 16:
            raise ValueError("max_frame_size must be at least 16 bytes")
        self.role = role
        self.max_frame_size = max_frame_size
        self.offered_capabilities = tuple(capabilities)
        self.offered_versions = tuple(versions)
        #: Agreed protocol version (None until CONNECT/CONNECTED).
        self.version: int | None = None
        #: Agreed capabilities (both sides offered them).
        self.capabilities: frozenset[str] = frozenset()
        self._state = ConnectionState(role)
        self._buf = Buffer()
        self._decoders = _decoders()
        self._preamble_pending = role is Role.SERVER
        self._preamble_sent = False
        self._eof = False
        self.error: RemoteProtocolError | None = None

    # -- state ------------------------------------------------------------------------------

    @property
    def our_phase(self) -> Phase:
        return self._state.ours

    @property
    def their_phase(self) -> Phase:
        return self._state.theirs

    @property
    def they_closed(self) -> bool:
        """True once ``receive_data(b"")`` reported EOF."""
        return self._eof

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    # -- receiving ----------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes read from the peer; ``b""`` means EOF."""
        if not data:
            self._eof = True
        elif self._eof:
            raise LocalProtocolError("received data after EOF")
        elif self.error is None:
            self._buf.feed(data)

    def next_event(self) -> Event | type[NEED_DATA]:
        """The next event, or ``NEED_DATA``; ``RemoteProtocolError`` if the peer broke the protocol."""
        if self.error is not None:
            raise self.error
        buf = self._buf
        data = buf.data
        pos = buf.pos
        avail = len(data) - pos
        if self._preamble_pending:
            n = min(avail, len(PREAMBLE))
            if data[pos : pos + n] != PREAMBLE[:n]:
                if data[pos : pos + min(n, len(MAGIC))] != MAGIC[: min(n, len(MAGIC))]:
                    return self._fail("not a CORE connection (bad preamble)")
                return self._fail("unsupported CORE preamble version")
            if n < len(PREAMBLE):
                return self._need_data(avail)
            pos += len(PREAMBLE)
            buf.consume_to(pos)
            avail -= len(PREAMBLE)
            self._preamble_pending = False
        if avail < HEADER_SIZE:
            return self._need_data(avail)
        length, code = _unpack_header(data, pos)
        if length > self.max_frame_size:
            return self._fail(f"frame of {length} bytes is over the {self.max_frame_size}-byte limit")
        if length < 1:
            return self._fail("frame length must be at least 1")
        end = pos + 4 + length
        if end > len(data):
            return self._need_data(avail)
        decoder = self._decoders.get(code)
        if decoder is None:
            return self._fail(f"unknown frame type {code:#x}")
        try:
            self._state.receive(code)
        except RemoteProtocolError as exc:
            return self._fail(exc.message)
        try:
            event = decoder.decode(data[pos + HEADER_SIZE : end])
        except _DecodeErrors as exc:
            return self._fail(f"malformed {EVENT_TYPES[code].__name__.upper()} frame: {_line(exc)}")
        buf.consume_to(end)
        check = _CHECKS.get(code)
        if check is not None:
            problem = check(event)
            if problem:
                return self._fail(problem)
        if code == FrameType.CONNECTED:
            self._on_connected(event)
        return event

    def next_events(self) -> list[Event]:
        """Every whole event buffered, in order; empty when more data is needed.

        The batch form of :meth:`next_event` (one call per read, not per frame). If the peer
        broke the protocol after some good frames, those are returned and the error is
        raised by the next call.
        """
        if self.error is not None:
            raise self.error
        out: list[Event] = []
        state = self._state
        if state.theirs is Phase.OPEN and not self._preamble_pending:
            steady = state.open_receive
            buf = self._buf
            data = buf.data
            pos = buf.pos
            size = len(data)
            limit = self.max_frame_size
            decoders = self._decoders
            checks = _CHECKS
            append = out.append
            while size - pos >= HEADER_SIZE:
                length, code = _unpack_header(data, pos)
                end = pos + 4 + length
                if end > size or length > limit or length < 1 or code not in steady:
                    break
                try:
                    event = decoders[code].decode(data[pos + HEADER_SIZE : end])
                except _DecodeErrors:
                    break  # the slow path below reports it
                check = checks.get(code)
                if check is not None and check(event):
                    break
                append(event)
                pos = end
            buf.consume_to(pos)
        while True:
            try:
                event = self.next_event()
            except RemoteProtocolError:
                if out:
                    return out
                raise
            if event is NEED_DATA:
                return out
            out.append(event)

    def _need_data(self, avail: int) -> type[NEED_DATA]:
        if self._eof and avail:
            self._fail("connection closed in the middle of a frame")
        return NEED_DATA

    def _fail(self, message: str) -> type[NEED_DATA]:
        self.error = RemoteProtocolError(message)
        self._buf.clear()
        raise self.error

    def _on_connected(self, event: Connected) -> None:
        if event.version not in self.offered_versions:
            self._fail(f"server chose CORE version {event.version}, not one we offered")
        self.version = event.version
        self.capabilities = frozenset(event.capabilities) & frozenset(self.offered_capabilities)

    # -- negotiation ---------------------------------------------------------------------------

    def accept(self, connect: Connect) -> int | None:
        """Server side: agree the highest common version and the common capabilities.

        Returns the version, or None if there is none in common (answer with ERROR).
        """
        common = set(connect.versions) & set(self.offered_versions)
        if not common:
            return None
        self.version = max(common)
        self.capabilities = frozenset(connect.capabilities) & frozenset(self.offered_capabilities)
        return self.version

    # -- sending -------------------------------------------------------------------------------

    def send(self, event: Event) -> bytes:
        """The bytes of ``event``'s frame; ``LocalProtocolError`` if it may not be sent now."""
        code = event.TYPE
        state = self._state
        check = _CHECKS.get(code)
        if check is not None:
            problem = check(event)
            if problem:
                raise LocalProtocolError(problem)
        if state.ours is Phase.OPEN and code in state.open_send:
            payload = _encode_checked(event)
            return _pack_header(len(payload) + 1, code) + payload
        phase = state.check_send(code)
        if code == FrameType.CONNECTED and event.version not in self.offered_versions:
            raise LocalProtocolError(f"CONNECTED names version {event.version}, which this codec does not speak")
        payload = _encode_checked(event)
        data = _pack_header(len(payload) + 1, code) + payload
        state.sent(code, phase)
        if code == FrameType.CONNECT:
            data = PREAMBLE + data
        return data

    def send_many(self, events: list[Event]) -> bytes:
        """The bytes of several frames, in order (one buffer to write)."""
        return b"".join([self.send(e) for e in events])

    def __repr__(self) -> str:
        return (
            f"<CoreConnection {self.role.value} version={self.version} ours={self._state.ours.value} "
            f"theirs={self._state.theirs.value}{' failed' if self.error else ''}>"
        )


# Browsed is referenced by BrowseResult decoding; keep the name imported for readers.
_ = (Browsed, Deliver, Send)
