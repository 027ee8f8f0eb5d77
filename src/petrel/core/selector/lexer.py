"""Tokens of the selector language.

One master regular expression splits the text; a second look at each number checks
what the regex cannot say alone (octal digits, the 64-bit range, junk glued to a
number such as ``1abc``). Whitespace, ``-- line`` and ``/* block */`` comments are
skipped, as ActiveMQ does. Keywords are case-insensitive ASCII words; everything
else that looks like a Java identifier is an identifier and keeps its case.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from petrel.core.selector.error import SelectorError

__all__ = ["KEYWORDS", "Token", "TokenKind", "tokenize"]

KEYWORDS = frozenset(
    {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"}
)

# Largest magnitude of an integer literal: Java long. 2**63 itself is allowed only
# straight after a unary minus (the parser checks), so -9223372036854775808 works.
LONG_MAX = (1 << 63) - 1


class TokenKind(enum.IntEnum):
    IDENT = 1
    KEYWORD = 2
    STRING = 3
    INTEGER = 4
    FLOAT = 5
    OPERATOR = 6
    END = 7


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    value: object  # str for IDENT/KEYWORD(upper)/STRING/OPERATOR, int or float for numbers
    pos: int  # 0-based offset into the text
    text: str  # the lexeme as written

    def describe(self) -> str:
        if self.kind is TokenKind.END:
            return "end of input"
        if self.kind is TokenKind.KEYWORD:
            return f"reserved word '{self.text}'"
        return f"'{self.text}'"


_EXP = r"[eE][+-]?[0-9]+"
_TOKEN = re.compile(
    rf"""
    (?P<skip>[ \t\n\r\f]+|--[^\n\r]*|/\*.*?\*/)
  | (?P<string>'(?:[^']|'')*')
  | (?P<hex>0[xX][0-9a-fA-F]+[lL]?)
  | (?P<float>(?:[0-9]+\.[0-9]*(?:{_EXP})?|\.[0-9]+(?:{_EXP})?|[0-9]+{_EXP})[fFdDlL]?
              |[0-9]+[fFdD])
  | (?P<int>[0-9]+[lL]?)
  | (?P<ident>(?:[^\W\d]|\$)[\w$]*)
  | (?P<op><>|<=|>=|[=<>+\-*/%(),])
    """,
    re.VERBOSE | re.DOTALL,
)
# What may not touch the end of a number: letters, digits, '_', '$' and '.'.
_GLUED = re.compile(r"[\w$.]+")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens ending with one END token; raise SelectorError."""
    tokens: list[Token] = []
    append = tokens.append
    match = _TOKEN.match
    pos = 0
    end = len(text)
    while pos < end:
        m = match(text, pos)
        if m is None:
            raise _bad_character(text, pos)
        group = m.lastgroup
        lexeme = m.group()
        if group == "skip":
            pass
        elif group == "string":
            append(Token(TokenKind.STRING, lexeme[1:-1].replace("''", "'"), pos, lexeme))
        elif group == "ident":
            upper = lexeme.upper()
            if lexeme.isascii() and upper in KEYWORDS:
                append(Token(TokenKind.KEYWORD, upper, pos, lexeme))
            else:
                append(Token(TokenKind.IDENT, lexeme, pos, lexeme))
        elif group == "op":
            if lexeme == "/" and text.startswith("/*", pos):
                raise SelectorError(text, "unterminated comment", pos + 1)
            append(Token(TokenKind.OPERATOR, lexeme, pos, lexeme))
        else:
            glued = _GLUED.match(text, m.end())
            if glued is not None:
                whole = lexeme + glued.group()
                raise SelectorError(text, f"invalid numeric literal '{whole}'", pos + 1)
            append(_number(text, group, lexeme, pos))
        pos = m.end()
    append(Token(TokenKind.END, None, end, ""))
    return tokens


def _number(text: str, group: str | None, lexeme: str, pos: int) -> Token:
    if group == "float":
        digits = lexeme.rstrip("fFdDlL")
        return Token(TokenKind.FLOAT, float(digits), pos, lexeme)
    digits = lexeme.rstrip("lL")
    if group == "hex":
        value = int(digits[2:], 16)
        limit = LONG_MAX
    elif digits.startswith("0") and len(digits) > 1:
        if not digits.isdigit() or "8" in digits or "9" in digits:
            raise SelectorError(text, f"invalid octal literal '{lexeme}'", pos + 1)
        value = int(digits, 8)
        limit = LONG_MAX
    else:
        value = int(digits)
        limit = LONG_MAX + 1
    if value > limit:
        raise SelectorError(text, f"integer literal '{lexeme}' out of range", pos + 1)
    return Token(TokenKind.INTEGER, value, pos, lexeme)


def _bad_character(text: str, pos: int) -> SelectorError:
    char = text[pos]
    if char == "'":
        return SelectorError(text, "unterminated string literal", pos + 1)
    shown = char if char.isprintable() else f"U+{ord(char):04X}"
    return SelectorError(text, f"unexpected character '{shown}'", pos + 1)
