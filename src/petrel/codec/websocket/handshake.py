"""The server's side of the WebSocket opening handshake (RFC 6455 section 4.2), sans-IO.

`parse_request` reads one HTTP/1.1 request head from a `Buffer` (None until it is whole);
`check_upgrade` checks that it asks for a WebSocket and returns its key; `accept_response` is
the 101 answer and `refusal_response` an HTTP error with a plain-text reason. Anything wrong is a
`HandshakeError` carrying the HTTP status (and headers) to answer with.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass, field
from http import HTTPStatus

from petrel.codec.buffer import Buffer
from petrel.codec.errors import RemoteProtocolError

__all__ = ["GUID", "MAX_REQUEST_BYTES", "HandshakeError", "Request", "accept_key", "accept_response",
           "check_upgrade", "parse_request", "refusal_response"]

#: RFC 6455's fixed GUID, appended to the client's key to make Sec-WebSocket-Accept.
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: Bytes of request head (request line and headers) read before the request is refused.
MAX_REQUEST_BYTES = 16 * 1024
MAX_HEADERS = 100


class HandshakeError(RemoteProtocolError):
    """The upgrade request cannot be accepted: answer `status` with `headers` and the message."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers) if headers else {}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names; repeats joined by ", "

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0].split("#", 1)[0]

    def tokens(self, name: str) -> list[str]:
        """A comma-separated header's items, stripped, empty ones dropped (case kept)."""
        return [item.strip() for item in self.headers.get(name, "").split(",") if item.strip()]

    @property
    def subprotocols(self) -> list[str]:
        """Sec-WebSocket-Protocol's offers, in the client's order of preference."""
        return self.tokens("sec-websocket-protocol")


def parse_request(buf: Buffer) -> Request | None:
    """The request head in `buf` (consumed and committed), or None if it is not all there yet."""
    head = buf.consume_until(b"\r\n\r\n", limit=MAX_REQUEST_BYTES)
    if head is None:
        buf.rollback()
        if len(buf) > MAX_REQUEST_BYTES:
            raise HandshakeError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                                 f"request head over {MAX_REQUEST_BYTES} bytes")
        return None
    buf.commit()
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
        raise HandshakeError(HTTPStatus.BAD_REQUEST, "request head is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise HandshakeError(HTTPStatus.BAD_REQUEST, f"not an HTTP request line: {lines[0][:80]!r}")
    method, target, version = parts
    if not version.startswith("HTTP/1."):
        raise HandshakeError(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"{version[:20]!r}: WebSocket needs HTTP/1.1")
    if len(lines) - 1 > MAX_HEADERS:
        raise HandshakeError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"more than {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        name = name.strip().lower()
        if not colon or not name or name != name.split()[0]:
            raise HandshakeError(HTTPStatus.BAD_REQUEST, f"malformed header line {line[:80]!r}")
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return Request(method, target, version, headers)


def check_upgrade(request: Request) -> str:
    """The client's Sec-WebSocket-Key if `request` is a WebSocket opening handshake."""
    if request.method != "GET":
        raise HandshakeError(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.method[:20]}: a WebSocket opens with GET",
                             {"Allow": "GET"})
    if request.version != "HTTP/1.1":
        raise HandshakeError(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "WebSocket needs HTTP/1.1")
    if "websocket" not in (t.lower() for t in request.tokens("upgrade")):
        raise HandshakeError(HTTPStatus.UPGRADE_REQUIRED, "this port speaks WebSocket only (no Upgrade: websocket)",
                             {"Upgrade": "websocket", "Connection": "Upgrade"})
    if "upgrade" not in (t.lower() for t in request.tokens("connection")):
        raise HandshakeError(HTTPStatus.BAD_REQUEST, "Connection: Upgrade is missing")
    if request.headers.get("sec-websocket-version") != "13":
        raise HandshakeError(HTTPStatus.UPGRADE_REQUIRED, "WebSocket version 13 only (RFC 6455)",
                             {"Sec-WebSocket-Version": "13"})
    key = request.headers.get("sec-websocket-key", "")
    try:
        raw = base64.b64decode(key.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raw = b""
    if len(raw) != 16:
        raise HandshakeError(HTTPStatus.BAD_REQUEST, "Sec-WebSocket-Key is not 16 bytes in base64")
    return key


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + GUID).digest()).decode("ascii")


def accept_response(key: str, subprotocol: str | None) -> bytes:
    """The 101 Switching Protocols answer, naming `subprotocol` (None: the client offered none)."""
    lines = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Accept: {accept_key(key)}"]
    if subprotocol is not None:
        lines.append(f"Sec-WebSocket-Protocol: {subprotocol}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def refusal_response(status: int, message: str, headers: dict[str, str] | None = None) -> bytes:
    """An HTTP error with `message` as its plain-text body; the connection closes after it."""
    body = (message + "\n").encode("utf-8")
    lines = [f"HTTP/1.1 {int(status)} {HTTPStatus(status).phrase}", "Content-Type: text/plain; charset=utf-8",
             f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items() if name.lower() != "connection"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
