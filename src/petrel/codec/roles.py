"""What every protocol codec shares: which end it plays, and the phases a direction goes through."""

from __future__ import annotations

from enum import Enum

__all__ = ["Role", "Phase"]


class Role(Enum):
    """Which end of the connection this codec plays."""

    CLIENT = "client"
    SERVER = "server"


class Phase(Enum):
    """Where one direction of a connection is: before connecting, connecting, open, closed."""

    IDLE = "idle"
    CONNECTING = "connecting"
    OPEN = "open"
    CLOSED = "closed"
