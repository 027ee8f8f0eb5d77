"""JMS message selectors (the SQL-92 subset of JMS 2.0 §3.8.1, as ActiveMQ accepts it).

    selector = compile_selector("JMSPriority > 4 AND region IN ('eu', 'us')")
    selector.matches(message)   # message.selector_value(name) -> value or None

``compile_selector`` is the only call that raises (``SelectorError``, a
``ValueError`` whose text names the column). ``matches`` is True only when the
expression is TRUE; FALSE and UNKNOWN (SQL three-valued logic, e.g. a comparison
with an absent property) do not match, and no message can make it raise.

Grammar: string literals in single quotes (``''`` is a quote); integers in decimal,
hex (``0x1F``) and octal (``017``) within the Java long range, optional ``L``;
floats such as ``1.5``, ``.5``, ``7.``, ``1e10``, optional ``F``/``D`` suffix;
``TRUE``/``FALSE``/``NULL``; Java identifiers (case-sensitive); keywords are
case-insensitive; ``-- line`` and ``/* block */`` comments. Operators and their
precedence are listed in ``parser``; value rules in ``semantics``, including the
Petrel extensions:

* a numeric string compared with (or combined arithmetically with) a number is
  used as that number, because STOMP header values are always strings:
  ``priority > 5`` matches the header ``priority:7``;
* ``+`` on two strings concatenates and ``%`` is the remainder, as in ActiveMQ;
  ``/`` is exact division (``7 / 2 = 3.5``), as in ActiveMQ Artemis.

An empty selector (blank or only comments) matches every message: JMS treats an
empty selector as no selector.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Protocol

from petrel.core.selector.error import SelectorError
from petrel.core.selector.evaluate import Evaluator, build_condition
from petrel.core.selector.nodes import identifiers
from petrel.core.selector.parser import parse

__all__ = ["Selectable", "Selector", "SelectorError", "compile_selector"]

log = logging.getLogger("petrel.core.selector")

# Compiled selectors kept by compile_selector (consumers often share selectors).
CACHE_SIZE = 1024


class Selectable(Protocol):
    def selector_value(self, name: str) -> object | None: ...


def _match_all(get: object) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector. Equal when the texts are equal."""

    text: str
    identifiers: frozenset[str] = field(compare=False)
    _evaluate: Evaluator = field(compare=False, repr=False)

    def matches(self, message: Selectable) -> bool:
        """True only if the selector is TRUE for ``message``; never raises."""
        try:
            return self._evaluate(message.selector_value) is True
        except Exception:  # a misbehaving message object must not break dispatch
            log.debug("selector %r failed on %r", self.text, message, exc_info=True)
            return False

    def evaluate(self, message: Selectable) -> bool | None:
        """The three-valued result: True, False or None (UNKNOWN)."""
        return self._evaluate(message.selector_value)  # type: ignore[return-value]


def compile_selector(text: str) -> Selector:
    """Compile ``text``; raise SelectorError (with a column) if it is not a valid selector."""
    if not isinstance(text, str):
        raise SelectorError(repr(text), "a selector must be a string", 1)
    return _compile(text)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _compile(text: str) -> Selector:
    try:
        tree = parse(text)
        if tree is None:
            return Selector(text, frozenset(), _match_all)
        return Selector(text, identifiers(tree), build_condition(tree))
    except RecursionError:  # a last resort: the parser bounds nesting itself
        raise SelectorError(text, "expression nested too deeply", 1) from None
