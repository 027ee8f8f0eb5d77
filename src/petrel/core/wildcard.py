"""Artemis wildcard syntax for addresses: matching and precedence.

An address is a list of words separated by ``.``.  In a pattern, a word ``*``
matches exactly one word and a word ``#`` matches zero or more words; any other
word matches itself only.  ``*`` and ``#`` are wildcards only as whole words:
``news.eu*`` is a literal address.

Matching compiles each pattern once (an LRU cache keyed by the pattern) into the
cheapest test that works: string equality for literal patterns and one
precompiled regular expression otherwise.

Precedence decides which of several matching patterns is the more specific one
(Artemis ``HierarchicalObjectRepository``):

1. a literal pattern beats any pattern with ``*``, which beats any with ``#``;
2. among ``#`` patterns, the longer pattern string wins;
3. among ``*`` patterns, scanning words left to right, the first position where
   one pattern holds a literal word and the other ``*`` decides: the literal wins.
   (Artemis's own comparator is not symmetric for e.g. ``a.*.c`` against
   ``a.b.*``; this is the consistent form of the documented rule.)

Ties (same class, same length) fall back to the shorter string, then to plain
string order, so sorting is total and deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache

__all__ = [
    "DELIMITER",
    "ANY_WORDS",
    "SINGLE_WORD",
    "is_wildcard",
    "compile_pattern",
    "matches",
    "specificity",
    "by_specificity",
]

DELIMITER = "."
ANY_WORDS = "#"
SINGLE_WORD = "*"

# Precedence classes, most specific first.
_LITERAL = 0
_SINGLE = 1
_ANY = 2

_WORD = "[^.]*"  # one word: anything but the delimiter (an empty word is a word)


def _words(pattern: str) -> list[str]:
    return pattern.split(DELIMITER)


def _kind(words: list[str]) -> int:
    if ANY_WORDS in words:
        return _ANY
    if SINGLE_WORD in words:
        return _SINGLE
    return _LITERAL


def is_wildcard(pattern: str) -> bool:
    """True if ``pattern`` holds a ``*`` or ``#`` word."""
    if SINGLE_WORD not in pattern and ANY_WORDS not in pattern:
        return False
    return _kind(_words(pattern)) != _LITERAL


def _regex(words: list[str]) -> str:
    parts: list[str] = []
    need_delimiter = False  # does the next word start with an escaped "."?
    previous = None
    for word in words:
        if word == ANY_WORDS:
            if previous == ANY_WORDS:
                continue  # "#.#" is the same as "#"
            if not parts:
                # leading "#": zero or more "word." prefixes, then the rest
                parts.append(f"(?:{_WORD}\\.)*")
                need_delimiter = False
            else:
                parts.append(f"(?:\\.{_WORD})*")
                need_delimiter = True
        else:
            if need_delimiter:
                parts.append("\\.")
            parts.append(_WORD if word == SINGLE_WORD else re.escape(word))
            need_delimiter = True
        previous = word
    if parts == [f"(?:{_WORD}\\.)*"]:
        return ".*"  # the pattern is just "#": every address
    return "".join(parts)


@lru_cache(maxsize=8192)
def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """A predicate ``address -> bool`` for ``pattern`` (cached)."""
    words = _words(pattern)
    if _kind(words) == _LITERAL:
        return pattern.__eq__
    fullmatch = re.compile(_regex(words), re.DOTALL).fullmatch

    def match(address: str) -> bool:
        return fullmatch(address) is not None

    return match


def matches(pattern: str, address: str) -> bool:
    """True if ``address`` matches the wildcard ``pattern``."""
    if pattern == address:
        return True
    return compile_pattern(pattern)(address)


@lru_cache(maxsize=8192)
def specificity(pattern: str) -> tuple:
    """Sort key: a smaller key is a more specific pattern (see module doc)."""
    words = _words(pattern)
    kind = _kind(words)
    if kind == _ANY:
        return (_ANY, -len(pattern), (), len(pattern), pattern)
    if kind == _SINGLE:
        # False (literal) sorts before True ("*"): the first literal position wins.
        shape = tuple(word == SINGLE_WORD for word in words)
        return (_SINGLE, 0, shape, len(pattern), pattern)
    return (_LITERAL, 0, (), len(pattern), pattern)


def by_specificity(patterns: Iterable[str]) -> list[str]:
    """``patterns`` sorted most specific first."""
    return sorted(patterns, key=specificity)
