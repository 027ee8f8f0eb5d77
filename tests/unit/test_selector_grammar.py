"""JMS selectors: literals, identifiers, rejected input with columns, precedence, API."""

from __future__ import annotations

import pickle
import time

import pytest

from petrel.core.selector import Selector, SelectorError, compile_selector

from selector_harness import F, Msg, T, U, ev

# -- literals -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "x = 'it''s'",
        "x = 'a' + ''''",
    ],
)
def test_string_literal_doubled_quote_is_one_quote(text: str) -> None:
    assert ev(text, x="it's") is T or ev(text, x="a'") is T
    assert ev(text, x="its") is F


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("''", ""),
        ("'plain'", "plain"),
        ("'''quoted'''", "'quoted'"),
        ("'with space and -- not a comment'", "with space and -- not a comment"),
        ("'üñí €'", "üñí €"),
        ("'line\nbreak'", "line\nbreak"),
    ],
)
def test_string_literals(literal: str, value: str) -> None:
    assert ev(f"x = {literal}", x=value) is T
    assert ev(f"x = {literal}", x=value + "!") is F


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("42L", 42),
        ("42l", 42),
        ("0x1F", 31),
        ("0X1f", 31),
        ("0xffL", 255),
        ("017", 15),
        ("00", 0),
        ("0777", 511),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("0x7FFFFFFFFFFFFFFF", 2**63 - 1),
    ],
)
def test_exact_numeric_literals(literal: str, value: int) -> None:
    assert ev(f"x = {literal}", x=value) is T
    assert ev(f"x = {literal}", x=value - 1) is F


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("1.5", 1.5),
        ("1e10", 1e10),
        ("1E10", 1e10),
        ("1e+2", 100.0),
        ("5E-1", 0.5),
        (".5", 0.5),
        ("7.", 7.0),
        ("7.e1", 70.0),
        (".5e1", 5.0),
        ("1.5F", 1.5),
        ("1.5d", 1.5),
        ("2D", 2.0),
        ("3f", 3.0),
        ("2.5L", 2.5),
        ("-1.25", -1.25),
        ("07.5", 7.5),
    ],
)
def test_approximate_numeric_literals(literal: str, value: float) -> None:
    assert ev(f"x = {literal}", x=value) is T
    assert ev(f"x = {literal}", x=value + 1) is F


def test_numeric_literal_ordering_from_activemq() -> None:
    for text in [
        "1.0 < 1.1",
        "-1.1 < 1.0",
        "1.0E1 < 1.1E1",
        "1. < 1.1",
        "1.E1 < 1.1E1",
        "-.5 < .1",
        ".1E1 < .5E1",
        "4E10 < 5E10",
        "-5E8 < 2E2",
        "4E-10 < 5E-10",
        "0x10 > 017",
    ]:
        assert ev(text) is T, text


@pytest.mark.parametrize("literal", ["TRUE", "true", "True", "tRuE"])
def test_true_literal_any_case(literal: str) -> None:
    assert ev(literal) is T
    assert ev(f"flag = {literal}", flag=True) is T
    assert ev(f"flag = {literal}", flag=False) is F


@pytest.mark.parametrize("literal", ["FALSE", "false", "False"])
def test_false_literal_any_case(literal: str) -> None:
    assert ev(literal) is F
    assert ev(f"flag = {literal}", flag=False) is T


@pytest.mark.parametrize("text", ["NULL", "null", "x = NULL", "NULL = NULL", "NULL <> 1"])
def test_null_literal_is_unknown(text: str) -> None:
    assert ev(text, x=1) is U
    assert ev(text) is U


# -- identifiers and keywords ---------------------------------------------------


def test_identifiers_are_case_sensitive() -> None:
    assert ev("color = 'red'", color="red") is T
    assert ev("Color = 'red'", color="red") is U


@pytest.mark.parametrize(
    "name",
    ["_x", "$x", "x$", "a1", "x_y_z", "JMSPriority", "AMQPriority", "JMSXGroupID", "ünïcode", "Δx",
     "ANDROID", "island", "Notable", "NULLABLE", "INx", "ORx", "ESCAPEx", "XPATH", "selector"],
)
def test_identifier_forms(name: str) -> None:
    assert ev(f"{name} = 3", **{name: 3}) is T
    assert ev(f"{name} IS NULL") is T


