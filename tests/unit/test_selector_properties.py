"""Property tests for selectors: no input breaks the compiler, no message breaks
evaluation, and evaluation agrees with a small independent reference evaluator."""

from __future__ import annotations

import operator
import re
import string
from fractions import Fraction
from functools import lru_cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.core.selector import Selector, SelectorError, compile_selector

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Msg:
    def __init__(self, props: dict[str, object]) -> None:
        self.props = props

    def selector_value(self, name: str) -> object | None:
        return self.props.get(name)


NAMES = ("a", "b", "c")

# Property values, including ones a well-behaved message would never send.
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**63), 2**63),
    st.floats(),
    st.sampled_from(["7", "7.0", " 7", "abc", "", "1e2", "-3", "eu", "x%_", "0x10", "nan", "1e400", "9" * 5000]),
    st.text(max_size=6),
    st.sampled_from([b"1", [1], (), object(), 10**400, -(10**400), 1j]),
)
ODD_MESSAGES = st.fixed_dictionaries({}, optional={name: ODD_VALUES for name in NAMES}).map(Msg)


def check_outcome(text: str, messages: list[Msg]) -> None:
    try:
        selector = compile_selector(text)
    except SelectorError as error:
        assert 1 <= error.column <= len(text) + 1
        assert str(error).startswith("invalid selector '")
        assert f"at column {error.column}" in str(error)
        return
    assert isinstance(selector, Selector)
    for message in messages:
        result = selector.evaluate(message)  # no safety net here, unlike matches()
        assert result in (True, False, None)
        assert selector.matches(message) is (result is True)


# -- any text compiles or raises SelectorError --------------------------------


@SETTINGS
@given(st.text(alphabet=string.printable, max_size=60), st.lists(ODD_MESSAGES, max_size=2))
def test_random_ascii_compiles_or_raises_selector_error(text: str, messages: list[Msg]) -> None:
    check_outcome(text, messages)


VOCABULARY = [
    "a", "b", "c", "JMSPriority", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE",
    "ESCAPE", "not", "and", "=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "(", ")", "(", ")", ",",
    "1", "0", "-1", "2.5", ".5", "7.", "1e3", "0x1F", "017", "9223372036854775807", "3L", "1.5F",
    "'x'", "'7'", "''", "'a%'", "'_b'", "'!'", "'it''s'", "--", "/*", "*/", "'", "08", "1abc",
]


@SETTINGS
@given(st.lists(st.sampled_from(VOCABULARY), max_size=20).map(" ".join), st.lists(ODD_MESSAGES, max_size=3))
def test_random_token_soup_compiles_or_raises_selector_error(text: str, messages: list[Msg]) -> None:
    check_outcome(text, messages)


# -- well-typed random expressions always compile and never raise --------------

IDENT = st.sampled_from(NAMES)
NUMBER_LITERAL = st.one_of(
    st.integers(-20, 20).map(str),
    st.sampled_from(["0x1F", "017", "1.5", ".5", "7.", "1e3", "2.5F", "3L", "0", "9223372036854775807"]),
)
STRING_LITERAL = st.sampled_from(["'7'", "'abc'", "''", "'x''y'", "'eu'", "'1e2'", "'%'"])
TEXTUAL = st.one_of(IDENT, STRING_LITERAL, st.just("NULL"))
VALUE = st.recursive(
    st.one_of(IDENT, NUMBER_LITERAL, STRING_LITERAL, st.just("NULL")),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda x: f"(- {x})"),
    ),
    max_leaves=5,
)
NEGATION = st.sampled_from(["", "NOT "])
PATTERN = st.sampled_from(["'%'", "'a%'", "'%b'", "'_'", "'a_%b'", "'%.*%'", "'[x]'", "'!%'"])
ESCAPE = st.sampled_from(["", " ESCAPE '!'", " ESCAPE '%'", " ESCAPE '_'"])
ATOM = st.one_of(
    st.tuples(VALUE, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), VALUE).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
    st.tuples(VALUE, NEGATION, VALUE, VALUE).map(lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
    st.tuples(TEXTUAL, NEGATION, st.lists(STRING_LITERAL, min_size=1, max_size=3)).map(
        lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"
    ),
    st.tuples(TEXTUAL, NEGATION, PATTERN, ESCAPE).map(lambda t: f"{t[0]} {t[1]}LIKE {t[2]}{t[3]}"),
    st.tuples(VALUE, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
    IDENT,
    st.sampled_from(["TRUE", "FALSE", "NULL"]),
)
CONDITION = st.recursive(
    ATOM,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR", "=", "<>"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        inner.map(lambda x: f"NOT ({x})"),
    ),
    max_leaves=6,
)


