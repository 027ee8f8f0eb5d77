"""Who may send which frame when: the STOMP connection state table.

Each direction has a :class:`Phase`. A client's frames go IDLE -> (CONNECT or
STOMP) -> ... -> DISCONNECT -> CLOSED; a server's frames go IDLE ->
CONNECTING (a CONNECT arrived) -> CONNECTED -> OPEN ... and ERROR closes. The
tables below list, per role and phase, the commands allowed and the phase each
leads to; anything else is an error, raised as ``RemoteProtocolError`` for
received frames and ``LocalProtocolError`` for frames we try to send.

A received frame is applied as soon as its headers are parsed, so a refused
frame is refused before its body is read. The receiving side is lenient where the sending side is strict: a server
accepts frames pipelined right behind CONNECT, but our own client waits for
CONNECTED before sending anything else (the escaping to use depends on it).
"""

from __future__ import annotations


from ..errors import LocalProtocolError, RemoteProtocolError
from ..roles import Phase, Role
from .frames import CLIENT_COMMANDS, SERVER_COMMANDS

__all__ = ["Role", "Phase", "ConnectionState"]




_CONNECT = ("CONNECT", "STOMP")
_CLIENT_OPEN = {cmd: Phase.OPEN for cmd in CLIENT_COMMANDS if cmd not in _CONNECT}
_CLIENT_OPEN["DISCONNECT"] = Phase.CLOSED

# Frames a client sends, as the server accepts them.
_CLIENT_AS_RECEIVED: dict[Phase, dict[str, Phase]] = {
    Phase.IDLE: {"CONNECT": Phase.OPEN, "STOMP": Phase.OPEN},
    Phase.CONNECTING: {},
    Phase.OPEN: _CLIENT_OPEN,
    Phase.CLOSED: {},
}
# Frames our client may send.
_CLIENT_AS_SENT: dict[Phase, dict[str, Phase]] = {
    Phase.IDLE: {"CONNECT": Phase.CONNECTING, "STOMP": Phase.CONNECTING},
    Phase.CONNECTING: {},
    Phase.OPEN: _CLIENT_OPEN,
    Phase.CLOSED: {},
}
# Frames a server sends; the same rules both ways.
_SERVER_FRAMES: dict[Phase, dict[str, Phase]] = {
    Phase.IDLE: {"ERROR": Phase.CLOSED},
    Phase.CONNECTING: {"CONNECTED": Phase.OPEN, "ERROR": Phase.CLOSED},
    Phase.OPEN: {"MESSAGE": Phase.OPEN, "RECEIPT": Phase.OPEN, "ERROR": Phase.CLOSED},
    Phase.CLOSED: {},
}

# Why a frame is refused, per (role of the sender, phase of the sender).
_CLIENT_REFUSAL = {
    Phase.IDLE: "expected CONNECT or STOMP, got {cmd}",
    Phase.CONNECTING: "cannot send {cmd} before CONNECTED is received",
    Phase.OPEN: "unexpected {cmd}: already connected",
    Phase.CLOSED: "unexpected {cmd} after DISCONNECT",
}
_SERVER_REFUSAL = {
    Phase.IDLE: "cannot send {cmd} before a CONNECT frame is received",
    Phase.CONNECTING: "expected CONNECTED or ERROR, got {cmd}",
    Phase.OPEN: "unexpected {cmd}: already connected",
    Phase.CLOSED: "unexpected {cmd} after ERROR",
}


def _steady(table: dict[Phase, dict[str, Phase]]) -> dict[Phase, frozenset[str]]:
    """Per phase, the commands that leave it unchanged (no transition to apply)."""
    return {
        phase: frozenset(cmd for cmd, nxt in moves.items() if nxt is phase)
        for phase, moves in table.items()
    }


_STEADY_CLIENT = _steady(_CLIENT_AS_RECEIVED)
_STEADY_SERVER = _steady(_SERVER_FRAMES)


class ConnectionState:
    """The phases of both directions of one connection."""

    __slots__ = ("role", "ours", "theirs", "_send_table", "_receive_table")

    def __init__(self, role: Role) -> None:
        self.role = role
        self.ours = Phase.IDLE
        self.theirs = Phase.IDLE
        if role is Role.SERVER:
            self._send_table = _SERVER_FRAMES
            self._receive_table = _CLIENT_AS_RECEIVED
        else:
            self._send_table = _CLIENT_AS_SENT
            self._receive_table = _SERVER_FRAMES

    @property
    def steady_receive(self) -> frozenset[str]:
        """Commands the peer may send now without changing any phase.

        The parser may skip :meth:`receive` for these (its hot path).
        """
        table = _STEADY_CLIENT if self.role is Role.SERVER else _STEADY_SERVER
        return table[self.theirs]

    def check_receive(self, command: str) -> Phase:
        """The phase the peer would move to by sending ``command``; raise if not allowed."""
        nxt = self._receive_table[self.theirs].get(command)
        if nxt is None:
            raise RemoteProtocolError(self._refusal(command, peer=True))
        return nxt

    def receive(self, command: str, headers: object = None) -> None:
        """Apply a frame the peer sent; ``RemoteProtocolError`` if not allowed now.

        (``headers`` is unused; it lets this method serve as the parser's hook.)
        """
        nxt = self._receive_table[self.theirs].get(command)
        if nxt is None:
            raise RemoteProtocolError(self._refusal(command, peer=True))
        self.theirs = nxt
        if self.role is Role.SERVER:
            if self.ours is Phase.IDLE and (command == "CONNECT" or command == "STOMP"):
                self.ours = Phase.CONNECTING
        elif command == "CONNECTED" and self.ours is Phase.CONNECTING:
            self.ours = Phase.OPEN

    def check_send(self, command: str) -> Phase:
        """The phase we move to by sending ``command``; ``LocalProtocolError`` if not allowed."""
        nxt = self._send_table[self.ours].get(command)
        if nxt is None:
            raise LocalProtocolError(self._refusal(command, peer=False))
        return nxt

    def sent(self, command: str, phase: Phase) -> None:
        """Apply a frame we sent, already checked by :meth:`check_send`."""
        self.ours = phase
        if self.role is Role.CLIENT and command in _CONNECT and self.theirs is Phase.IDLE:
            self.theirs = Phase.CONNECTING

    def _refusal(self, command: str, *, peer: bool) -> str:
        sender_is_server = (self.role is Role.SERVER) != peer
        sender = "server" if sender_is_server else "client"
        own = SERVER_COMMANDS if sender_is_server else CLIENT_COMMANDS
        if command not in own:
            return f"{command} is not a frame a {sender} may send"
        phase = self.theirs if peer else self.ours
        template = (_SERVER_REFUSAL if sender_is_server else _CLIENT_REFUSAL)[phase]
        return template.format(cmd=command)
