"""Artemis wildcard matching and precedence (petrel.core.wildcard)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petrel.core.wildcard import by_specificity, compile_pattern, is_wildcard, matches, specificity

MATCH_TABLE = [
    # pattern, address, expected
    ("orders", "orders", True),
    ("orders", "order", False),
    ("orders", "orders.eu", False),
    ("orders.eu", "orders.eu", True),
    ("orders.*", "orders.eu", True),
    ("orders.*", "orders", False),
    ("orders.*", "orders.eu.paris", False),
    ("*.eu", "orders.eu", True),
    ("*.eu", "eu", False),
    ("*", "orders", True),
    ("*", "orders.eu", False),
    ("*.*", "a.b", True),
    ("*.*", "a", False),
    ("orders.#", "orders", True),  # "#" is zero or more words
    ("orders.#", "orders.eu", True),
    ("orders.#", "orders.eu.paris", True),
    ("orders.#", "ordersx", False),
    ("orders.#", "ordersx.eu", False),
    ("orders.#", "x.orders", False),
    ("#", "", True),
    ("#", "anything", True),
    ("#", "a.b.c.d", True),
    ("#.eu", "eu", True),
    ("#.eu", "orders.eu", True),
    ("#.eu", "a.b.eu", True),
    ("#.eu", "a.b.euro", False),
    ("#.eu", "neu", False),
    ("a.#.z", "a.z", True),
    ("a.#.z", "a.b.z", True),
    ("a.#.z", "a.b.c.z", True),
    ("a.#.z", "a.b.c", False),
    ("a.#.z", "az", False),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("a.*.#", "a.b.c.d", True),
    ("#.*", "x", True),
    ("#.*", "x.y", True),
    ("#.#", "x.y", True),
    ("a.#.#.b", "a.b", True),
    ("a.#.#.b", "a.x.y.b", True),
    ("*.#.*", "a", False),
    ("*.#.*", "a.b", True),
    ("*.#.*", "a.b.c", True),
    # regex metacharacters in words are literal
    ("a+b.c", "a+b.c", True),
    ("a+b.*", "aab.c", False),
    ("a(b).#", "a(b).c", True),
    ("a$.#", "a$", True),
    ("[x].*", "x.y", False),
    # "*" and "#" are wildcards only as whole words
    ("news.eu*", "news.eu*", True),
    ("news.eu*", "news.europe", False),
    ("news#", "news.x", False),
    ("news#", "news#", True),
    # "." is the separator, not "any character"
    ("a.b", "axb", False),
    ("a.*", "axb", False),
]


@pytest.mark.parametrize(("pattern", "address", "expected"), MATCH_TABLE)
def test_matches_table(pattern: str, address: str, expected: bool) -> None:
    assert matches(pattern, address) is expected
    assert compile_pattern(pattern)(address) is expected


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [("a", False), ("a.b", False), ("a.*", True), ("#", True), ("a.#.b", True), ("a*", False), ("#a", False),
     ("*", True), ("", False)],
)
def test_is_wildcard(pattern: str, expected: bool) -> None:
    assert is_wildcard(pattern) is expected


PRECEDENCE = [
    # (more specific, less specific)
    ("orders.eu", "orders.*"),  # exact beats "*"
    ("orders.eu", "orders.#"),  # exact beats "#"
    ("orders.*", "orders.#"),  # "*" beats "#"
    ("*.*.*.*.*", "a.b.c.#"),  # any "*" pattern beats any "#" pattern, whatever its length
    ("orders.eu.#", "orders.#"),  # among "#": the longer string wins
    ("orders.#", "#"),
    ("#.paris", "#"),
    ("a.b.*", "a.*.c"),  # among "*": the first position holding a literal wins
    ("a.*.c", "*.b.c"),
    ("a.*.*", "*.b.c"),
    ("a.*", "*.b"),
    ("x.y.*", "x.*.*"),
]


@pytest.mark.parametrize(("specific", "general"), PRECEDENCE)
def test_precedence_pairs(specific: str, general: str) -> None:
    assert specificity(specific) < specificity(general)
    assert by_specificity([general, specific]) == [specific, general]
    assert by_specificity([specific, general]) == [specific, general]


def test_sort_is_deterministic_whatever_the_input_order() -> None:
    patterns = ["#", "orders.#", "orders.eu.#", "orders.*", "*.eu", "orders.eu", "*.*", "o.#.eu", "#.eu"]
    expected = by_specificity(patterns)
    assert expected[0] == "orders.eu"
    assert expected[-1] == "#"
    rng = random.Random(7)
    for _ in range(20):
        shuffled = patterns[:]
        rng.shuffle(shuffled)
        assert by_specificity(shuffled) == expected


# -- property: the compiled matcher agrees with a naive word-list reference ------

def reference_match(pattern_words: list[str], address_words: list[str]) -> bool:
    if not pattern_words:
        return not address_words
    head, rest = pattern_words[0], pattern_words[1:]
    if head == "#":
        return any(reference_match(rest, address_words[i:]) for i in range(len(address_words) + 1))
    if not address_words:
        return False
    if head == "*" or head == address_words[0]:
        return reference_match(rest, address_words[1:])
    return False


pattern_words = st.lists(st.sampled_from(["a", "b", "*", "#", ""]), min_size=1, max_size=6)
address_words = st.lists(st.sampled_from(["a", "b", "c", ""]), min_size=1, max_size=7)


@settings(max_examples=300, deadline=None)
@given(pattern_words, address_words)
def test_matches_agrees_with_reference(pw: list[str], aw: list[str]) -> None:
    pattern = ".".join(pw)
    address = ".".join(aw)
    assert matches(pattern, address) == reference_match(pattern.split("."), address.split("."))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a.b", "a.*", "*.b", "a.#", "#", "#.b", "a.b.#", "*.*", "a.*.#", "x"]),
                unique=True, min_size=2))
def test_specificity_is_a_total_order(patterns: list[str]) -> None:
    ordered = by_specificity(patterns)
    assert by_specificity(list(reversed(patterns))) == ordered
    keys = [specificity(p) for p in ordered]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
