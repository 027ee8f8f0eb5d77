"""STOMP frames and the events a :class:`StompConnection` produces."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Frame",
    "Heartbeat",
    "HEARTBEAT",
    "FrameHeader",
    "BodyChunk",
    "FrameEnd",
    "NEED_DATA",
    "CLIENT_COMMANDS",
    "SERVER_COMMANDS",
    "COMMANDS",
    "UNESCAPED_COMMANDS",
    "VERSIONS",
    "detect",
]

#: The frames a STOMP client may open with.
OPENING_COMMANDS = (b"CONNECT", b"STOMP")


def detect(head: bytes) -> bool | None:
    """Whether a client's first bytes are STOMP's (CONNECT or STOMP, after any blank lines):
    True, False, or None (too few to tell)."""
    stripped = head.lstrip(b"\r\n")
    if not stripped:
        return None
    for command in OPENING_COMMANDS:
        n = min(len(command), len(stripped))
        if stripped[:n] == command[:n]:
            return True if n == len(command) else None
    return False

#: Frames a client sends.
CLIENT_COMMANDS = frozenset(
    {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
)
#: Frames a server sends.
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
COMMANDS = CLIENT_COMMANDS | SERVER_COMMANDS
#: Frames whose headers are never escaped, whatever the version (they are
#: exchanged before, or while, the version is negotiated).
UNESCAPED_COMMANDS = frozenset({"CONNECT", "STOMP", "CONNECTED"})
#: Protocol versions this codec speaks, lowest first.
VERSIONS = ("1.0", "1.1", "1.2")


@dataclass(frozen=True, slots=True)
class Frame:
    """One STOMP frame.

    ``headers`` hold decoded (unescaped) names and values. When a frame repeats
    a header name, the first occurrence wins, as the spec requires.
    """

    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The peer sent one or more bare EOLs: a heart-beat.

    All instances are equal; the codec returns the :data:`HEARTBEAT` singleton.
    """


HEARTBEAT = Heartbeat()


# A frame whose body is longer than the connection's ``stream_threshold`` arrives as a
# FrameHeader, then BodyChunks holding the body in order, then a FrameEnd, so the receiver
# never holds the whole body.


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The command and headers of a frame whose body follows in :class:`BodyChunk` events.

    ``length`` is the body's ``content-length``, or ``None`` when the frame has none and
    its body runs to the first NUL.
    """

    command: str
    headers: dict[str, str]
    length: int | None


@dataclass(frozen=True, slots=True)
class BodyChunk:
    """The next piece of a streamed frame's body (never empty)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class FrameEnd:
    """The streamed frame is complete: its body has been given whole and its NUL read."""

    command: str


class _SentinelType(type):
    def __repr__(cls) -> str:
        return cls.__name__


class NEED_DATA(metaclass=_SentinelType):
    """Returned by ``next_event`` when no whole event is buffered yet.

    A sentinel: compare with ``is``; it is never instantiated.
    """

    def __new__(cls) -> NEED_DATA:  # pragma: no cover - guard only
        raise TypeError("NEED_DATA is a sentinel; use the class itself")


_new = object.__new__
_set_command = Frame.command.__set__  # type: ignore[attr-defined]
_set_headers = Frame.headers.__set__  # type: ignore[attr-defined]
_set_body = Frame.body.__set__  # type: ignore[attr-defined]


def make_frame(command: str, headers: dict[str, str], body: bytes) -> Frame:
    """Build a :class:`Frame` without the frozen-dataclass ``__init__``.

    Same result as ``Frame(command, headers, body)`` at about half the cost,
    for the parser's hot path. Callers must pass the right types.
    """
    frame = _new(Frame)
    _set_command(frame, command)
    _set_headers(frame, headers)
    _set_body(frame, body)
    return frame
