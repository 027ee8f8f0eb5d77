"""Compile a checked syntax tree into nested Python closures.

Every closure takes ``get`` (the message's ``selector_value`` bound method) and
returns a value: ``None``/bool/int/float/str for expressions, ``True``/``False``/
``None`` (UNKNOWN) for conditions. No source text is generated, so nothing in a
selector can reach ``eval``.

Work is moved to compile time where it can be:

* subtrees without identifiers are evaluated once and become constants;
* ``identifier <op> constant`` (the usual shape) gets a dedicated closure that
  checks the common types inline and only falls back to the general rules in
  ``semantics`` for mixed types;
* IN lists become frozensets; LIKE patterns were compiled by the parser.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from petrel.core.selector import semantics
from petrel.core.selector.nodes import (
    And,
    Arithmetic,
    Between,
    Comparison,
    Identifier,
    InList,
    IsNull,
    Like,
    Literal,
    Negation,
    Node,
    Not,
    Or,
    identifiers,
)

__all__ = ["Evaluator", "Getter", "build_condition"]

Getter = Callable[[str], object]
Evaluator = Callable[[Getter], object]

_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ORDER_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def build_condition(node: Node) -> Evaluator:
    """Closure giving True, False or None (UNKNOWN) for a boolean-kind node."""
    if isinstance(node, Identifier):
        name = node.name

        def boolean_property(get: Getter) -> object:
            value = get(name)
            return value if value is True or value is False else None

        return boolean_property
    constant, value = _constant(node)
    if constant:
        truth = value if value is True or value is False else None
        return lambda get: truth
    return _build(node)


def _absent(name: str) -> None:
    return None


def _constant(node: Node) -> tuple[bool, object]:
    """(True, value) when ``node`` reads no property, else (False, None)."""
    if isinstance(node, Literal):
        return True, node.value
    if isinstance(node, Identifier) or identifiers(node):
        return False, None
    return True, _build(node)(_absent)


def _value(node: Node) -> Evaluator:
    if isinstance(node, Identifier):
        name = node.name
        return lambda get: get(name)
    constant, value = _constant(node)
    if constant:
        return lambda get: value
    return _build(node)


def _build(node: Node) -> Evaluator:
    if isinstance(node, Literal):
        value = node.value
        return lambda get: value
    if isinstance(node, Identifier):
        return _value(node)
    if isinstance(node, Comparison):
        return _comparison(node)
    if isinstance(node, (And, Or)):
        return _logical(node)
    if isinstance(node, Not):
        inner = build_condition(node.operand)

        def negation(get: Getter) -> object:
            result = inner(get)
            return None if result is None else not result

        return negation
    if isinstance(node, Arithmetic):
        return _arithmetic(node)
    if isinstance(node, Negation):
        operand = _value(node.operand)
        sign = semantics.negate if node.op == "-" else semantics.plus
        return lambda get: sign(operand(get))
    if isinstance(node, Between):
        return _between(node)
    if isinstance(node, InList):
        return _in_list(node)
    if isinstance(node, Like):
        return _like(node)
    if isinstance(node, IsNull):
        return _is_null(node)
    raise TypeError(f"not a selector node: {node!r}")


# -- comparisons --------------------------------------------------------------


def _comparison(node: Comparison) -> Evaluator:
    op, left, right = node.op, node.left, node.right
    left_constant, _ = _constant(left)
    if left_constant and not isinstance(right, Literal):
        op, left, right = _FLIPPED[op], right, left
    right_constant, constant = _constant(right)
    if isinstance(left, Identifier) and right_constant:
        return _property_vs_constant(left.name, op, constant)
    compare = semantics.COMPARISONS[op]
    first = _value(left)
    if right_constant:
        return lambda get: compare(first(get), constant)
    second = _value(right)
    return lambda get: compare(first(get), second(get))


def _property_vs_constant(name: str, op: str, constant: object) -> Evaluator:
    compare = semantics.COMPARISONS[op]
    kind = type(constant)
    if constant is None:
        return lambda get: None  # anything compared with NULL is UNKNOWN
    if op in ("=", "<>") and kind is str:
        equal = op == "="

        def string_equality(get: Getter) -> object:
            value = get(name)
            if type(value) is str:
                return (value == constant) is equal
            return compare(value, constant)

        return string_equality
    if kind is int or kind is float:
        if op in ("=", "<>"):
            equal = op == "="

            def numeric_equality(get: Getter) -> object:
                value = get(name)
                tv = type(value)
                if tv is int or tv is float:
                    return (value == constant) is equal
                return compare(value, constant)

            return numeric_equality
        order = _ORDER_OPS[op]

        def numeric_order(get: Getter) -> object:
            value = get(name)
            tv = type(value)
            if tv is int or tv is float:
                return order(value, constant)
            return compare(value, constant)

        return numeric_order
    return lambda get: compare(get(name), constant)


def _between(node: Between) -> Evaluator:
    negated = node.negated
    low_constant, low = _constant(node.low)
    high_constant, high = _constant(node.high)
    numbers = (int, float)
    if (
        isinstance(node.operand, Identifier)
        and low_constant
        and high_constant
        and type(low) in numbers
        and type(high) in numbers
    ):
        name = node.operand.name

        def numeric_range(get: Getter) -> object:
            value = get(name)
            tv = type(value)
            if tv is not int and tv is not float:
                if tv is not str:
                    return None
                value = semantics.number_from_string(value)  # type: ignore[arg-type]
                if value is None:
                    return None
            return (low <= value <= high) is not negated  # type: ignore[operator]

        return numeric_range
    operand = _value(node.operand)
    lower = _value(node.low)
    upper = _value(node.high)
    at_least = semantics.COMPARISONS[">="]
    at_most = semantics.COMPARISONS["<="]

    def between(get: Getter) -> object:
        value = operand(get)
        result = _kleene_and(at_least(value, lower(get)), at_most(value, upper(get)))
        if result is None:
            return None
        return result is not negated

    return between


def _kleene_and(a: object, b: object) -> object:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _in_list(node: InList) -> Evaluator:
    strings = frozenset(node.values)
    parsed = [semantics.number_from_string(v) for v in node.values]
    numbers = frozenset(p for p in parsed if p is not None)
    # A number is UNKNOWN against an item that is not numeric (like '='), so a
    # number missing from the list is FALSE only if every item was numeric.
    miss = None if None in parsed else False
    negated = node.negated
    operand = _value(node.operand)

    def member(get: Getter) -> object:
        value = operand(get)
        tv = type(value)
        if tv is str:
            return (value in strings) is not negated
        if tv is int or tv is float:
            if value in numbers:
                return not negated
            return None if miss is None else negated
        return None

    return member


def _like(node: Like) -> Evaluator:
    matcher = node.matcher
    negated = node.negated
    operand = _value(node.operand)

    def like(get: Getter) -> object:
        value = operand(get)
        if type(value) is not str:
            return None
        return matcher(value) is not negated

    return like


def _is_null(node: IsNull) -> Evaluator:
    operand = _value(node.operand)
    if node.negated:
        return lambda get: operand(get) is not None
    return lambda get: operand(get) is None


# -- logic and arithmetic -----------------------------------------------------


def _logical(node: And | Or) -> Evaluator:
    operands = [build_condition(child) for child in node.operands]
    # AND stops at the first FALSE, OR at the first TRUE: the "decisive" value.
    decisive = isinstance(node, Or)
    if len(operands) == 2:
        first, second = operands

        def pair(get: Getter) -> object:
            a = first(get)
            if a is decisive:
                return decisive
            b = second(get)
            if b is decisive:
                return decisive
            if a is None or b is None:
                return None
            return not decisive

        return pair

    def chain(get: Getter) -> object:
        unknown = False
        for operand in operands:
            result = operand(get)
            if result is decisive:
                return decisive
            if result is None:
                unknown = True
        return None if unknown else not decisive

    return chain


def _arithmetic(node: Arithmetic) -> Evaluator:
    apply = semantics.ARITHMETIC[node.op]
    first = _value(node.left)
    right_constant, constant = _constant(node.right)
    if right_constant:
        return lambda get: apply(first(get), constant)
    second = _value(node.right)
    return lambda get: apply(first(get), second(get))
