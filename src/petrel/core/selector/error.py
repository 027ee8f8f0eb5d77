"""The one exception a selector raises: a compile-time error with its column."""

from __future__ import annotations

__all__ = ["SelectorError"]

# Selector text quoted in an error is cut to this many characters.
_MAX_QUOTED = 120


class SelectorError(ValueError):
    """A selector that does not compile.

    ``str(error)`` is meant for the client, e.g.
    ``invalid selector 'a >': unexpected end of input at column 4``.
    ``column`` is 1-based; the end of the input is ``len(text) + 1``.
    """

    def __init__(self, text: str, reason: str, column: int) -> None:
        self.text = text
        self.reason = reason
        self.column = column
        quoted = text if len(text) <= _MAX_QUOTED else text[:_MAX_QUOTED] + "..."
        super().__init__(f"invalid selector '{quoted}': {reason} at column {column}")

    def __reduce__(self):  # keep pickling (multiprocessing, logging handlers) working
        return (type(self), (self.text, self.reason, self.column))
