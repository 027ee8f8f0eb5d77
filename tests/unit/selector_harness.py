"""Evaluating selectors in tests: a dict-backed message and three-valued results.

Shared by test_selector_grammar.py and test_selector_operators.py (import by name: the
test directory is on ``sys.path``).
"""

from __future__ import annotations

from petrel.core.selector import compile_selector

__all__ = ["F", "Msg", "T", "U", "ev"]

T, F, U = True, False, None  # SQL TRUE, FALSE and UNKNOWN as evaluate() returns them


class Msg:
    """A tiny dict-backed message."""

    def __init__(self, **props: object) -> None:
        self.props = props

    def selector_value(self, name: str) -> object | None:
        return self.props.get(name)


def ev(text: str, **props: object) -> bool | None:
    """Three-valued result of ``text`` on a message with ``props``."""
    return compile_selector(text).evaluate(Msg(**props))
