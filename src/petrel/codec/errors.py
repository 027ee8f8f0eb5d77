"""Errors raised by the sans-IO codecs.

A :class:`ProtocolError` carries what the edge needs to answer the peer: a
human-readable ``message`` and a ``hint`` of extra protocol fields (for STOMP,
extra headers for the ERROR frame, such as ``receipt-id`` or ``version``).
"""

from __future__ import annotations

__all__ = ["ProtocolError", "RemoteProtocolError", "LocalProtocolError"]


class ProtocolError(Exception):
    """Base class of codec errors.

    ``message`` is safe to put on the wire: it holds no CR or LF, so it fits in
    a header value of any protocol version. ``hint`` maps extra header names to
    values the server should add to its error reply; it may be empty.
    """

    def __init__(self, message: str, hint: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint: dict[str, str] = dict(hint) if hint else {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, hint={self.hint!r})"


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol does not allow."""


class LocalProtocolError(ProtocolError):
    """We tried to send something illegal in the current state."""