@pytest.mark.parametrize("word", ["NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE", "and", "Between", "escape"])
def test_reserved_words_are_not_identifiers(word: str) -> None:
    with pytest.raises(SelectorError):
        compile_selector(f"{word} = 1")
    with pytest.raises(SelectorError, match=f"reserved word '{word}'"):
        compile_selector(f"x = {word}")


@pytest.mark.parametrize("word", ["NULL", "TRUE", "FALSE", "null", "True"])
def test_literal_words_are_never_properties(word: str) -> None:
    selector = compile_selector(f"{word} = 1 OR {word} IS NULL")
    assert selector.identifiers == frozenset()
    # TRUE = 1 compares a boolean with a number (UNKNOWN); NULL IS NULL is TRUE
    assert selector.evaluate(Msg(**{word: 1})) is (True if word.upper() == "NULL" else None)


def test_keywords_any_case() -> None:
    assert ev("a = 1 and not b is null or c between 1 and 2", a=1, b=2) is T
    assert ev("x Not In ('a') AnD y lIkE 'b%' EsCaPe '!'", x="z", y="bb") is T


def test_whitespace_and_comments_are_skipped() -> None:
    text = "\t a\n=\r1 /* block\n comment */ AND -- a line comment\n b = 2"
    assert ev(text, a=1, b=2) is T
    assert ev("a = 1 -- trailing comment without newline", a=1) is T


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "-- only a comment", "/* only */"])
def test_empty_selector_matches_everything(text: str) -> None:
    selector = compile_selector(text)
    assert selector.matches(Msg()) is True
    assert selector.matches(Msg(a=1)) is True


def test_jms_header_identifiers_resolved_by_message() -> None:
    message = Msg(JMSDeliveryMode="PERSISTENT", JMSPriority=7, AMQDurable=True, JMSCorrelationID="c-1")
    selector = compile_selector(
        "JMSDeliveryMode = 'PERSISTENT' AND JMSPriority >= 4 AND AMQDurable AND JMSCorrelationID LIKE 'c-%'"
    )
    assert selector.matches(message) is True
    assert selector.identifiers == frozenset({"JMSDeliveryMode", "JMSPriority", "AMQDurable", "JMSCorrelationID"})


# -- rejection, with positions -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason", "column"),
    [
        ("a >", "unexpected end of input", 4),
        ("a = ", "unexpected end of input", 5),
        ("(a = 1", "expected ')' but found end of input", 7),
        ("a = 1)", "unexpected ')'", 6),
        ("a = 1 b = 2", "unexpected 'b'", 7),
        ("a = 1 AMD b = 2", "unexpected 'AMD'", 7),
        ("=TEST 'test'", "unexpected '='", 1),
        ("prop1 = prop2 foo AND s = 'Test'", "unexpected 'foo'", 15),
        ("AND = 1", "unexpected reserved word 'AND'", 1),
        ("a = 'abc", "unterminated string literal", 5),
        ("a = 1 /* open", "unterminated comment", 7),
        ("a = #", "unexpected character '#'", 5),
        ("a == 1", "unexpected '='", 4),
        ("a != 1", "unexpected character '!'", 3),
        ("a = \"x\"", "unexpected character '\"'", 5),
        ("a = 1abc", "invalid numeric literal '1abc'", 5),
        ("a = 1.2.3", "invalid numeric literal '1.2.3'", 5),
        ("a = 1e", "invalid numeric literal '1e'", 5),
        ("a = 0x", "invalid numeric literal '0x'", 5),
        ("a = 0x1G", "invalid numeric literal '0x1G'", 5),
        ("a = 08", "invalid octal literal '08'", 5),
        ("a = 9223372036854775808", "out of range", 5),
        ("a = 0x8000000000000000", "out of range", 5),
        ("a = +9223372036854775808", "out of range", 6),
        ("a = 99999999999999999999", "out of range", 5),
        ("3 + 5", "expected a boolean expression", 1),
        ("'abc'", "expected a boolean expression", 1),
        ("TRUE AND 3+5", "expected a boolean expression", 10),
        ("NOT 1", "expected a boolean expression", 5),
        ("a OR 'x'", "expected a boolean expression", 6),
        ("TRUE + 1", "needs numbers, not a boolean", 1),
        ("-(a = 1) = 1", "needs numbers, not a boolean", 3),
        ("(a = 1) < 2", "booleans can only be compared with = or <>", 2),
        ("a < TRUE", "booleans can only be compared with = or <>", 5),
        ("a < b < c", "booleans can only be compared with = or <>", 1),
        ("a BETWEEN FALSE AND 2", "booleans can only be compared", 11),
        ("a BETWEEN 1 OR 2", "expected AND but found reserved word 'OR'", 13),
        ("5 LIKE 'x'", "LIKE needs a string operand", 1),
        ("a LIKE b", "a LIKE pattern must be a string literal", 8),
        ("a LIKE 'x' ESCAPE 'ab'", "ESCAPE must be a single character", 19),
        ("a LIKE 'x' ESCAPE ''", "ESCAPE must be a single character", 19),
        ("a LIKE 'x' ESCAPE b", "an ESCAPE character must be a string literal", 19),
        ("a IN (1, 2)", "an IN list item must be a string literal, found '1'", 7),
        ("a IN ('x', b)", "an IN list item must be a string literal, found 'b'", 12),
        ("a IN ()", "an IN list item must be a string literal", 7),
        ("a IN 'x'", "expected '(' but found ''x''", 6),
        ("a IN ('x'", "expected ')' but found end of input", 10),
        ("1 IN ('1')", "IN needs a string operand, not a numeric one", 1),
        ("a NOT 5", "expected BETWEEN, IN or LIKE after NOT", 7),
        ("a NOT NULL", "expected BETWEEN, IN or LIKE after NOT", 7),
        ("a IS 5", "expected NULL but found '5'", 6),
        ("a IS NOT", "expected NULL but found end of input", 9),
        ("a = NOT b", "unexpected reserved word 'NOT'", 5),
        ("()", "unexpected ')'", 2),
        ("a.b = 1", "unexpected character '.'", 2),
    ],
)
def test_rejected_selectors_name_the_column(text: str, reason: str, column: int) -> None:
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    error = caught.value
    assert reason in error.reason
    assert error.column == column
    assert str(error) == f"invalid selector '{text}': {error.reason} at column {column}"


