"""The ``heart-beat`` header (STOMP 1.1/1.2).

A peer announces ``cx,cy``: the smallest interval in milliseconds at which it
can send heart-beats (0: it cannot) and the interval at which it wants to
receive them (0: it does not want any). Each direction then runs at the larger
of the sender's and the receiver's figure, or not at all if either is 0.
"""

from __future__ import annotations

from ..errors import RemoteProtocolError

__all__ = ["parse_heartbeat", "format_heartbeat", "negotiate_heartbeat"]

_MAX_INTERVAL = 2**31 - 1  # ms; about 24.8 days, far beyond any sane setting


def parse_heartbeat(value: str | None) -> tuple[int, int]:
    """``"cx,cy"`` -> ``(cx, cy)``; an absent header means ``(0, 0)``.

    Raises ``RemoteProtocolError`` unless the value is two non-negative decimal
    integers separated by a comma (spaces around either number are tolerated).
    """
    if value is None:
        return (0, 0)
    first, sep, second = value.partition(",")
    if sep:
        a = first.strip(" \t")
        b = second.strip(" \t")
        if a.isascii() and a.isdigit() and b.isascii() and b.isdigit():
            a = a.lstrip("0") or "0"
            b = b.lstrip("0") or "0"
            if len(a) <= 10 and len(b) <= 10:  # int() refuses very long digit strings
                x, y = int(a), int(b)
                if x <= _MAX_INTERVAL and y <= _MAX_INTERVAL:
                    return (x, y)
    raise RemoteProtocolError(
        f"invalid heart-beat header {value[:64]!r}: expected two non-negative"
        " integers such as '10000,10000'",
    )


def format_heartbeat(value: tuple[int, int]) -> str:
    """``(cx, cy)`` -> ``"cx,cy"``."""
    return f"{int(value[0])},{int(value[1])}"


def negotiate_heartbeat(
    client: tuple[int, int], server: tuple[int, int]
) -> tuple[int, int]:
    """Agree heart-beats from the client's and the server's ``(can send, want)``.

    Returns ``(send, receive)`` from the server's point of view: the interval in
    ms at which the server must send something, and the interval in ms within
    which it must receive something; 0 turns that direction off.
    """
    client_send, client_want = client
    server_send, server_want = server
    send = 0 if server_send == 0 or client_want == 0 else max(server_send, client_want)
    receive = 0 if client_send == 0 or server_want == 0 else max(client_send, server_want)
    return (send, receive)
