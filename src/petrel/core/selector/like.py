"""LIKE patterns: ``%`` is any run of characters, ``_`` exactly one.

With ``ESCAPE 'c'``, ``c`` followed by ``%``, ``_`` or ``c`` stands for that character
literally; before anything else (or at the end) ``c`` is an ordinary character.
This is what ActiveMQ Artemis does, so ``'%_%' ESCAPE '%'`` means "contains ``_``".

A pattern is split on ``%`` into fixed-length segments. Only the first and last
segments are anchored; every middle segment is matched at its leftmost place,
which is always right for fixed-length pieces. So matching is a handful of
``str.find`` calls, never backtracking, and pattern characters (``.``, ``*``,
``[``...) are never special. A segment containing ``_`` is a tiny escaped regex.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["compile_like"]

_ANY = object()  # marker for '%'
_ONE = object()  # marker for '_'


def compile_like(pattern: str, escape: str | None = None) -> Callable[[str], bool]:
    """Return a predicate on strings. ``escape`` must be one character or None."""
    if escape is not None and len(escape) != 1:
        raise ValueError("ESCAPE must be a single character")
    segments = _segments(_scan(pattern, escape))
    if len(segments) == 1:
        return _exact(segments[0])
    head, *middle, tail = segments
    if not middle and not any(p is _ONE for p in head + tail):
        prefix = "".join(head)
        suffix = "".join(tail)
        if not prefix and not suffix:
            return _always
        if not suffix:
            return lambda value: value.startswith(prefix)
        if not prefix:
            return lambda value: value.endswith(suffix)
        floor = len(prefix) + len(suffix)
        return lambda value: (
            len(value) >= floor and value.startswith(prefix) and value.endswith(suffix)
        )
    if len(middle) == 1 and not head and not tail and _ONE not in middle[0]:
        needle = "".join(middle[0])
        return lambda value: needle in value
    return _general(_Segment(head), [_Segment(s) for s in middle if s], _Segment(tail))


def _scan(pattern: str, escape: str | None) -> list[object]:
    """Pattern as a list of literal characters and _ANY/_ONE markers."""
    items: list[object] = []
    i = 0
    n = len(pattern)
    while i < n:
        char = pattern[i]
        if char == escape and i + 1 < n and pattern[i + 1] in ("%", "_", escape):
            items.append(pattern[i + 1])
            i += 2
            continue
        if char == "%":
            items.append(_ANY)
        elif char == "_":
            items.append(_ONE)
        else:
            items.append(char)
        i += 1
    return items


def _segments(items: list[object]) -> list[list[object]]:
    """Split on _ANY: n wildcards give n + 1 segments (possibly empty)."""
    segments: list[list[object]] = [[]]
    for item in items:
        if item is _ANY:
            segments.append([])
        else:
            segments[-1].append(item)
    return segments


def _always(value: str) -> bool:
    return True


def _exact(segment: list[object]) -> Callable[[str], bool]:
    if _ONE not in segment:
        text = "".join(segment)  # type: ignore[arg-type]
        return lambda value: value == text
    regex = _Segment(segment).regex
    assert regex is not None
    fullmatch = regex.fullmatch
    return lambda value: fullmatch(value) is not None


class _Segment:
    """A fixed-length piece between two '%': literal text or a small regex."""

    __slots__ = ("length", "text", "regex")

    def __init__(self, items: list[object]) -> None:
        self.length = len(items)
        if _ONE in items:
            self.text = ""
            source = "".join("." if item is _ONE else re.escape(item) for item in items)  # type: ignore[arg-type]
            self.regex: re.Pattern[str] | None = re.compile(source, re.DOTALL)
        else:
            self.text = "".join(items)  # type: ignore[arg-type]
            self.regex = None

    def at(self, value: str, pos: int) -> bool:
        if self.regex is None:
            return value.startswith(self.text, pos)
        return self.regex.match(value, pos, pos + self.length) is not None

    def find(self, value: str, pos: int, end: int) -> int:
        if self.regex is None:
            return value.find(self.text, pos, end)
        found = self.regex.search(value, pos, end)
        return -1 if found is None else found.start()


def _general(head: _Segment, middle: list[_Segment], tail: _Segment) -> Callable[[str], bool]:
    head_length = head.length
    tail_length = tail.length

    def match(value: str) -> bool:
        end = len(value) - tail_length
        if end < head_length:
            return False
        if head_length and not head.at(value, 0):
            return False
        if tail_length and not tail.at(value, end):
            return False
        pos = head_length
        for segment in middle:
            found = segment.find(value, pos, end)
            if found < 0:
                return False
            pos = found + segment.length
        return True

    return match
