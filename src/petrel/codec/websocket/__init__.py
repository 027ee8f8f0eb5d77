"""WebSocket (RFC 6455), the server's side, sans-IO: the opening handshake and the frames.

The broker carries STOMP and MQTT inside it (`petrel.server.websocket`); this package knows
nothing of them.
"""

from .frames import (
    NEED_DATA,
    Close,
    CloseCode,
    Data,
    FrameDecoder,
    FrameError,
    Opcode,
    Ping,
    Pong,
    close_payload,
    frame,
    frame_header,
    unmask,
)
from .handshake import (
    HandshakeError,
    Request,
    accept_key,
    accept_response,
    check_upgrade,
    parse_request,
    refusal_response,
)

__all__ = [
    "NEED_DATA", "Close", "CloseCode", "Data", "FrameDecoder", "FrameError", "HandshakeError", "Opcode", "Ping",
    "Pong", "Request", "accept_key", "accept_response", "check_upgrade", "close_payload", "frame", "frame_header",
    "parse_request", "refusal_response", "unmask",
]
