"""The errors of the OpenWire codec."""

from __future__ import annotations

from petrel.codec.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["OpenWireProtocolError", "OpenWireLocalError"]


class OpenWireProtocolError(RemoteProtocolError):
    """The peer sent bytes that are not OpenWire as negotiated (a short or oversized frame, an
    unknown command type, a field that runs past its frame...). The connection is broken: the
    server answers with a ConnectionError when it can and closes."""


class OpenWireLocalError(LocalProtocolError):
    """We tried to send a command the codec cannot encode."""
