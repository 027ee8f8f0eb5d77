"""Recursive-descent parser: selector text to a checked syntax tree.

Precedence, loosest first (JMS 2.0 §3.8.1.1, with ActiveMQ's split of the
comparison level)::

    OR
    AND
    NOT
    =  <>  IS [NOT] NULL                      (left-associative)
    <  <=  >  >=  [NOT] BETWEEN  [NOT] IN  [NOT] LIKE
    +  -                                     (binary)
    *  /  %
    +  -                                     (unary)
    literal, identifier, ( expression )

The tree is type-checked as it is built, so selectors that can never make sense
fail at compile time with a column: ``1 + 2`` or ``a AND 3`` (not boolean),
``TRUE + 1``, ``(a = 1) < 2``, ``5 LIKE 'x'``, ``x IN (1, 2)`` (JMS allows string
literals only), a multi-character ESCAPE. Nesting is bounded so no input can
exhaust the Python stack.
"""

from __future__ import annotations

from petrel.core.selector.error import SelectorError
from petrel.core.selector.lexer import LONG_MAX, Token, TokenKind, tokenize
from petrel.core.selector.like import compile_like
from petrel.core.selector.nodes import (
    And,
    Arithmetic,
    Between,
    Comparison,
    Identifier,
    InList,
    IsNull,
    Kind,
    Like,
    Literal,
    Negation,
    Node,
    Not,
    Or,
    depth,
    kind_of,
)

__all__ = ["MAX_DEPTH", "MAX_NESTING", "parse"]

# Parentheses, NOT and unary signs nested deeper than this are refused.
MAX_NESTING = 40
# Syntax trees deeper than this are refused (long chains like a+a+a+... count too).
MAX_DEPTH = 100

_ORDERING = frozenset({"<", "<=", ">", ">="})
_PREDICATES = frozenset({"BETWEEN", "IN", "LIKE"})
_LITERAL_KEYWORDS = {"TRUE": True, "FALSE": False, "NULL": None}


def parse(text: str) -> Node | None:
    """The checked tree of ``text``; None for an empty selector (only blanks/comments)."""
    return _Parser(text).parse()


