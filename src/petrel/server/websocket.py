"""STOMP, MQTT and AMQP over WebSocket: the ``ws_port`` acceptor (61614 by standard; wss with ssl_enabled).

A client opens ``ws://host:61614/stomp`` (or ``/mqtt``, ``/amqp``, ``/``) offering a sub-protocol:
``v12.stomp``, ``v11.stomp``, ``v10.stomp`` or ``stomp`` for STOMP, ``mqtt`` or ``mqttv3.1`` for
MQTT, ``amqp`` for AMQP 1.0 (`SUBPROTOCOLS`; a protocol is served while it is in the registry,
`petrel.server.protocols`). The broker answers with the first offer it speaks, in the client's
order, that fits the path; on ``/stomp``, ``/mqtt`` or ``/amqp`` a client offering none gets the
path's protocol (stomp.py offers none). No fitting offer, another path, or a request that is no
WebSocket handshake gets an HTTP error saying why, and the socket is closed; the broker serves
everyone else.

`WebSocket` is one object per socket. To the socket it is the asyncio protocol: it reads the HTTP
upgrade (`petrel.codec.websocket.handshake`), then frames (`FrameDecoder`). To the broker's
ordinary `Connection` it is the transport: each ``write`` becomes one WebSocket message (binary;
for STOMP a text message when the bytes are UTF-8), each piece of a received data message is a
``data_received``, and ``pause_reading`` stops reading the socket and delivering the messages
already read, so flow control is the TCP one. The `Connection` exists from the moment the socket
is accepted, so ``max_connections``, ``handshake_timeout`` (the HTTP upgrade included), the
unfinished-frame limits, logins, ``max_connections_per_user``, slow-client closes and the logs
are those of any TCP client of the broker. TLS is the broker's (`BrokerTls.create_server`).
"""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from petrel.codec.buffer import Buffer
from petrel.codec.websocket import (
    NEED_DATA,
    Close,
    CloseCode,
    Data,
    FrameDecoder,
    FrameError,
    HandshakeError,
    Opcode,
    Ping,
    Request,
    accept_response,
    check_upgrade,
    close_payload,
    frame,
    frame_header,
    parse_request,
    refusal_response,
)
from petrel.server import protocols
from petrel.server.connection import LINGER, Connection

if TYPE_CHECKING:
    from petrel.server.broker import Broker

__all__ = ["STANDARD_PORT", "SUBPROTOCOLS", "WebSocket", "choose"]

log = logging.getLogger("petrel.server.websocket")

#: ws_port when the setting is left unset on a broker whose all-protocols port is 61616.
STANDARD_PORT = 61614

#: WebSocket sub-protocol -> the registry's protocol that it carries.
SUBPROTOCOLS: dict[str, str] = {
    "v12.stomp": "stomp", "v11.stomp": "stomp", "v10.stomp": "stomp", "stomp": "stomp",
    "mqtt": "mqtt", "mqttv3.1": "mqtt",
    "amqp": "amqp",  # the OASIS AMQP WebSocket Binding
}
#: Protocols whose WebSocket messages are text when they can be (STOMP is a text protocol;
#: MQTT and AMQP over WebSocket are binary by their standards).
TEXT_PROTOCOLS = frozenset({"stomp"})
#: Paths that name a protocol; "/" (or an empty path) leaves the choice to the sub-protocol.
PATHS = {"/stomp": "stomp", "/mqtt": "mqtt", "/amqp": "amqp"}

# The socket's phases.
HANDSHAKE, OPEN, CLOSING, CLOSED = "handshake", "open", "closing", "closed"