def test_error_message_format() -> None:
    with pytest.raises(SelectorError) as caught:
        compile_selector("a >")
    assert str(caught.value) == "invalid selector 'a >': unexpected end of input at column 4"
    assert isinstance(caught.value, ValueError)


def test_error_survives_pickling() -> None:
    with pytest.raises(SelectorError) as caught:
        compile_selector("a >")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert str(copy) == str(caught.value)
    assert copy.column == 4


def test_long_selector_text_is_truncated_in_the_message() -> None:
    text = "a = '" + "x" * 500
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    assert len(str(caught.value)) < 250
    assert str(caught.value).endswith("unterminated string literal at column 5")


def test_non_string_selector_is_rejected() -> None:
    with pytest.raises(SelectorError):
        compile_selector(None)  # type: ignore[arg-type]
    with pytest.raises(SelectorError):
        compile_selector(b"a = 1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "(" * 500 + "a = 1" + ")" * 500,
        "NOT " * 2000 + "a",
        "- " * 2000 + "a = 1",
        "a" + " + a" * 3000 + " = 1",
        "a = 1" + " AND a = 1" * 100 + " = TRUE" * 200,
    ],
)
def test_deep_nesting_is_an_error_not_a_crash(text: str) -> None:
    with pytest.raises(SelectorError, match="deep"):
        compile_selector(text)


def test_long_flat_chains_compile() -> None:
    names = [f"p{i}" for i in range(2000)]
    text = " OR ".join(f"{name} = {i}" for i, name in enumerate(names))
    selector = compile_selector(text)
    assert selector.evaluate(Msg(p1999=1999)) is T
    assert selector.evaluate(Msg(p0=5, p1=5)) is U  # the rest are absent
    assert selector.evaluate(Msg(**{name: -1 for name in names})) is F
    nested = "(" * 30 + "a = 1" + ")" * 30
    assert ev(nested, a=1) is T


