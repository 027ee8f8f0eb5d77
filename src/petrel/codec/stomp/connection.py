"""The sans-IO STOMP connection: feed bytes, pull events, send frames.

Usage, on the server side::

    conn = StompConnection(Role.SERVER)
    conn.receive_data(chunk)          # b"" signals EOF
    while (event := conn.next_event()) is not NEED_DATA:
        if isinstance(event, Frame) and event.command in ("CONNECT", "STOMP"):
            version = conn.negotiate(event.headers.get("accept-version"))
            ...
    transport.write(conn.send(Frame("CONNECTED", {"version": version})))

Version negotiation. The server calls :meth:`StompConnection.negotiate` with
the CONNECT frame's ``accept-version``; from then on the version's header
escaping applies to both directions. A client (``Role.CLIENT``) negotiates by
itself: when ``next_event`` returns the CONNECTED frame, ``version`` is already
set from its ``version`` header (absent: 1.0), which must be one the client
offered in its CONNECT. Until a version is known, headers are read and written
as in STOMP 1.0 (no escaping); CONNECT, STOMP and CONNECTED are never escaped.

Errors. ``next_event`` raises ``RemoteProtocolError`` when the peer breaks the
protocol; the connection then stays failed (every later ``next_event`` raises
again, received data is dropped) but ``send`` still works so the server can
write an ERROR frame. ``send`` raises ``LocalProtocolError`` for a frame this
side may not send now or cannot encode, and leaves the state unchanged.

At EOF (``receive_data(b"")``) ``next_event`` returns ``NEED_DATA`` once the
buffer is drained, or raises if it stopped in the middle of a frame; see
:attr:`StompConnection.they_closed`.
"""

from __future__ import annotations

from ..errors import LocalProtocolError, RemoteProtocolError
from .escaping import ESCAPING, NO_ESCAPING
from .frames import HEARTBEAT, NEED_DATA, VERSIONS, Frame, Heartbeat
from .heartbeat import format_heartbeat, negotiate_heartbeat, parse_heartbeat
from .parser import FrameParser
from .state import ConnectionState, Phase, Role
from .writer import HEARTBEAT_BYTES, serialize, serialize_head

__all__ = [
    "StompConnection",
    "Role",
    "Phase",
    "Frame",
    "Heartbeat",
    "HEARTBEAT",
    "NEED_DATA",
    "parse_heartbeat",
    "format_heartbeat",
    "negotiate_heartbeat",
    "parse_accept_version",
]

DEFAULT_MAX_FRAME_SIZE = 10 * 1024 * 1024
DEFAULT_MAX_HEADERS = 1000
DEFAULT_MAX_HEADER_LENGTH = 64 * 1024


def parse_accept_version(value: str | None) -> tuple[str, ...]:
    """The versions listed in an ``accept-version`` header; absent means 1.0 only."""
    if value is None:
        return ("1.0",)
    return tuple(v for v in (part.strip(" \t") for part in value.split(",")) if v)


