"""Incremental STOMP frame parser.

The parser reads frames out of a :class:`~petrel.codec.buffer.Buffer` one at a
time. Each call scans only bytes it has not seen before (offsets are kept
relative to the frame start across feeds), so a large frame trickling in costs
linear time, and every limit is enforced while the frame is still incomplete,
keeping memory bounded by ``max_frame_size`` plus one received chunk.

Wire format: a command line, ``name:value`` header lines, a blank line, the
body, a NUL. Lines end in LF or CRLF (accepted in every version). Bare EOLs
between frames are heart-beats: one :data:`HEARTBEAT` per run of EOLs found in
the buffer. With a ``content-length`` header the body is exactly that many
bytes (NULs allowed) followed by a NUL; without it the body ends at the first
NUL. Headers are UTF-8; a repeated header keeps its first value. A raw ``:``
inside a value is accepted in every version (the line splits at the first
one); NUL bytes in the header block are refused.

Once it has raised ``RemoteProtocolError`` the parser is failed: it drops its
buffer and raises the same error on every later call.

Streaming. With ``stream_threshold`` set, a frame whose body is longer than it
comes out as a :class:`FrameHeader`, then :class:`BodyChunk` events, then a
:class:`FrameEnd`: at once when ``content-length`` says so, or, without one, as
soon as more than the threshold has arrived with no NUL in sight. Each chunk is
what the buffer held of the body, so memory stays at about one received chunk
whatever the body's size; ``max_frame_size`` still bounds the whole frame.
Frames at or under the threshold are parsed exactly as without it.
"""

from __future__ import annotations

import re
import sys
from typing import Callable

from ..buffer import Buffer
from ..errors import RemoteProtocolError
from .escaping import NO_ESCAPING, Escaping
from .frames import (
    COMMANDS,
    HEARTBEAT,
    NEED_DATA,
    UNESCAPED_COMMANDS,
    BodyChunk,
    Frame,
    FrameEnd,
    FrameHeader,
    Heartbeat,
    make_frame,
)

__all__ = ["FrameParser"]

_EOL_RUN = re.compile(rb"(?:\r?\n)+")
# The hot path builds frames like frames.make_frame, minus one call.
_new = object.__new__
_set_command = Frame.command.__set__  # type: ignore[attr-defined]
_set_headers = Frame.headers.__set__  # type: ignore[attr-defined]
_set_body = Frame.body.__set__  # type: ignore[attr-defined]
# Stands in for a pending frame once the parser has failed, so the hot path
# needs no extra check.
_FAILED = ("", {}, 0, None)

Event = Frame | Heartbeat | FrameHeader | BodyChunk | FrameEnd | type[NEED_DATA]


def _show(text: str, limit: int = 40) -> str:
    """A short, single-line rendering of peer-supplied text for error messages."""
    if len(text) > limit:
        return repr(text[:limit]) + "..."
    return repr(text)


# Any content-length with more significant digits than this is beyond every
# frame size limit; it is not converted (int() refuses very long digit strings).
_MAX_LENGTH_DIGITS = 15


def _parse_content_length(value: str) -> int:
    stripped = value.strip(" \t")
    if stripped and stripped.isascii() and stripped.isdigit():
        digits = stripped.lstrip("0") or "0"
        if len(digits) > _MAX_LENGTH_DIGITS:
            return 10**_MAX_LENGTH_DIGITS
        return int(digits)
    raise RemoteProtocolError(
        f"invalid content-length header {_show(value)}: expected a non-negative integer"
    )


def _no_check(command: str) -> None:
    return None


def _no_frame(command: str, headers: dict[str, str]) -> None:
    return None