# -- precedence ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "props", "expected"),
    [
        # AND binds tighter than OR
        ("a OR b AND c", {"a": True, "b": False, "c": False}, T),
        ("(a OR b) AND c", {"a": True, "b": False, "c": False}, F),
        # NOT binds tighter than AND
        ("NOT a AND b", {"a": False, "b": False}, F),
        ("NOT (a AND b)", {"a": False, "b": False}, T),
        # NOT is looser than comparison
        ("NOT x = 1", {"x": 2}, T),
        ("NOT x = 1", {"x": 1}, F),
        ("NOT NOT x = 1", {"x": 1}, T),
        # arithmetic
        ("1 + 2 * 3 = 7", {}, T),
        ("(1 + 2) * 3 = 9", {}, T),
        ("10 - 4 - 3 = 3", {}, T),
        ("16 / 4 / 2 = 2", {}, T),
        ("2 * 3 % 4 = 2", {}, T),
        ("-2 * 3 = -6", {}, T),
        ("- x * 2 = -8", {"x": 4}, T),
        ("- (x + 1) = -5", {"x": 4}, T),
        ("-x - -x = 0", {"x": 4}, T),
        ("+x = 4", {"x": 4}, T),
        ("1 + 2 > 2 AND 3 < 2 + 2", {}, T),
        # comparison above equality (ActiveMQ): a > 1 = TRUE is (a > 1) = TRUE
        ("a > 1 = TRUE", {"a": 2}, T),
        ("a > 1 = FALSE", {"a": 2}, F),
        ("a = 1 = b", {"a": 1, "b": True}, T),
        ("a IS NULL = TRUE", {}, T),
        ("a BETWEEN 1 AND 2 AND b", {"a": 1, "b": True}, T),
        ("a BETWEEN 1 AND 2 AND b", {"a": 1, "b": False}, F),
        ("a BETWEEN 1 + 1 AND 2 * 2", {"a": 4}, T),
        ("a NOT BETWEEN 1 AND 2 OR b", {"a": 1, "b": True}, T),
        ("x LIKE 'a%' AND y IN ('b') OR z IS NULL", {"x": "q", "y": "b"}, T),
        ("x LIKE 'a%' AND (y IN ('b') OR z IS NULL)", {"x": "q", "y": "b"}, F),
    ],
)
def test_precedence(text: str, props: dict[str, object], expected: bool | None) -> None:
    assert ev(text, **props) is expected



# -- robustness and API -------------------------------------------------------------------


class _Broken:
    def selector_value(self, name: str) -> object:
        raise RuntimeError("broken message")


def test_matches_never_raises_even_for_a_broken_message() -> None:
    selector = compile_selector("x = 1")
    assert selector.matches(_Broken()) is False
    assert selector.matches(object()) is False  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        selector.evaluate(_Broken())  # evaluate has no safety net: it is for tests/tools


@pytest.mark.parametrize(
    "value",
    [b"1", [1], {"a": 1}, object(), float("nan"), float("inf"), -float("inf"), 10**400, -(10**400), "1e400",
     "9" * 5000, "nan", "\x00", 1j],
)
def test_odd_property_values_never_raise(value: object) -> None:
    for text in [
        "x = 1", "x <> 'a'", "x > 1.5", "x BETWEEN 1 AND 2", "x IN ('1')", "x LIKE '1%'", "x", "NOT x",
        "x + 1 > 0", "x * 1.5 > 0", "x / 3 > 0", "x % 2 = 0", "-x < 0", "x = y", "x < y", "x + y = 0",
    ]:
        selector = compile_selector(text)
        assert selector.evaluate(Msg(x=value, y=1.5)) in (True, False, None), text
        assert selector.evaluate(Msg(x=value, y="7")) in (True, False, None), text


def test_compiled_selectors_are_cached_and_comparable() -> None:
    first = compile_selector("cache_probe = 1")
    assert compile_selector("cache_probe = 1") is first
    assert isinstance(first, Selector)
    assert first.text == "cache_probe = 1"
    assert first == compile_selector("cache_probe = 1")
    assert first != compile_selector("cache_probe = 2")
    assert "cache_probe = 1" in repr(first)


def test_failed_compiles_raise_every_time() -> None:
    for _ in range(2):
        with pytest.raises(SelectorError):
            compile_selector("a >")


def test_matching_is_fast() -> None:
    selector = compile_selector("JMSPriority > 4 AND region IN ('eu', 'us') AND name LIKE 'order.%'")
    message = Msg(JMSPriority=5, region="eu", name="order.42")
    assert selector.matches(message) is True
    runs = 20000
    started = time.perf_counter()
    for _ in range(runs):
        selector.matches(message)
    per_call = (time.perf_counter() - started) / runs
    assert per_call < 20e-6  # a few microseconds normally; generous for busy CI
