"""Who may send which CORE frame when: the connection state table.

Each direction has a :class:`Phase`. The client's frames go IDLE -> CONNECT
-> OPEN -> (DISCONNECT or ERROR) -> CLOSED; the server's go IDLE -> CONNECTING
(a CONNECT arrived) -> CONNECTED -> OPEN -> CLOSED. Before it sends CONNECTED
the server may only refuse (ERROR, DISCONNECT). Our client sends nothing after
CONNECT until CONNECTED arrives; a server also refuses frames pipelined behind
CONNECT, because the version they are written in is not agreed yet.

Frames allowed once OPEN are the ones registered for that side in
:mod:`events` when the state is created (so frame types registered by later
subsystems are picked up by new connections). A refused received frame raises
``RemoteProtocolError``; a refused frame to send, ``LocalProtocolError``.
"""

from __future__ import annotations


from ..errors import LocalProtocolError, RemoteProtocolError
from ..roles import Phase, Role
from .events import CLIENT_EVENTS, EVENT_TYPES, SERVER_EVENTS
from .frames import FrameType

__all__ = ["Role", "Phase", "ConnectionState"]




_CLOSING = (FrameType.DISCONNECT, FrameType.ERROR)


def _name(code: int) -> str:
    cls = EVENT_TYPES.get(code)
    return cls.__name__.upper() if cls is not None else f"frame type {code:#x}"


class ConnectionState:
    """The phases of both directions of one connection.

    ``open_receive`` and ``open_send`` are the frame types that keep an OPEN
    direction OPEN: the hot path checks membership only.
    """

    __slots__ = ("role", "ours", "theirs", "open_receive", "open_send")

    def __init__(self, role: Role) -> None:
        self.role = role
        self.ours = Phase.IDLE
        self.theirs = Phase.IDLE
        client = frozenset(CLIENT_EVENTS) - {FrameType.CONNECT, *_CLOSING}
        server = frozenset(SERVER_EVENTS) - {FrameType.CONNECTED, *_CLOSING}
        if role is Role.SERVER:
            self.open_receive, self.open_send = client, server
        else:
            self.open_receive, self.open_send = server, client

    # -- receiving ------------------------------------------------------------------------

    def receive(self, code: int) -> None:
        """Apply a frame the peer sent; ``RemoteProtocolError`` if it may not send it now."""
        phase = self.theirs
        if phase is Phase.OPEN:
            if code in self.open_receive:
                return
            if code in _CLOSING:
                self.theirs = Phase.CLOSED
                return
        elif self.role is Role.SERVER:
            if phase is Phase.IDLE:
                if code == FrameType.CONNECT:
                    self.theirs = Phase.OPEN
                    self.ours = Phase.CONNECTING
                    return
                if code in _CLOSING:
                    self.theirs = Phase.CLOSED
                    return
        elif phase is Phase.CONNECTING or phase is Phase.IDLE:
            if code == FrameType.CONNECTED and phase is Phase.CONNECTING:
                self.theirs = Phase.OPEN
                self.ours = Phase.OPEN
                return
            if code in _CLOSING:
                self.theirs = Phase.CLOSED
                return
        raise RemoteProtocolError(self._refusal(code, peer=True))

    # -- sending --------------------------------------------------------------------------

    def check_send(self, code: int) -> Phase:
        """The phase we move to by sending ``code``; ``LocalProtocolError`` if not allowed."""
        phase = self.ours
        if phase is Phase.OPEN:
            if code in self.open_send:
                return phase
            if code in _CLOSING:
                return Phase.CLOSED
        elif phase is not Phase.CLOSED:
            if code in _CLOSING:
                return Phase.CLOSED
            if self.role is Role.SERVER:
                if phase is Phase.CONNECTING and code == FrameType.CONNECTED:
                    return Phase.OPEN
            elif phase is Phase.IDLE and code == FrameType.CONNECT:
                return Phase.CONNECTING
        raise LocalProtocolError(self._refusal(code, peer=False))

    def sent(self, code: int, phase: Phase) -> None:
        """Apply a frame we sent, already checked by :meth:`check_send`."""
        self.ours = phase
        if self.role is Role.CLIENT and code == FrameType.CONNECT and self.theirs is Phase.IDLE:
            self.theirs = Phase.CONNECTING

    # -- messages ---------------------------------------------------------------------------

    def _refusal(self, code: int, *, peer: bool) -> str:
        sender_is_server = (self.role is Role.SERVER) != peer
        sender = "server" if sender_is_server else "client"
        allowed = SERVER_EVENTS if sender_is_server else CLIENT_EVENTS
        name = _name(code)
        if code not in allowed:
            return f"{name} is not a frame a {sender} may send"
        phase = self.theirs if peer else self.ours
        if phase is Phase.CLOSED:
            return f"unexpected {name} after the {sender} closed the connection"
        if phase is Phase.OPEN:
            return f"unexpected {name}: already connected"
        if sender_is_server:
            return f"unexpected {name} before CONNECTED" if phase is not Phase.IDLE else (
                f"unexpected {name} before a CONNECT was received")
        if phase is Phase.CONNECTING:
            return f"cannot send {name} before CONNECTED is received"
        return f"expected CONNECT, got {name}"
