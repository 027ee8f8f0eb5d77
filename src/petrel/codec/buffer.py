"""A receive buffer shared by the sans-IO codecs.

Bytes arrive in arbitrary chunks; a codec reads them through a :class:`Buffer`
in one of two ways:

* tentative reads, in the style of wsproto's frame buffer:
  :meth:`Buffer.consume_exactly` returns ``None`` when the bytes are not there
  yet, the codec then calls :meth:`Buffer.rollback`, and :meth:`Buffer.commit`
  once a whole unit (a frame) has been read;
* zero-copy scanning for text protocols: search :attr:`Buffer.data` from
  :attr:`Buffer.pos` with ``bytearray.find`` and move the read position with
  :meth:`Buffer.skip` / :meth:`Buffer.commit`.

Committed bytes are dropped on the next :meth:`Buffer.feed`, so the memory held
is the uncommitted tail plus one chunk. Absolute offsets into :attr:`data` are
valid only until that next ``feed``; keep offsets relative to :attr:`pos` across
feeds. ``max_size`` is the cap on uncommitted bytes a codec allows for one unit;
:attr:`Buffer.exceeded` tells when it is passed (the codec decides what error
that is, and when to check it).
"""

from __future__ import annotations

__all__ = ["Buffer"]


class Buffer:
    """Bytes received but not yet consumed, with a tentative read position."""

    __slots__ = ("data", "pos", "_mark", "max_size")

    def __init__(self, max_size: int | None = None) -> None:
        #: Raw storage. Read it (``find``, slicing) but do not modify it.
        self.data = bytearray()
        #: Absolute offset of the first unread byte in :attr:`data`.
        self.pos = 0
        self._mark = 0
        #: Cap on uncommitted bytes; ``None`` means no cap.
        self.max_size = max_size

    # -- filling -----------------------------------------------------------

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        """Append received bytes, first dropping everything committed."""
        mark = self._mark
        if mark:
            # Deleting a prefix of a bytearray is cheap (CPython moves its start
            # pointer), and what remains is at most one partial unit.
            del self.data[:mark]
            self.pos -= mark
            self._mark = 0
        self.data += chunk

    def clear(self) -> None:
        """Forget everything, committed or not."""
        self.data = bytearray()
        self.pos = 0
        self._mark = 0

    # -- sizes -------------------------------------------------------------

    def __len__(self) -> int:
        """Bytes after the read position."""
        return len(self.data) - self.pos

    def __bool__(self) -> bool:
        return len(self.data) > self.pos

    @property
    def uncommitted(self) -> int:
        """Bytes after the last commit (what a partial unit holds)."""
        return len(self.data) - self._mark

    @property
    def exceeded(self) -> bool:
        """True when more than ``max_size`` bytes are uncommitted."""
        limit = self.max_size
        return limit is not None and len(self.data) - self._mark > limit

    # -- tentative reads -----------------------------------------------------

    def peek(self, n: int | None = None) -> bytes:
        """Up to ``n`` unread bytes (all of them if ``n`` is None), not consumed."""
        pos = self.pos
        end = len(self.data) if n is None else pos + n
        return bytes(self.data[pos:end])

    def find(self, sub: bytes | int, start: int = 0, end: int | None = None) -> int:
        """Index of ``sub`` relative to :attr:`pos`, searching unread bytes; -1 if absent."""
        pos = self.pos
        stop = len(self.data) if end is None else pos + end
        i = self.data.find(sub, pos + start, stop)
        return i - pos if i >= 0 else -1

    def consume_exactly(self, n: int) -> bytes | None:
        """The next ``n`` bytes, or ``None`` (and nothing consumed) if fewer are buffered."""
        pos = self.pos
        end = pos + n
        if end > len(self.data):
            return None
        self.pos = end
        return bytes(self.data[pos:end])

    def consume_at_most(self, n: int) -> bytes:
        """The next ``n`` bytes or fewer; may be empty."""
        pos = self.pos
        end = min(pos + n, len(self.data))
        self.pos = end
        return bytes(self.data[pos:end])

    def consume_until(self, delimiter: bytes, *, limit: int | None = None) -> bytes | None:
        """Bytes before the next ``delimiter``, consuming the delimiter too.

        ``None`` if the delimiter is not buffered yet (or does not start within
        ``limit`` bytes); nothing is consumed then.
        """
        pos = self.pos
        stop = len(self.data) if limit is None else pos + limit + len(delimiter)
        i = self.data.find(delimiter, pos, stop)
        if i < 0:
            return None
        self.pos = i + len(delimiter)
        return bytes(self.data[pos:i])

    def skip(self, n: int) -> None:
        """Advance the read position by ``n`` bytes (at most to the end)."""
        self.pos = min(self.pos + n, len(self.data))

    def consume_to(self, index: int) -> None:
        """Consume and commit everything before absolute offset ``index`` of :attr:`data`."""
        self.pos = self._mark = index

    def commit(self) -> None:
        """Make the reads so far permanent."""
        self._mark = self.pos

    def rollback(self) -> None:
        """Return the read position to the last commit."""
        self.pos = self._mark

    def __repr__(self) -> str:
        return (
            f"<Buffer unread={len(self)} uncommitted={self.uncommitted} "
            f"max_size={self.max_size}>"
        )
