"""Syntax tree of a selector, and the static kind of each expression.

Nodes are immutable. ``pos`` is the 0-based offset where the expression starts in
the selector text, used for error columns. ``And``/``Or`` are n-ary so that long
chains stay flat instead of nesting one level per operator.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Union

__all__ = [
    "And",
    "Arithmetic",
    "Between",
    "Comparison",
    "Identifier",
    "InList",
    "IsNull",
    "Kind",
    "Like",
    "Literal",
    "Negation",
    "Node",
    "Not",
    "Or",
    "children",
    "depth",
    "identifiers",
    "kind_of",
]


class Kind(enum.Enum):
    """What an expression can be known to produce before any message is seen."""

    BOOLEAN = "boolean"
    NUMBER = "numeric"
    STRING = "string"
    NULL = "NULL"
    ANY = "identifier"  # a property: its type is only known per message


@dataclass(frozen=True, slots=True)
class Literal:
    value: None | bool | int | float | str
    pos: int


@dataclass(frozen=True, slots=True)
class Identifier:
    name: str
    pos: int


@dataclass(frozen=True, slots=True)
class Negation:
    """Unary minus (``op == '-'``) or plus (``op == '+'``)."""

    op: str
    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Arithmetic:
    op: str  # one of + - * / %
    left: Node
    right: Node
    pos: int
    # NUMBER, or ANY for '+' on operands that may both be strings (concatenation).
    kind: Kind = field(default=Kind.NUMBER, compare=False)


@dataclass(frozen=True, slots=True)
class Comparison:
    op: str  # one of = <> < <= > >=
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Between:
    operand: Node
    low: Node
    high: Node
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class InList:
    operand: Node
    values: tuple[str, ...]
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class Like:
    operand: Node
    pattern: str
    escape: str | None
    negated: bool
    pos: int
    matcher: Callable[[str], bool] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]
    pos: int


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]
    pos: int


Node = Union[
    Literal, Identifier, Negation, Arithmetic, Comparison, Between, InList, Like, IsNull, Not, And, Or
]

def kind_of(node: Node) -> Kind:
    if isinstance(node, Literal):
        value = node.value
        if value is None:
            return Kind.NULL
        if isinstance(value, bool):
            return Kind.BOOLEAN
        if isinstance(value, str):
            return Kind.STRING
        return Kind.NUMBER
    if isinstance(node, Identifier):
        return Kind.ANY
    if isinstance(node, Arithmetic):
        return node.kind
    if isinstance(node, Negation):
        return Kind.NUMBER
    return Kind.BOOLEAN


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, (Literal, Identifier)):
        return ()
    if isinstance(node, (Arithmetic, Comparison)):
        return (node.left, node.right)
    if isinstance(node, Between):
        return (node.operand, node.low, node.high)
    if isinstance(node, (And, Or)):
        return node.operands
    return (node.operand,)


def _walk(node: Node) -> Iterator[tuple[Node, int]]:
    """Every node with its depth (root is 1), without recursion."""
    stack = [(node, 1)]
    while stack:
        current, level = stack.pop()
        yield current, level
        stack.extend((child, level + 1) for child in children(current))


def depth(node: Node) -> int:
    return max(level for _, level in _walk(node))


def identifiers(node: Node) -> frozenset[str]:
    return frozenset(n.name for n, _ in _walk(node) if isinstance(n, Identifier))
