"""What selector operators do to values, in SQL three-valued logic.

Truth values are ``True``, ``False`` and ``None`` (UNKNOWN). Property values are
``None`` (absent), ``bool``, ``int``, ``float`` or ``str``; any other type is
treated like an incompatible value (UNKNOWN), never an error. ``bool`` is never a
number here even though Python makes it an ``int``.

* ``=`` / ``<>`` compare numbers with numbers (int and float mix exactly), strings
  with strings, booleans with booleans; anything with NULL or with an incompatible
  type is UNKNOWN.
* ``<`` ``<=`` ``>`` ``>=`` compare numbers only; strings and booleans give UNKNOWN.
* Petrel extension: when one operand is a number and the other a string that parses
  as a number (STOMP headers are always strings), the parsed number is used. That
  holds for comparisons, BETWEEN, IN and binary arithmetic. Unary minus/plus also
  parse a numeric string.
* ``+`` on two strings concatenates (as ActiveMQ does; results longer than
  ``MAX_CONCATENATION`` are NULL); other arithmetic on non-numbers is NULL.
* ``/`` always divides exactly (``7 / 2`` is ``3.5``), as ActiveMQ Artemis does.
  ``%`` keeps integers integral and takes the sign of the dividend (Java).
  Division or remainder by zero is NULL. An integer result outside the Java long
  range becomes a float, so values stay bounded; arithmetic never raises.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

__all__ = [
    "ARITHMETIC",
    "COMPARISONS",
    "as_number",
    "equals",
    "negate",
    "not_equals",
    "number_from_string",
    "plus",
]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# Longest string '+' builds; beyond it the result is NULL (no memory blow-up from
# a selector that keeps doubling a string).
MAX_CONCATENATION = 1 << 20

_SCALARS = frozenset({str, int, float, bool})
_NUMBERS = frozenset({int, float})

Truth = bool | None


def number_from_string(text: str) -> int | float | None:
    """The number a string spells (``'42'``, ``' -1.5e3 '``), else None."""
    if not text.isascii() or "_" in text:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def as_number(value: object) -> int | float | None:
    """A number as itself, a numeric string as its number, anything else None."""
    kind = type(value)
    if kind is int or kind is float:
        return value  # type: ignore[return-value]
    if kind is str:
        return number_from_string(value)  # type: ignore[arg-type]
    return None


def _numeric_pair(a: object, b: object) -> tuple[int | float, int | float] | None:
    """Both as numbers if one is a number and the other a number or numeric string."""
    ta = type(a)
    tb = type(b)
    if ta in _NUMBERS:
        if tb in _NUMBERS:
            return a, b  # type: ignore[return-value]
        if tb is str:
            parsed = number_from_string(b)  # type: ignore[arg-type]
            return None if parsed is None else (a, parsed)  # type: ignore[return-value]
    elif tb in _NUMBERS and ta is str:
        parsed = number_from_string(a)  # type: ignore[arg-type]
        return None if parsed is None else (parsed, b)  # type: ignore[return-value]
    return None


def equals(a: object, b: object) -> Truth:
    ta = type(a)
    if ta is type(b) and ta in _SCALARS:
        return a == b
    if a is None or b is None:
        return None
    pair = _numeric_pair(a, b)
    if pair is None:
        return None
    return pair[0] == pair[1]


def not_equals(a: object, b: object) -> Truth:
    result = equals(a, b)
    return None if result is None else not result


def _ordering(op: Callable[[object, object], bool]) -> Callable[[object, object], Truth]:
    def compare(a: object, b: object) -> Truth:
        ta = type(a)
        tb = type(b)
        if (ta is int or ta is float) and (tb is int or tb is float):
            return op(a, b)
        pair = _numeric_pair(a, b)
        if pair is None:
            return None
        return op(pair[0], pair[1])

    return compare


COMPARISONS: dict[str, Callable[[object, object], Truth]] = {
    "=": equals,
    "<>": not_equals,
    "<": _ordering(operator.lt),
    "<=": _ordering(operator.le),
    ">": _ordering(operator.gt),
    ">=": _ordering(operator.ge),
}


def _fit(result: int | float) -> int | float:
    if type(result) is int and not INT64_MIN <= result <= INT64_MAX:
        return float(result)
    return result


def _divide(a: int | float, b: int | float) -> int | float | None:
    if b == 0:
        return None
    return a / b


def _remainder(a: int | float, b: int | float) -> int | float | None:
    if b == 0:
        return None
    if type(a) is int and type(b) is int:
        rest = abs(a) % abs(b)
        return rest if a >= 0 else -rest
    return math.fmod(a, b)


def _binary(op: Callable[[int | float, int | float], int | float | None]):
    def apply(a: object, b: object) -> int | float | None:
        ta = type(a)
        tb = type(b)
        if not ((ta is int or ta is float) and (tb is int or tb is float)):
            pair = _numeric_pair(a, b)
            if pair is None:
                return None
            a, b = pair
        try:
            result = op(a, b)  # type: ignore[arg-type]
            return None if result is None else _fit(result)
        except (ArithmeticError, ValueError):
            return None

    return apply


_add = _binary(operator.add)


def _add_or_concatenate(a: object, b: object) -> int | float | str | None:
    if type(a) is str and type(b) is str:
        if len(a) + len(b) > MAX_CONCATENATION:  # type: ignore[arg-type]
            return None
        return a + b  # type: ignore[operator]
    return _add(a, b)


ARITHMETIC: dict[str, Callable[[object, object], object]] = {
    "+": _add_or_concatenate,
    "-": _binary(operator.sub),
    "*": _binary(operator.mul),
    "/": _binary(_divide),
    "%": _binary(_remainder),
}


def negate(value: object) -> int | float | None:
    number = as_number(value)
    if number is None:
        return None
    try:
        return _fit(-number)
    except OverflowError:  # an absurdly large int from a message
        return None


def plus(value: object) -> int | float | None:
    return as_number(value)