def choose(request: Request, registered: tuple[str, ...] | None = None) -> tuple[str, str | None]:
    """(protocol, sub-protocol to answer with) for an upgrade request, or a `HandshakeError`."""
    served = protocols.names() if registered is None else registered
    spoken = sorted({sub for sub, name in SUBPROTOCOLS.items() if name in served})
    path = request.path.rstrip("/") or "/"
    wanted = PATHS.get(path)
    if path != "/" and (wanted is None or wanted not in served):
        paths = ", ".join(p for p, name in PATHS.items() if name in served)
        raise HandshakeError(HTTPStatus.NOT_FOUND,
                             f"no endpoint {request.path[:100]!r}; this port serves {paths} and /")
    offers = request.subprotocols
    for offer in offers:
        name = SUBPROTOCOLS.get(offer.lower())
        if name in served and (wanted is None or name == wanted):
            return name, offer
    if not offers and wanted is not None:
        return wanted, None  # the path says it
    if not offers:
        paths = " or ".join(p for p, name in PATHS.items() if name in served)
        raise HandshakeError(HTTPStatus.BAD_REQUEST, "no sub-protocol (Sec-WebSocket-Protocol) offered; this port "
                             f"speaks {', '.join(spoken)} (or open {paths})")
    fits = [sub for sub in spoken if wanted is None or SUBPROTOCOLS[sub] == wanted]
    raise HandshakeError(HTTPStatus.BAD_REQUEST, f"no sub-protocol this endpoint speaks in {', '.join(offers)[:200]}; "
                         f"it speaks {', '.join(fits)}")