class StompConnection:
    """One end of a STOMP connection, without any I/O.

    A received frame moves the connection's state as soon as its headers are
    parsed (so a frame refused by the state table is refused before its body
    is read); ``next_event`` returns it once its body is complete.
    """

    def __init__(
        self,
        role: Role = Role.SERVER,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_headers: int = DEFAULT_MAX_HEADERS,
        max_header_length: int = DEFAULT_MAX_HEADER_LENGTH,
        stream_threshold: int | None = None,
    ) -> None:
        """``stream_threshold``: bodies longer than this many bytes arrive as
        ``FrameHeader``, ``BodyChunk``... , ``FrameEnd`` instead of one ``Frame``
        (``None``: never)."""
        if max_frame_size < 1 or max_headers < 0 or max_header_length < 1:
            raise ValueError("STOMP limits must be positive")
        if stream_threshold is not None and stream_threshold < 0:
            raise ValueError("stream_threshold must be >= 0")
        self.role = role
        #: The negotiated version, ``None`` until then: "1.0", "1.1" or "1.2".
        self.version: str | None = None
        self._state = state = ConnectionState(role)
        self._parser = parser = FrameParser(
            max_frame_size=max_frame_size,
            max_headers=max_headers,
            max_header_length=max_header_length,
            on_frame=self._on_frame,
            check_command=state.check_receive,
            stream_threshold=stream_threshold,
        )
        self._escaping = NO_ESCAPING
        self._offered: tuple[str, ...] = ()
        # The parser keeps the error state itself, so ``next_event`` can be its
        # bound method: no wrapper call per event on the hot path.
        self.next_event = parser.next_event  # type: ignore[method-assign]

    # -- state ---------------------------------------------------------------

    @property
    def our_phase(self) -> Phase:
        """Where the frames we send are: IDLE, CONNECTING, OPEN or CLOSED."""
        return self._state.ours

    @property
    def their_phase(self) -> Phase:
        """Where the frames the peer sends are."""
        return self._state.theirs

    @property
    def they_closed(self) -> bool:
        """True once ``receive_data(b"")`` reported EOF."""
        return self._parser.eof

    @property
    def error(self) -> RemoteProtocolError | None:
        """The error that failed this connection, if any."""
        return self._parser.error

    @property
    def buffered_bytes(self) -> int:
        """Received bytes not yet returned as events."""
        return len(self._parser.buf)

    # -- receiving -----------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes read from the peer; ``b""`` means the peer closed (EOF).

        Call :meth:`next_event` until ``NEED_DATA`` after each call: the size
        limits are checked there, so that keeps the buffer bounded.
        """
        parser = self._parser
        if not data:
            parser.eof = True
        elif parser.eof:
            raise LocalProtocolError("received data after EOF")
        else:
            parser.feed(data)

    def next_event(self) -> Frame | Heartbeat | type[NEED_DATA]:
        """The next frame or heart-beat, or ``NEED_DATA``.

        Raises ``RemoteProtocolError`` if the peer broke the protocol; the
        connection is failed from then on and raises again on every call.
        (Replaced per instance by the parser's own method, see ``__init__``.)
        """
        return self._parser.next_event()

    def _on_frame(self, command: str, headers: dict[str, str]) -> None:
        state = self._state
        state.receive(command)
        self._parser.steady = state.steady_receive
        if command == "CONNECTED":
            version = headers.get("version", "1.0").strip(" \t")
            if version not in VERSIONS or version not in self._offered:
                raise RemoteProtocolError(
                    f"server chose STOMP version {version[:20]!r}, not one we offered"
                    f" ({','.join(self._offered)})"
                )
            self._set_version(version)

    # -- negotiation ---------------------------------------------------------

    def negotiate(self, accept_version: str | None) -> str | None:
        """Pick the highest version both sides speak, from CONNECT's ``accept-version``.

        An absent header (``None``) means 1.0. Sets and returns :attr:`version`,
        or returns ``None`` (leaving ``version`` alone) if there is no common
        version; the server should then send ERROR with a ``version`` header
        listing :data:`~petrel.codec.stomp.frames.VERSIONS`.
        """
        offered = parse_accept_version(accept_version)
        for version in reversed(VERSIONS):
            if version in offered:
                self._set_version(version)
                return version
        return None

    def _set_version(self, version: str) -> None:
        self.version = version
        self._escaping = self._parser.escaping = ESCAPING[version]

    # -- sending ---------------------------------------------------------------

    def send(self, frame: Frame) -> bytes:
        """The bytes to write for ``frame``.

        Raises ``LocalProtocolError`` (state unchanged) if this side may not
        send the frame now or it cannot be encoded in the current version. A
        server's CONNECTED gets the negotiated ``version`` header if it has none.
        """
        command = frame.command
        phase = self._state.check_send(command)
        if command == "CONNECTED":
            frame = self._prepare_connected(frame)
        data = serialize(frame, self._escaping)
        self._state.sent(command, phase)
        if command == "CONNECTED" and self.version is None:
            self._set_version(frame.headers.get("version", "1.0"))
        elif command == "CONNECT" or command == "STOMP":
            self._parser.steady = self._state.steady_receive
            self._offered = tuple(
                v for v in parse_accept_version(frame.headers.get("accept-version"))
                if v in VERSIONS
            )
        return data

    def send_head(self, frame: Frame, length: int) -> bytes:
        """The bytes of ``frame`` (headers only) announcing a ``length``-byte body.

        For a body streamed from elsewhere: write these, then exactly ``length``
        body bytes, then :data:`~petrel.codec.stomp.writer.BODY_END`. Same state
        rules as :meth:`send`; CONNECT, STOMP and CONNECTED cannot be streamed.
        """
        command = frame.command
        phase = self._state.check_send(command)
        data = serialize_head(frame, self._escaping, length)
        self._state.sent(command, phase)
        return data

    def _prepare_connected(self, frame: Frame) -> Frame:
        chosen = frame.headers.get("version")
        if self.version is None:
            if chosen is not None and chosen not in VERSIONS:
                raise LocalProtocolError(f"unsupported STOMP version {chosen!r} in CONNECTED")
            return frame
        if chosen is None:
            return Frame(frame.command, {**frame.headers, "version": self.version}, frame.body)
        if chosen != self.version:
            raise LocalProtocolError(
                f"CONNECTED says version {chosen!r} but {self.version!r} was negotiated"
            )
        return frame

    def send_heartbeat(self) -> bytes:
        """The bytes of one heart-beat (an EOL)."""
        return HEARTBEAT_BYTES

    def __repr__(self) -> str:
        return (
            f"<StompConnection {self.role.value} version={self.version} "
            f"ours={self._state.ours.value} theirs={self._state.theirs.value}"
            f"{' failed' if self._parser.error else ''}>"
        )