@SETTINGS
@given(CONDITION, st.lists(ODD_MESSAGES, min_size=1, max_size=3))
def test_well_typed_expressions_compile_and_never_raise(text: str, messages: list[Msg]) -> None:
    selector = compile_selector(text)  # must not raise: the expression is well typed
    for message in messages:
        result = selector.evaluate(message)
        assert result in (True, False, None)
        assert selector.matches(message) is (result is True)


# -- agreement with a reference evaluator -----------------------------------------
#
# Truth values are 0 (FALSE), 1 (UNKNOWN), 2 (TRUE), so AND is min, OR is max and
# NOT is 2 - x (Kleene logic). Numbers compare as exact Fractions. Everything here
# is written independently of petrel.core.selector.

F, U, T = 0, 1, 2
TO_RESULT = {F: False, U: None, T: True}
COMPARE = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_NUMERIC_TEXT = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")

# Values chosen to be exact in binary floating point, so Fraction and float agree.
REF_NUMBERS = st.sampled_from([-3, 0, 1, 2, 7, 100, -1.5, 0.5, 2.5, 7.0])
REF_STRINGS = st.sampled_from(["7", "7.0", " 7", "-3", "1e2", ".5", "abc", "", "eu", "a_b", "a%", "x.y", "[a]", "a\nb"])
# Mostly present values, so that TRUE and FALSE outcomes are as common as UNKNOWN.
REF_VALUES = st.one_of(
    REF_NUMBERS, REF_STRINGS, REF_NUMBERS, st.text(alphabet="ab%_.", max_size=6), st.booleans(), st.none()
)
REF_MESSAGES = st.fixed_dictionaries({name: REF_VALUES for name in NAMES})


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_fraction(value: object) -> Fraction | None:
    if is_number(value):
        return Fraction(value)  # type: ignore[arg-type]
    if isinstance(value, str) and _NUMERIC_TEXT.fullmatch(value):
        return Fraction(value.strip())
    return None


def ref_compare(a: object, op: str, b: object) -> int:
    if a is None or b is None:
        return U
    if is_number(a) or is_number(b):
        if not (is_number(a) or isinstance(a, str)) or not (is_number(b) or isinstance(b, str)):
            return U
        x, y = as_fraction(a), as_fraction(b)
        if x is None or y is None:
            return U
    elif type(a) is type(b) and isinstance(a, (str, bool)) and op in ("=", "<>"):
        x, y = a, b
    else:
        return U
    return T if COMPARE[op](x, y) else F


def ref_like(value: str, pattern: str, escape: str | None) -> bool:
    items: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if escape is not None and char == escape and i + 1 < len(pattern) and pattern[i + 1] in ("%", "_", escape):
            items.append(("char", pattern[i + 1]))
            i += 2
            continue
        items.append(("any", "") if char == "%" else ("one", "") if char == "_" else ("char", char))
        i += 1

    @lru_cache(maxsize=None)
    def match(p: int, v: int) -> bool:
        if p == len(items):
            return v == len(value)
        kind, char = items[p]
        if kind == "any":
            return match(p + 1, v) or (v < len(value) and match(p, v + 1))
        if v == len(value):
            return False
        return (kind == "one" or value[v] == char) and match(p + 1, v + 1)

    return match(0, 0)


def quote(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


@st.composite
def operand(draw):  # ("id", name) or ("lit", value)
    if draw(st.booleans()):
        return ("id", draw(IDENT))
    return ("lit", draw(st.one_of(st.none(), st.booleans(), REF_NUMBERS, REF_STRINGS)))


@st.composite
def comparison(draw):
    left, right = draw(operand()), draw(operand())
    op = draw(st.sampled_from(sorted(COMPARE)))
    literal_bools = [o for o in (left, right) if o[0] == "lit" and isinstance(o[1], bool)]
    if literal_bools and op not in ("=", "<>"):
        op = "="  # ordering a boolean literal is a compile-time error
    return ("cmp", left, op, right)


REF_ATOM = st.one_of(
    comparison(),
    st.tuples(st.just("between"), IDENT, REF_NUMBERS, REF_NUMBERS, st.booleans()),
    st.tuples(st.just("in"), IDENT, st.lists(REF_STRINGS, min_size=1, max_size=3), st.booleans()),
    st.tuples(
        st.just("like"),
        IDENT,
        st.text(alphabet="ab%_!.*[", max_size=7),
        st.sampled_from([None, "!", "%", "_", "a"]),
        st.booleans(),
    ),
    st.tuples(st.just("isnull"), IDENT, st.booleans()),
    st.tuples(st.just("bool"), IDENT),
    st.tuples(st.just("const"), st.sampled_from([True, False, None])),
)
REF_TREE = st.recursive(
    REF_ATOM,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), inner, inner),
        st.tuples(st.just("not"), inner),
    ),
    max_leaves=5,
)