class _Parser:
    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = tokenize(text)
        self._index = 0
        self._nesting = 0

    # -- token helpers --------------------------------------------------------

    def _peek(self, ahead: int = 0) -> Token:
        index = min(self._index + ahead, len(self._tokens) - 1)
        return self._tokens[index]

    def _advance(self) -> Token:
        token = self._tokens[self._index]
        if token.kind is not TokenKind.END:
            self._index += 1
        return token

    def _at_keyword(self, word: str, ahead: int = 0) -> bool:
        token = self._peek(ahead)
        return token.kind is TokenKind.KEYWORD and token.value == word

    def _at_operator(self, symbol: str) -> bool:
        token = self._peek()
        return token.kind is TokenKind.OPERATOR and token.value == symbol

    def _expect_keyword(self, word: str) -> Token:
        if not self._at_keyword(word):
            raise self._error_at(self._peek(), f"expected {word} but found {self._peek().describe()}")
        return self._advance()

    def _expect_operator(self, symbol: str) -> Token:
        if not self._at_operator(symbol):
            raise self._error_at(self._peek(), f"expected '{symbol}' but found {self._peek().describe()}")
        return self._advance()

    def _expect_string(self, what: str) -> Token:
        token = self._peek()
        if token.kind is not TokenKind.STRING:
            raise self._error_at(token, f"{what} must be a string literal, found {token.describe()}")
        return self._advance()

    def _error(self, pos: int, reason: str) -> SelectorError:
        return SelectorError(self._text, reason, pos + 1)

    def _error_at(self, token: Token, reason: str) -> SelectorError:
        return self._error(token.pos, reason)

    def _unexpected(self, token: Token) -> SelectorError:
        return self._error_at(token, f"unexpected {token.describe()}")

    def _enter(self, token: Token) -> None:
        self._nesting += 1
        if self._nesting > MAX_NESTING:
            raise self._error_at(token, f"expression nested more than {MAX_NESTING} levels deep")

    # -- static checks --------------------------------------------------------

    def _condition(self, node: Node) -> Node:
        kind = kind_of(node)
        if kind in (Kind.BOOLEAN, Kind.ANY, Kind.NULL):
            return node
        raise self._error(node.pos, f"expected a boolean expression, found a {kind.value} one")

    def _numeric(self, node: Node, op: str) -> Node:
        if kind_of(node) is Kind.BOOLEAN:
            raise self._error(node.pos, f"operator '{op}' needs numbers, not a boolean")
        return node

    def _ordered(self, node: Node, op: str) -> Node:
        if kind_of(node) is Kind.BOOLEAN:
            raise self._error(node.pos, f"booleans can only be compared with = or <>, not '{op}'")
        return node

    def _textual(self, node: Node, what: str) -> Node:
        kind = kind_of(node)
        if kind in (Kind.BOOLEAN, Kind.NUMBER):
            raise self._error(node.pos, f"{what} needs a string operand, not a {kind.value} one")
        return node

    # -- grammar --------------------------------------------------------------

    def parse(self) -> Node | None:
        if self._peek().kind is TokenKind.END:
            return None
        node = self._or()
        token = self._peek()
        if token.kind is not TokenKind.END:
            raise self._unexpected(token)
        self._condition(node)
        if depth(node) > MAX_DEPTH:
            raise self._error(0, f"expression more than {MAX_DEPTH} levels deep")
        return node

    def _or(self) -> Node:
        first = self._and()
        if not self._at_keyword("OR"):
            return first
        operands = [self._condition(first)]
        while self._at_keyword("OR"):
            self._advance()
            operands.append(self._condition(self._and()))
        return Or(tuple(operands), first.pos)

    def _and(self) -> Node:
        first = self._not()
        if not self._at_keyword("AND"):
            return first
        operands = [self._condition(first)]
        while self._at_keyword("AND"):
            self._advance()
            operands.append(self._condition(self._not()))
        return And(tuple(operands), first.pos)

    def _not(self) -> Node:
        if not self._at_keyword("NOT"):
            return self._equality()
        token = self._advance()
        self._enter(token)
        operand = self._condition(self._not())
        self._nesting -= 1
        return Not(operand, token.pos)

    def _equality(self) -> Node:
        left = self._relational()
        while True:
            token = self._peek()
            if token.kind is TokenKind.OPERATOR and token.value in ("=", "<>"):
                self._advance()
                left = Comparison(token.value, left, self._relational(), left.pos)  # type: ignore[arg-type]
            elif self._at_keyword("IS"):
                self._advance()
                negated = self._at_keyword("NOT")
                if negated:
                    self._advance()
                self._expect_keyword("NULL")
                left = IsNull(left, negated, left.pos)
            else:
                return left

    def _relational(self) -> Node:
        left = self._additive()
        while True:
            token = self._peek()
            if token.kind is TokenKind.OPERATOR and token.value in _ORDERING:
                op = token.value
                self._advance()
                right = self._additive()
                self._ordered(left, op)  # type: ignore[arg-type]
                self._ordered(right, op)  # type: ignore[arg-type]
                left = Comparison(op, left, right, left.pos)  # type: ignore[arg-type]
                continue
            negated = self._at_keyword("NOT")
            if negated:
                following = self._peek(1)
                if not (following.kind is TokenKind.KEYWORD and following.value in _PREDICATES):
                    raise self._error_at(
                        following, f"expected BETWEEN, IN or LIKE after NOT, found {following.describe()}"
                    )
                self._advance()
            if self._at_keyword("BETWEEN"):
                left = self._between(left, negated)
            elif self._at_keyword("IN"):
                left = self._in(left, negated)
            elif self._at_keyword("LIKE"):
                left = self._like(left, negated)
            else:
                return left

    def _between(self, operand: Node, negated: bool) -> Node:
        self._advance()
        low = self._additive()
        self._expect_keyword("AND")
        high = self._additive()
        for node in (operand, low, high):
            self._ordered(node, "BETWEEN")
        return Between(operand, low, high, negated, operand.pos)

    def _in(self, operand: Node, negated: bool) -> Node:
        self._advance()
        self._textual(operand, "IN")
        self._expect_operator("(")
        values = [self._expect_string("an IN list item").value]
        while self._at_operator(","):
            self._advance()
            values.append(self._expect_string("an IN list item").value)
        self._expect_operator(")")
        return InList(operand, tuple(values), negated, operand.pos)  # type: ignore[arg-type]

    def _like(self, operand: Node, negated: bool) -> Node:
        self._advance()
        self._textual(operand, "LIKE")
        pattern = self._expect_string("a LIKE pattern")
        escape = None
        if self._at_keyword("ESCAPE"):
            self._advance()
            escape_token = self._expect_string("an ESCAPE character")
            escape = escape_token.value
            if len(escape) != 1:  # type: ignore[arg-type]
                raise self._error_at(
                    escape_token, f"ESCAPE must be a single character, not {escape_token.text}"
                )
        matcher = compile_like(pattern.value, escape)  # type: ignore[arg-type]
        return Like(operand, pattern.value, escape, negated, operand.pos, matcher)  # type: ignore[arg-type]

    def _additive(self) -> Node:
        left = self._multiplicative()
        while True:
            token = self._peek()
            if token.kind is not TokenKind.OPERATOR or token.value not in ("+", "-"):
                return left
            op = token.value
            self._advance()
            right = self._multiplicative()
            kind = Kind.NUMBER
            if op == "+" and Kind.NUMBER not in (kind_of(left), kind_of(right)):
                kind = Kind.ANY  # may be a string concatenation
            self._numeric(left, op)  # type: ignore[arg-type]
            self._numeric(right, op)  # type: ignore[arg-type]
            left = Arithmetic(op, left, right, left.pos, kind)  # type: ignore[arg-type]

    def _multiplicative(self) -> Node:
        left = self._unary()
        while True:
            token = self._peek()
            if token.kind is not TokenKind.OPERATOR or token.value not in ("*", "/", "%"):
                return left
            op = token.value
            self._advance()
            right = self._unary()
            left = Arithmetic(op, self._numeric(left, op), self._numeric(right, op), left.pos)  # type: ignore[arg-type]

    def _unary(self) -> Node:
        token = self._peek()
        if token.kind is not TokenKind.OPERATOR or token.value not in ("+", "-"):
            return self._primary()
        self._advance()
        following = self._peek()
        if following.kind in (TokenKind.INTEGER, TokenKind.FLOAT):
            # Fold the sign into the literal: this is what lets -9223372036854775808 in.
            self._advance()
            value = following.value
            if token.value == "+":
                value = self._in_range(following)
            return Literal(-value if token.value == "-" else value, token.pos)  # type: ignore[operator]
        self._enter(token)
        operand = self._numeric(self._unary(), token.value)  # type: ignore[arg-type]
        self._nesting -= 1
        return Negation(token.value, operand, token.pos)  # type: ignore[arg-type]

    def _in_range(self, token: Token) -> int | float:
        value = token.value
        if token.kind is TokenKind.INTEGER and value > LONG_MAX:  # type: ignore[operator]
            raise self._error_at(token, f"integer literal '{token.text}' out of range")
        return value  # type: ignore[return-value]

    def _primary(self) -> Node:
        token = self._advance()
        kind = token.kind
        if kind is TokenKind.IDENT:
            return Identifier(token.value, token.pos)  # type: ignore[arg-type]
        if kind is TokenKind.STRING:
            return Literal(token.value, token.pos)  # type: ignore[arg-type]
        if kind is TokenKind.INTEGER or kind is TokenKind.FLOAT:
            return Literal(self._in_range(token), token.pos)
        if kind is TokenKind.KEYWORD and token.value in _LITERAL_KEYWORDS:
            return Literal(_LITERAL_KEYWORDS[token.value], token.pos)  # type: ignore[index]
        if kind is TokenKind.OPERATOR and token.value == "(":
            self._enter(token)
            inner = self._or()
            self._expect_operator(")")
            self._nesting -= 1
            return inner
        raise self._unexpected(token)
