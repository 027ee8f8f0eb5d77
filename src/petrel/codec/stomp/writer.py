"""Serialising STOMP frames.

:func:`serialize` writes one frame with the escaping of the negotiated version,
refusing (``LocalProtocolError``) anything the peer could not read back as
sent: LF or NUL in an unescaped header, ``:`` or an empty header name, a header
value ending in CR where CR is not escaped, a ``content-length`` that does not
match the body. A non-empty body gets a ``content-length`` header unless one is
given, except on CONNECT, STOMP and CONNECTED, which never carry one (and so
cannot carry a NUL in their body).
"""

from __future__ import annotations

from ..errors import LocalProtocolError
from .escaping import Escaping
from .frames import UNESCAPED_COMMANDS, Frame

__all__ = ["serialize", "serialize_head", "HEARTBEAT_BYTES", "BODY_END"]

HEARTBEAT_BYTES = b"\n"
#: What ends a frame written with :func:`serialize_head`, after its body.
BODY_END = b"\x00"


def serialize(frame: Frame, escaping: Escaping) -> bytes:
    """The wire bytes of ``frame`` for a connection using ``escaping``."""
    command = frame.command
    headers = frame.headers
    body = frame.body
    unescaped = command in UNESCAPED_COMMANDS or not escaping.decode_table

    add_length = False
    if body:
        given = headers.get("content-length")
        if given is None:
            if command not in UNESCAPED_COMMANDS:
                add_length = True
            elif 0 in body:
                raise LocalProtocolError(
                    f"a {command} body cannot contain NUL: it carries no content-length"
                )
        elif given != str(len(body)):
            raise LocalProtocolError(
                f"content-length {given!r} does not match the {len(body)}-byte body"
            )
    elif headers.get("content-length", "0") != "0":
        raise LocalProtocolError(
            f"content-length {headers['content-length']!r} given for an empty body"
        )

    if headers:
        try:
            names = "".join(headers)
            values = "".join(headers.values())
        except TypeError:
            raise LocalProtocolError("header names and values must be str") from None
        if unescaped:
            if (
                "\n" in names
                or "\n" in values
                or ":" in names
                or "\x00" in names
                or "\x00" in values
                or "" in headers
                or ("\r" in values and _ends_with_cr(headers))
            ):
                escaping.check_unescaped(command, headers)
            items = headers.items()
        else:
            if "\x00" in names or "\x00" in values or "" in headers:
                raise LocalProtocolError(
                    f"header names must be non-empty and headers cannot contain NUL ({command})"
                )
            if not escaping.escapes_cr and "\r" in values and _ends_with_cr(headers):
                raise LocalProtocolError(
                    f"a header value ending in CR cannot be sent in STOMP {escaping.version}"
                )
            if escaping.needs_escape(names + values):
                escape = escaping.escape
                items = [(escape(k), escape(v)) for k, v in headers.items()]
            else:
                items = headers.items()
        lines = "\n".join(map(":".join, items))
        if add_length:
            head = f"{command}\n{lines}\ncontent-length:{len(body)}\n\n"
        else:
            head = f"{command}\n{lines}\n\n"
    elif add_length:
        head = f"{command}\ncontent-length:{len(body)}\n\n"
    else:
        head = f"{command}\n\n"
    try:
        encoded = head.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"header text cannot be encoded as UTF-8: {exc.reason}") from None
    return b"".join((encoded, body, b"\x00"))


def _ends_with_cr(headers: dict[str, str]) -> bool:
    return any(v.endswith("\r") for v in headers.values())


def serialize_head(frame: Frame, escaping: Escaping, length: int) -> bytes:
    """The bytes of ``frame`` up to its body, announcing a body of ``length`` bytes.

    For bodies streamed from elsewhere (a file): the caller writes exactly ``length``
    body bytes next, then :data:`BODY_END`. ``frame`` carries the headers only: no body
    and no ``content-length`` (this adds it). Same checks as :func:`serialize`.
    """
    command = frame.command
    if frame.body or "content-length" in frame.headers:
        raise LocalProtocolError("a streamed frame's head takes no body and no content-length header")
    if command in UNESCAPED_COMMANDS:
        raise LocalProtocolError(f"{command} carries no content-length, so its body cannot be streamed")
    if length < 0:
        raise LocalProtocolError(f"invalid body length {length}")
    whole = serialize(frame, escaping)  # "...\n\n\x00": drop the blank line's LF and the NUL
    return b"".join((whole[:-2], b"content-length:%d\n\n" % length))