def ref_eval(node: tuple, props: dict[str, object]) -> int:
    tag = node[0]
    if tag == "and":
        return min(ref_eval(node[1], props), ref_eval(node[2], props))
    if tag == "or":
        return max(ref_eval(node[1], props), ref_eval(node[2], props))
    if tag == "not":
        return 2 - ref_eval(node[1], props)
    if tag == "const":
        return {True: T, False: F, None: U}[node[1]]
    value = props.get(node[1]) if tag != "cmp" else None
    if tag == "cmp":
        _, left, op, right = node
        pick = lambda o: props.get(o[1]) if o[0] == "id" else o[1]  # noqa: E731
        return ref_compare(pick(left), op, pick(right))
    if tag == "between":
        _, _, low, high, negated = node
        result = min(ref_compare(low, "<=", value), ref_compare(value, "<=", high))
        return 2 - result if negated else result
    if tag == "in":
        _, _, items, negated = node
        result = max(ref_compare(value, "=", item) for item in items)
        return 2 - result if negated else result
    if tag == "like":
        _, _, pattern, escape, negated = node
        if not isinstance(value, str):
            return U
        result = T if ref_like(value, pattern, escape) else F
        return 2 - result if negated else result
    if tag == "isnull":
        return F if (value is None) == node[2] else T
    if tag == "bool":
        return (T if value else F) if isinstance(value, bool) else U
    raise AssertionError(tag)


PRECEDENCE = {"or": 1, "and": 2, "not": 3}


def render(node: tuple, minimal: bool) -> tuple[str, int]:
    """Selector text and its precedence; ``minimal`` uses as few parentheses as possible."""
    tag = node[0]
    if tag in ("and", "or"):
        level = PRECEDENCE[tag]
        parts = [wrap(render(child, minimal), level, minimal) for child in node[1:]]
        return f" {tag.upper()} ".join(parts), level
    if tag == "not":
        return "NOT " + wrap(render(node[1], minimal), 3, minimal), 3
    if tag == "cmp":
        _, left, op, right = node
        show = lambda o: o[1] if o[0] == "id" else quote(o[1])  # noqa: E731
        return f"{show(left)} {op} {show(right)}", 4
    if tag == "between":
        _, name, low, high, negated = node
        return f"{name} {'NOT ' if negated else ''}BETWEEN {quote(low)} AND {quote(high)}", 4
    if tag == "in":
        _, name, items, negated = node
        return f"{name} {'NOT ' if negated else ''}IN ({', '.join(map(quote, items))})", 4
    if tag == "like":
        _, name, pattern, escape, negated = node
        tail = "" if escape is None else f" ESCAPE {quote(escape)}"
        return f"{name} {'NOT ' if negated else ''}LIKE {quote(pattern)}{tail}", 4
    if tag == "isnull":
        return f"{node[1]} IS {'NOT ' if node[2] else ''}NULL", 4
    if tag == "bool":
        return node[1], 4
    return quote(node[1]), 4


def wrap(rendered: tuple[str, int], needed: int, minimal: bool) -> str:
    text, level = rendered
    if level < needed or (not minimal and level < 4):
        return f"({text})"
    return text


@SETTINGS
@given(REF_TREE, REF_MESSAGES)
def test_agrees_with_reference_evaluator(tree: tuple, props: dict[str, object]) -> None:
    expected = TO_RESULT[ref_eval(tree, props)]
    message = Msg(props)
    for minimal in (False, True):
        text = render(tree, minimal)[0]
        assert compile_selector(text).evaluate(message) is expected, text


def test_reference_evaluator_can_disagree() -> None:
    # The reference is not a tautology: it separates TRUE, FALSE and UNKNOWN.
    tree = ("cmp", ("id", "a"), ">", ("lit", 5))
    assert [ref_eval(tree, p) for p in ({"a": 7}, {"a": 1}, {})] == [T, F, U]
    assert ref_eval(("cmp", ("id", "a"), "=", ("lit", 7)), {"a": "7.0"}) == T
    assert ref_like("a.b", "a_b", None) and not ref_like("ab", "a_b", None)
    assert render(("and", ("or", ("bool", "a"), ("bool", "b")), ("bool", "c")), True)[0] == "(a OR b) AND c"


@settings(max_examples=250, deadline=None)
@given(
    st.text(alphabet="ab%_!", max_size=8),
    st.text(alphabet="ab%_!\n", max_size=8),
    st.sampled_from([None, "!", "%", "_", "a"]),
)
def test_like_agrees_with_reference_matcher(pattern: str, value: str, escape: str | None) -> None:
    tail = "" if escape is None else f" ESCAPE {quote(escape)}"
    expected = ref_like(value, pattern, escape)
    assert compile_selector(f"x LIKE {quote(pattern)}{tail}").evaluate(Msg({"x": value})) is expected
    assert compile_selector(f"x NOT LIKE {quote(pattern)}{tail}").evaluate(Msg({"x": value})) is (not expected)