class FrameParser:
    """Turns buffered bytes into :class:`Frame` and :class:`Heartbeat` events.

    Hooks let the owner enforce its state table: ``on_frame(command, headers)``
    runs once per frame as soon as its headers are parsed (before the body
    arrives), unless the command is in :attr:`steady`, the set the owner keeps
    of commands that would change nothing; ``check_command(command)`` runs as soon as a command line is
    complete while the headers are still arriving. Either may raise
    ``RemoteProtocolError``. :attr:`escaping` is the version's header
    escaping, switched by the owner once the version is negotiated.
    """

    __slots__ = (
        "buf",
        "max_frame_size",
        "max_headers",
        "max_header_length",
        "escaping",
        "on_frame",
        "check_command",
        "steady",
        "eof",
        "error",
        "_pending",
        "_scan",
        "_lines",
        "_line_start",
        "_crlf",
        "_stream_over",
        "_stream",
    )

    def __init__(
        self,
        *,
        max_frame_size: int,
        max_headers: int,
        max_header_length: int,
        on_frame: Callable[[str, dict[str, str]], object] = _no_frame,
        check_command: Callable[[str], object] = _no_check,
        stream_threshold: int | None = None,
    ) -> None:
        self.buf = Buffer(max_size=max_frame_size)
        self.max_frame_size = max_frame_size
        self.max_headers = max_headers
        self.max_header_length = max_header_length
        self.escaping: Escaping = NO_ESCAPING
        self.on_frame = on_frame
        self.check_command = check_command
        #: Commands for which ``on_frame`` may be skipped (it would change nothing).
        self.steady: frozenset[str] = frozenset()
        self.eof = False
        self.error: RemoteProtocolError | None = None
        # (command, headers, body offset from frame start, content-length or None)
        self._pending: tuple[str, dict[str, str], int, int | None] | None = None
        # Bytes of the current frame already scanned (relative to its start).
        self._scan = 0
        # Incremental header accounting while the header block is incomplete.
        self._lines = 0
        self._line_start = 0
        # Whether the peer ended its last header block with CRLF: search that first.
        self._crlf = False
        # Bodies longer than this are streamed (see the module docstring).
        self._stream_over = sys.maxsize if stream_threshold is None else stream_threshold
        # While streaming: [body bytes still to come (None: up to the NUL), bytes given,
        # header bytes]; the frame's command and headers stay in _pending.
        self._stream: list | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer received bytes (dropped once the parser has failed)."""
        if self.error is None:
            self.buf.feed(data)

    # ------------------------------------------------------------------

    def next_event(self) -> Event:
        """The next whole event in the buffer, or ``NEED_DATA``."""
        try:
            if self._pending is not None:
                return self._continue_body()
            buf = self.buf
            data = buf.data
            start = buf.pos
            end = len(data)
            if start >= end:
                return NEED_DATA
            first = data[start]
            if first == 10 or first == 13:
                if first == 10 and (start + 1 == end or data[start + 1] > 13):
                    buf.consume_to(start + 1)  # the usual lone LF after a NUL
                    return HEARTBEAT
                m = _EOL_RUN.match(data, start)
                if m is not None:
                    buf.consume_to(m.end())
                    return HEARTBEAT
                if end - start == 1:  # a CR whose LF has not arrived yet
                    return NEED_DATA

            # The blank line ending the headers is LF LF or LF CR LF, whichever
            # comes first. Search for the kind this peer used last time; the
            # decoded header text then shows whether the other kind might come
            # earlier (rare: only when a peer switches), which is checked exactly.
            lo = start + self._scan
            slo = lo - 2 if lo - 2 > start else start
            if self._crlf:
                k = data.find(b"\n\r\n", slo, end)
                skip = 3
                if k < 0:
                    k = data.find(b"\n\n", slo, end)
                    skip = 2
            else:
                k = data.find(b"\n\n", slo, end)
                skip = 2
                if k < 0:
                    k = data.find(b"\n\r\n", slo, end)
                    skip = 3
            if k < 0:
                return self._incomplete_headers(data, start, lo, end)
            try:
                text = data[start:k].decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is None or (
                "\r" in text if skip == 2 else ("\n\n" in text or text[-1] == "\n")
            ):
                k, skip, text = self._first_blank_line(data, start, slo, k, skip)
            self._crlf = skip == 3
            if "\x00" in text:
                raise RemoteProtocolError(
                    "NUL byte inside the frame headers (missing blank line after the headers?)"
                )
            if self._scan:
                self._lines = self._line_start = 0
            if "\r" in text:
                text = text.replace("\r\n", "\n")
                if text[-1] == "\r":
                    text = text[:-1]
            lines = text.split("\n")
            command = lines[0]
            if command not in COMMANDS:
                raise RemoteProtocolError(f"unknown command {_show(command)}")
            if len(lines) > self.max_headers + 1:
                raise RemoteProtocolError(
                    f"too many headers in {command} frame (limit {self.max_headers})"
                )
            if k - start > self.max_header_length:
                self._check_line_lengths(data, start, k)
            if (
                "\\" in text
                and self.escaping.decode_table
                and command not in UNESCAPED_COMMANDS
            ):
                headers = self._unescaped_headers(command, lines)
            else:
                headers = {}
                setdefault = headers.setdefault
                del lines[0]
                for line in lines:
                    name, sep, value = line.partition(":")
                    if not name or not sep:
                        raise _bad_header_line(command, line)
                    setdefault(name, value)
            if command not in self.steady:
                try:
                    self.on_frame(command, headers)
                except RemoteProtocolError as exc:
                    raise _with_receipt(exc, headers) from None

            body_start = k + skip
            cl = headers.get("content-length")
            if cl is not None:
                if len(cl) <= _MAX_LENGTH_DIGITS and cl.isdigit() and cl.isascii():
                    n = int(cl)
                else:
                    try:
                        n = _parse_content_length(cl)
                    except RemoteProtocolError as exc:
                        raise _with_receipt(exc, headers) from None
                size = body_start - start + n
                if size > self.max_frame_size:
                    raise _too_large(command, headers, size, self.max_frame_size)
                if n > self._stream_over:
                    return self._start_stream(command, headers, n, body_start - start)
                stop = body_start + n
                if stop >= end:
                    stop = -1  # the body and its NUL are not all here yet
                elif data[stop]:
                    raise _unterminated(command, headers, n)
            else:
                n = None
                stop = data.find(0, body_start, end)
                if stop >= 0:
                    if stop - start > self.max_frame_size:
                        raise _too_large(command, headers, stop - start, self.max_frame_size)
                else:
                    if end - start > self.max_frame_size:
                        raise _too_large(command, headers, end - start, self.max_frame_size)
                    if end - body_start > self._stream_over:
                        return self._start_stream(command, headers, None, body_start - start)
            if stop >= 0:
                buf.consume_to(stop + 1)
                self._scan = 0
                frame = _new(Frame)
                _set_command(frame, command)
                _set_headers(frame, headers)
                _set_body(frame, bytes(data[body_start:stop]))
                return frame
            self._scan = end - start
            self._pending = (command, headers, body_start - start, n)
            if self.eof:
                raise _truncated(headers)
            return NEED_DATA
        except RemoteProtocolError as exc:
            self._fail(exc)
            raise

    # ------------------------------------------------------------------

    def _fail(self, exc: RemoteProtocolError) -> None:
        if self.error is None:
            self.error = exc
        self._pending = _FAILED
        self._stream = None
        self.buf.clear()

    def _continue_body(self) -> Event:
        if self.error is not None:
            raise RemoteProtocolError(self.error.message, self.error.hint)
        if self._stream is not None:
            return self._next_chunk()
        command, headers, body_offset, n = self._pending  # type: ignore[misc]
        buf = self.buf
        data = buf.data
        start = buf.pos
        end = len(data)
        body_start = start + body_offset
        if n is not None:
            stop = body_start + n
            if stop >= end:
                if self.eof:
                    raise _truncated(headers)
                return NEED_DATA
            if data[stop]:
                raise _unterminated(command, headers, n)
        else:
            stop = data.find(0, start + self._scan, end)
            if stop < 0:
                self._scan = end - start
                if end - start > self.max_frame_size:
                    raise _too_large(command, headers, end - start, self.max_frame_size)
                if end - body_start > self._stream_over:
                    return self._start_stream(command, headers, None, body_offset)
                if self.eof:
                    raise _truncated(headers)
                return NEED_DATA
            if stop - start > self.max_frame_size:
                raise _too_large(command, headers, stop - start, self.max_frame_size)
        body = bytes(data[body_start:stop])
        buf.consume_to(stop + 1)
        self._pending = None
        self._scan = 0
        return make_frame(command, headers, body)

    # -- streamed bodies ------------------------------------------------

    def _start_stream(
        self, command: str, headers: dict[str, str], n: int | None, head: int
    ) -> FrameHeader:
        """Commit the headers and announce a frame whose body will come in chunks."""
        buf = self.buf
        buf.consume_to(buf.pos + head)
        self._scan = 0
        self._pending = (command, headers, 0, n)
        self._stream = [n, 0, head]
        return FrameHeader(command, headers, n)

    def _next_chunk(self) -> Event:
        """The next piece of a streamed body, its end, or NEED_DATA."""
        stream = self._stream
        remaining, given, head = stream  # type: ignore[misc]
        command, headers, _, n = self._pending  # type: ignore[misc]
        buf = self.buf
        data = buf.data
        start = buf.pos
        end = len(data)
        if start >= end:
            if self.eof:
                raise _truncated(headers)
            return NEED_DATA
        if remaining is not None:
            if remaining:
                stop = start + remaining if start + remaining < end else end
                stream[0] = remaining - (stop - start)
            elif data[start]:
                raise _unterminated(command, headers, n)
            else:
                stop = -1
        else:
            stop = data.find(0, start, end)
            if stop == start:
                stop = -1
            else:
                if stop < 0:
                    stop = end
                if head + given + (stop - start) > self.max_frame_size:
                    raise _too_large(
                        command, headers, head + given + stop - start, self.max_frame_size
                    )
        if stop < 0:  # at the NUL ending the frame
            buf.consume_to(start + 1)
            self._stream = None
            self._pending = None
            return FrameEnd(command)
        chunk = bytes(data[start:stop])
        buf.consume_to(stop)
        stream[1] = given + len(chunk)
        return BodyChunk(chunk)

    def _incomplete_headers(
        self, data: bytearray, start: int, lo: int, end: int
    ) -> type[NEED_DATA]:
        if data.find(0, lo, end) >= 0:
            raise RemoteProtocolError(
                "NUL byte inside the frame headers (missing blank line after the headers?)"
            )
        newlines = data.count(b"\n", lo, end)
        if newlines:
            if not self._lines:
                # The command line is complete: refuse a bad command right away
                # instead of waiting for a blank line that may never come.
                nl = data.find(b"\n", start, end)
                self._check_command_line(bytes(data[start:nl]))
            self._lines += newlines
            self._line_start = data.rfind(b"\n", lo, end) + 1 - start
        self._scan = size = end - start
        if size > self.max_frame_size:
            raise RemoteProtocolError(
                f"frame too large: headers exceed {self.max_frame_size} bytes"
            )
        if size - self._line_start > self.max_header_length:
            raise RemoteProtocolError(
                f"header line too long (limit {self.max_header_length} bytes)"
            )
        if self._lines > self.max_headers + 1:
            raise RemoteProtocolError(f"too many headers (limit {self.max_headers})")
        if self.eof:
            raise RemoteProtocolError("connection closed in the middle of a frame")
        return NEED_DATA

    def _first_blank_line(
        self, data: bytearray, start: int, slo: int, k: int, skip: int
    ) -> tuple[int, int, str]:
        """Exactly where the headers end, given a blank line found at ``k``."""
        if skip == 2:
            j = data.find(b"\n\r\n", slo, k + 1)
            if j >= 0:
                k, skip = j, 3
        else:
            j = data.find(b"\n\n", slo, k + 1)
            if j >= 0:
                k, skip = j, 2
        if data.find(0, start, k) >= 0:
            raise RemoteProtocolError(
                "NUL byte inside the frame headers (missing blank line after the headers?)"
            )
        try:
            return k, skip, data[start:k].decode("utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError("invalid UTF-8 in frame command or headers") from None

    def _check_command_line(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            command = line.decode("utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError("invalid UTF-8 in frame command") from None
        if command not in COMMANDS:
            raise RemoteProtocolError(f"unknown command {_show(command)}")
        self.check_command(command)

    def _check_line_lengths(self, data: bytearray, start: int, stop: int) -> None:
        limit = self.max_header_length
        for line in data[start:stop].split(b"\n"):
            if len(line) > limit:
                raise RemoteProtocolError(f"header line too long (limit {limit} bytes)")

    def _unescaped_headers(self, command: str, lines: list[str]) -> dict[str, str]:
        unescape = self.escaping.unescape
        headers: dict[str, str] = {}
        for i in range(1, len(lines)):
            line = lines[i]
            name, sep, value = line.partition(":")
            if not name or not sep:
                raise _bad_header_line(command, line)
            name = unescape(name)
            if name not in headers:
                headers[name] = unescape(value)
            else:
                unescape(value)  # still refuse an undefined escape
        return headers


def _bad_header_line(command: str, line: str) -> RemoteProtocolError:
    if line.startswith(":"):
        return RemoteProtocolError(f"empty header name in {command} frame: {_show(line)}")
    return RemoteProtocolError(f"header line without ':' in {command} frame: {_show(line)}")


def _with_receipt(exc: RemoteProtocolError, headers: dict[str, str]) -> RemoteProtocolError:
    receipt = headers.get("receipt")
    if receipt is not None:
        exc.hint.setdefault("receipt-id", receipt)
    return exc


def _too_large(
    command: str, headers: dict[str, str], size: int, limit: int
) -> RemoteProtocolError:
    return _with_receipt(
        RemoteProtocolError(f"{command} frame too large: at least {size} bytes, limit {limit}"),
        headers,
    )


def _unterminated(command: str, headers: dict[str, str], n: int) -> RemoteProtocolError:
    return _with_receipt(
        RemoteProtocolError(
            f"{command} frame body is not followed by NUL after content-length {n} bytes"
        ),
        headers,
    )


def _truncated(headers: dict[str, str]) -> RemoteProtocolError:
    return _with_receipt(
        RemoteProtocolError("connection closed in the middle of a frame"), headers
    )
