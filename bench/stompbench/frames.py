"""STOMP 1.2 frames for the load generator: templates out, a chunk scanner in.

The generator never builds a general-purpose frame object on the hot path.  A SEND
is a pre-rendered bytes template with two ``%d`` holes (receipt number and send
timestamp); incoming bytes are scanned with ``bytes.find`` for whole frames.

Limits, on purpose: bodies the bench sends contain no NUL byte, so a frame ends
at the first NUL after its blank line (any ``content-length`` header is therefore
not needed to find the end); header lines end in LF, as every broker measured
here writes them.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

TS_HEADER = b"bench-ts"
_TS_NEEDLE = b"\n" + TS_HEADER + b":"
_TS_SKIP = len(_TS_NEEDLE)
_ACK_NEEDLE = b"\nack:"
_RECEIPT_ID_NEEDLE = b"\nreceipt-id:"
_MESSAGE = b"MESSAGE\n"
_RECEIPT = b"RECEIPT\n"
_ERROR = b"ERROR\n"
_EOL = b"\r\n"


class BrokerError(Exception):
    """The broker sent an ERROR frame (its text is the message)."""


def body_of(size: int) -> bytes:
    """A printable, NUL-free body of exactly ``size`` bytes."""
    pattern = b"petrel-bench-0123456789-abcdefghijklmnopqrstuvwxyz|"
    return (pattern * (size // len(pattern) + 1))[:size]


def _escape(value: str) -> str:
    return (
        value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c").replace("\r", "\\r")
    )


def render(command: str, headers: dict[str, str] | list[tuple[str, str]], body: bytes = b"") -> bytes:
    """One complete frame, for the cold path (CONNECT, SUBSCRIBE, ACK, DISCONNECT)."""
    items = headers.items() if isinstance(headers, dict) else headers
    lines = [command] + [f"{_escape(k)}:{_escape(v)}" for k, v in items]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\0"


def send_template(
    destination: str, body: bytes, extra: list[tuple[str, str]], receipt: bool
) -> bytes:
    """A SEND with ``%d`` holes: ``(receipt_no, ts_ns)`` if ``receipt`` else ``(ts_ns,)``.

    The body is escaped for ``%`` so the template can be filled with bytes
    formatting, which copies the frame once.
    """
    head = [f"destination:{destination}", f"content-length:{len(body)}"]
    head += [f"{k}:{v}" for k, v in extra]
    if receipt:
        head.append("receipt:%d")
    head.append(TS_HEADER.decode() + ":%d")
    return ("SEND\n" + "\n".join(head) + "\n\n").encode() + body.replace(b"%", b"%%") + b"\0"


@dataclass(slots=True)
class Scan:
    """What one pass over a buffer found (reused between reads, no allocation)."""

    consumed: int = 0
    messages: int = 0
    last_message: int = -1  # offset of the last MESSAGE frame's command
    last_header_end: int = -1
    receipts: int = 0


def scan(
    buf: bytes,
    now_ns: int,
    latencies: array | None,
    receipt_ids: list[int] | None,
    out: Scan,
) -> Scan:
    """Walk every whole frame in ``buf``.

    Counts MESSAGE frames (appending ``now_ns - bench-ts`` to ``latencies`` when
    given) and RECEIPT frames (appending their numeric ids to ``receipt_ids``
    when given).  Raises :class:`BrokerError` on an ERROR frame.  ``out.consumed``
    is where the unfinished tail starts.
    """
    find = buf.find
    startswith = buf.startswith
    n = len(buf)
    pos = 0
    messages = receipts = 0
    last = last_he = -1
    while pos < n:
        if buf[pos] in _EOL:  # heart-beat or the LF some brokers put after NUL
            pos += 1
            continue
        he = find(b"\n\n", pos)
        if he < 0:
            break
        end = find(b"\0", he + 2)
        if end < 0:
            break
        if startswith(_MESSAGE, pos):
            messages += 1
            last, last_he = pos, he
            if latencies is not None:
                i = find(_TS_NEEDLE, pos, he)
                if i >= 0:
                    i += _TS_SKIP
                    latencies.append(now_ns - int(buf[i : find(b"\n", i, he + 1)]))
        elif startswith(_RECEIPT, pos):
            receipts += 1
            if receipt_ids is not None:
                i = find(_RECEIPT_ID_NEEDLE, pos, he)
                if i >= 0:
                    i += len(_RECEIPT_ID_NEEDLE)
                    value = buf[i : find(b"\n", i, he + 1)]
                    if value.isdigit():
                        receipt_ids.append(int(value))
        elif startswith(_ERROR, pos):
            raise BrokerError(buf[pos:end].decode("utf-8", "replace"))
        pos = end + 1
    out.consumed = pos
    out.messages = messages
    out.last_message = last
    out.last_header_end = last_he
    out.receipts = receipts
    return out


def header_value(buf: bytes, start: int, header_end: int, needle: bytes) -> bytes | None:
    """The raw (still escaped) value of header ``needle`` (``b"\\nname:"``) in the frame at ``start``."""
    i = buf.find(needle, start, header_end)
    if i < 0:
        return None
    i += len(needle)
    return buf[i : buf.find(b"\n", i, header_end + 1)]


def ack_id(buf: bytes, start: int, header_end: int) -> bytes | None:
    """The raw ``ack`` header of the MESSAGE at ``start`` (STOMP 1.2), else its ``message-id``.

    Raw on purpose: echoed back unchanged in an ACK, the broker unescapes it to
    the same value it sent.
    """
    value = header_value(buf, start, header_end, _ACK_NEEDLE)
    if value is None:
        value = header_value(buf, start, header_end, b"\nmessage-id:")
    return value


def read_frame_command(buf: bytes) -> tuple[str, bytes, int] | None:
    """The first whole frame in ``buf`` as (command, raw frame, end offset), for the cold path."""
    pos = 0
    while pos < len(buf) and buf[pos] in _EOL:
        pos += 1
    he = buf.find(b"\n\n", pos)
    if he < 0:
        return None
    end = buf.find(b"\0", he + 2)
    if end < 0:
        return None
    command = buf[pos : buf.find(b"\n", pos)].decode("ascii", "replace").strip()
    return command, buf[pos:end], end + 1