class WebSocket(asyncio.Protocol):
    """One WebSocket client: the socket's protocol, and its `Connection`'s transport."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.socket: asyncio.Transport | None = None
        self.conn = Connection(broker, ())  # its protocol is known once the upgrade names it
        self.phase = HANDSHAKE
        self.protocol: str | None = None
        self.subprotocol: str | None = None
        self._text = False
        self._request = Buffer()
        self._frames = FrameDecoder()
        self._paused = False  # the Connection paused reading
        self._close_sent = False
        self._failed = False  # a protocol error: nothing more is read (RFC 6455 7.1.7)
        self._linger: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    # -- the socket's side (asyncio.Protocol) ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.socket = transport  # type: ignore[assignment]
        self.conn.connection_made(self)  # max_connections, TCP keepalive, the handshake's clock

    def data_received(self, data: bytes) -> None:
        try:
            if self.phase == HANDSHAKE:
                self._upgrade(data)
            elif self.phase != CLOSED and not self._failed:
                self._frames.receive_data(data)
                self._deliver()
        except Exception:  # a bug here ends this client only
            log.exception("closing WebSocket client %s after an error", self.conn.peer,
                          extra={"event": "websocket.error"})
            self.abort()

    def eof_received(self) -> bool:
        return False  # the client is gone: close

    def connection_lost(self, exc: Exception | None) -> None:
        self.phase = CLOSED
        if self._linger is not None:
            self._linger.cancel()
        self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()

    # -- the opening handshake ----------------------------------------------------------------------

    def _upgrade(self, data: bytes) -> None:
        if self.conn.closed:
            return
        buf = self._request
        buf.feed(data)
        try:
            request = parse_request(buf)
            if request is None:
                return
            key = check_upgrade(request)
            self.protocol, self.subprotocol = choose(request)
        except HandshakeError as exc:
            log.info("closing %s: WebSocket handshake refused (%d %s): %s", self.conn.peer, exc.status,
                     HTTPStatus(exc.status).phrase, exc.message, extra={"event": "websocket.refused"})
            self.socket.write(refusal_response(exc.status, exc.message, exc.headers))
            self.conn.close()
            return
        self.socket.write(accept_response(key, self.subprotocol))
        self.phase = OPEN
        self._text = self.protocol in TEXT_PROTOCOLS
        self.conn.protocols = (self.protocol,)  # the Connection detects it from the first bytes as usual
        log.debug("WebSocket client %s: %s (sub-protocol %s)", self.conn.peer, self.protocol, self.subprotocol)
        rest = buf.consume_at_most(len(buf))
        self._request = Buffer()
        if rest:
            self._frames.receive_data(rest)
            self._deliver()

    # -- frames in ------------------------------------------------------------------------------------

    def _deliver(self) -> None:
        """Hand the Connection what has been read, while it reads (see `pause_reading`): the
        data of every whole or partial message read so far in one `data_received`, as a TCP
        read hands over every frame it holds."""
        frames = self._frames
        pending: list[bytes] = []
        while not self._paused and self.phase in (OPEN, CLOSING):
            try:
                event = frames.next_event()
            except FrameError as exc:
                self._hand_over(pending)
                self._failed = True  # what follows is not read; the socket ends at the linger
                if self.phase == OPEN:
                    log.info("closing %s: WebSocket protocol error: %s", self.conn.peer, exc.message,
                             extra={"event": "websocket.protocol_error"})
                    self._close(exc.code, exc.message)
                return
            if event is NEED_DATA:
                break
            if type(event) is Data:
                if event.payload and self.phase == OPEN:
                    pending.append(event.payload)
                continue
            self._hand_over(pending)
            if isinstance(event, Ping):
                if not self._close_sent:
                    self.socket.write(frame(Opcode.PONG, event.payload))
            elif isinstance(event, Close):
                # the client's close: answer it (unless this is the answer to ours), then end the socket
                if not self._close_sent:
                    self._close_sent = True
                    code = CloseCode.NORMAL_CLOSURE if event.code is None else event.code
                    self.socket.write(frame(Opcode.CLOSE, close_payload(code)))
                self.phase = CLOSED
                self.socket.close()
                return
        self._hand_over(pending)

    def _hand_over(self, pending: list[bytes]) -> None:
        if pending:
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            pending.clear()
            if self.phase == OPEN:
                self.conn.data_received(data)

    # -- the Connection's transport -------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.phase != OPEN or self._close_sent or not data:
            return
        if not isinstance(data, bytes):
            data = bytes(data)
        opcode = Opcode.BINARY
        if self._text and (data.isascii() or _utf8(data)):
            opcode = Opcode.TEXT
        if len(data) < 1 << 16:
            self.socket.write(frame_header(opcode, len(data)) + data)
        else:  # no copy of a large write
            self.socket.write(frame_header(opcode, len(data)))
            self.socket.write(data)

    def writelines(self, items) -> None:
        for item in items:
            self.write(item)

    def can_write_eof(self) -> bool:
        return False  # the Connection closes with close(): a Close frame

    def write_eof(self) -> None:
        raise NotImplementedError("a WebSocket ends with a Close frame")

    def close(self) -> None:
        """The Connection closes: a Close frame, then the client has LINGER seconds to answer it
        while the broker already forgets the connection (as a TCP close lingers)."""
        if self.phase == OPEN:
            stopping = getattr(self.broker, "_stopping", False)  # the broker is going away
            self._close(CloseCode.GOING_AWAY if stopping else CloseCode.NORMAL_CLOSURE, "")
        elif self.phase == HANDSHAKE:
            self.phase = CLOSED
            if self.socket is not None:
                self.socket.close()

    def _close(self, code: int, reason: str) -> None:
        if self.phase != OPEN:
            return
        self.phase = CLOSING
        self._close_sent = True
        self.socket.write(frame(Opcode.CLOSE, close_payload(code, reason)))
        self._linger = self._loop.call_later(LINGER, self.abort)
        if self._paused:  # read on, for the client's Close
            self._paused = False
            self.socket.resume_reading()
        self._loop.call_soon(self.conn.connection_lost, None)  # the broker forgets it now (once)

    def abort(self) -> None:
        self.phase = CLOSED
        if self.socket is not None:
            self.socket.abort()

    def is_closing(self) -> bool:
        return self.phase != OPEN or self.socket is None or self.socket.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if self.socket is None:
            return default
        return self.socket.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._paused = True
        if self.socket is not None:
            self.socket.pause_reading()

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if self.socket is not None and self.phase in (OPEN, CLOSING):
            self.socket.resume_reading()
            if self._frames.buffered_bytes:  # messages read before the pause
                self._loop.call_soon(self._deliver)

    def is_reading(self) -> bool:
        return not self._paused

    def get_write_buffer_size(self) -> int:
        return self.socket.get_write_buffer_size() if self.socket is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self.socket is not None:
            self.socket.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.socket.get_write_buffer_limits() if self.socket is not None else (0, 0)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
