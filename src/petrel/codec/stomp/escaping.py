"""Header escaping per STOMP version.

STOMP 1.0 has no escaping. 1.1 escapes LF, ``:`` and backslash as ``\\n``,
``\\c`` and ``\\\\``; 1.2 also escapes CR as ``\\r``. Any other backslash
sequence in 1.1/1.2 is a protocol error. CONNECT, STOMP and CONNECTED frames
are never escaped.

Both directions work on whole strings with ``str.replace``/``str.find`` so the
common case (nothing to escape) costs a few C-level scans.
"""

from __future__ import annotations

from ..errors import LocalProtocolError, RemoteProtocolError

__all__ = ["Escaping", "ESCAPING", "NO_ESCAPING"]


class Escaping:
    """How header names and values are escaped in one protocol version."""

    __slots__ = ("version", "decode_table", "specials", "escapes_cr")

    def __init__(self, version: str, decode_table: dict[str, str]) -> None:
        self.version = version
        #: Character after a backslash -> the character it stands for.
        self.decode_table = decode_table
        #: Characters that must be escaped when sending.
        self.specials = tuple(decode_table.values())
        self.escapes_cr = "\r" in self.specials

    @property
    def enabled(self) -> bool:
        return bool(self.decode_table)

    def unescape(self, text: str) -> str:
        """Decode escape sequences; ``RemoteProtocolError`` on an undefined one."""
        i = text.find("\\")
        if i < 0 or not self.decode_table:
            return text
        table = self.decode_table
        out = []
        start = 0
        while i >= 0:
            out.append(text[start:i])
            rep = table.get(text[i + 1 : i + 2])
            if rep is None:
                seq = text[i : i + 2]
                raise RemoteProtocolError(
                    f"undefined escape sequence {seq!r} in header {text[:64]!r}"
                    f" (STOMP {self.version})"
                )
            out.append(rep)
            start = i + 2
            i = text.find("\\", start)
        out.append(text[start:])
        return "".join(out)

    def escape(self, text: str) -> str:
        """Encode a header name or value for the wire (enabled versions only)."""
        # Backslash first, so the backslashes added afterwards stay single.
        text = text.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
        if self.escapes_cr:
            text = text.replace("\r", "\\r")
        return text

    def needs_escape(self, flat: str) -> bool:
        """Whether any character in ``flat`` (names and values joined) needs escaping."""
        return (
            "\\" in flat
            or ":" in flat
            or "\n" in flat
            or (self.escapes_cr and "\r" in flat)
        )

    def check_unescaped(self, command: str, headers: dict[str, str]) -> None:
        """Check headers that go out without escaping can be read back intact.

        Raises ``LocalProtocolError`` for LF or NUL anywhere, ``:`` or an empty
        name, and a value ending in CR (a CRLF-tolerant reader would drop it).
        """
        for name, value in headers.items():
            if not name or ":" in name or "\n" in name or "\x00" in name:
                raise LocalProtocolError(
                    f"header name {name!r} cannot be sent unescaped in {command}"
                    f" (STOMP {self.version})"
                )
            if "\n" in value or "\x00" in value or value.endswith("\r"):
                raise LocalProtocolError(
                    f"value of header {name!r} cannot be sent unescaped in {command}"
                    f" (STOMP {self.version})"
                )


NO_ESCAPING = Escaping("1.0", {})
ESCAPING: dict[str | None, Escaping] = {
    None: NO_ESCAPING,
    "1.0": NO_ESCAPING,
    "1.1": Escaping("1.1", {"n": "\n", "c": ":", "\\": "\\"}),
    "1.2": Escaping("1.2", {"r": "\r", "n": "\n", "c": ":", "\\": "\\"}),
}
