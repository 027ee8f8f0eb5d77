"""Address settings: defaults, merging by precedence, caching (petrel.core.settings)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from petrel.core.settings import AddressSettings, AddressSettingsRepository, validate_partial
from petrel.core.wildcard import by_specificity, matches


def test_defaults_follow_artemis() -> None:
    s = AddressSettingsRepository().match("anything")
    assert s.dead_letter_address == "DLQ"
    assert s.expiry_address == "ExpiryQueue"
    assert s.expiry_delay == -1
    assert s.max_delivery_attempts == 10
    assert s.redelivery_delay == 0
    assert s.redelivery_multiplier == 1.0
    assert s.max_redelivery_delay == 0  # redelivery_delay * 10
    assert s.auto_create_addresses and s.auto_create_queues
    assert s.auto_delete_addresses and s.auto_delete_queues
    assert s.auto_delete_queues_delay == 0
    assert s.default_address_routing_type == "MULTICAST"
    assert s.default_queue_routing_type == "MULTICAST"
    assert s.id_cache_size == 20000
    assert s.send_to_dla_on_no_route is False


def test_settings_are_frozen() -> None:
    s = AddressSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.max_delivery_attempts = 3  # type: ignore[misc]


def test_merge_field_by_field_most_specific_first() -> None:
    repo = AddressSettingsRepository({
        "#": {"dead_letter_address": "DEAD"},
        "orders.#": {"max_delivery_attempts": 3, "dead_letter_address": "ORDERS.DLQ"},
        "orders.eu": {"redelivery_delay": 500},
    })
    eu = repo.match("orders.eu")
    assert eu.redelivery_delay == 500  # from orders.eu
    assert eu.max_delivery_attempts == 3  # from orders.#
    assert eu.dead_letter_address == "ORDERS.DLQ"  # orders.# beats #
    assert eu.max_redelivery_delay == 5000  # derived from the merged redelivery_delay
    assert eu.expiry_address == "ExpiryQueue"  # nobody set it: built-in default

    us = repo.match("orders.us")
    assert (us.redelivery_delay, us.max_delivery_attempts, us.dead_letter_address) == (0, 3, "ORDERS.DLQ")

    other = repo.match("invoices")
    assert (other.max_delivery_attempts, other.dead_letter_address) == (10, "DEAD")
    assert repo.matching_patterns("orders.eu") == ["orders.eu", "orders.#", "#"]


def test_star_beats_hash_and_first_literal_wins() -> None:
    repo = AddressSettingsRepository({
        "a.#": {"max_delivery_attempts": 1},
        "a.*.c": {"max_delivery_attempts": 2, "redelivery_delay": 20},
        "a.b.*": {"max_delivery_attempts": 3},
    })
    s = repo.match("a.b.c")
    assert s.max_delivery_attempts == 3  # a.b.* over a.*.c over a.#
    assert s.redelivery_delay == 20  # a.*.c still fills what a.b.* left unset
    assert repo.matching_patterns("a.b.c") == ["a.b.*", "a.*.c", "a.#"]


def test_longer_hash_pattern_wins() -> None:
    repo = AddressSettingsRepository({
        "#": {"max_delivery_attempts": 1},
        "news.#": {"max_delivery_attempts": 2},
        "news.europe.#": {"max_delivery_attempts": 3},
    })
    assert repo.match("news.europe.sport").max_delivery_attempts == 3
    assert repo.match("news.asia").max_delivery_attempts == 2
    assert repo.match("news").max_delivery_attempts == 2
    assert repo.match("weather").max_delivery_attempts == 1


def test_empty_address_string_means_none() -> None:
    repo = AddressSettingsRepository({"#": {"dead_letter_address": "DLQ2"}, "tmp.#": {"dead_letter_address": "",
                                                                                         "expiry_address": ""}})
    assert repo.match("tmp.x").dead_letter_address is None
    assert repo.match("tmp.x").expiry_address is None
    assert repo.match("other").dead_letter_address == "DLQ2"


def test_none_values_count_as_unset() -> None:
    repo = AddressSettingsRepository({"#": {"max_delivery_attempts": 4}, "q": {"max_delivery_attempts": None}})
    assert repo.match("q").max_delivery_attempts == 4


def test_id_cache_size_falls_back_to_broker_wide_value() -> None:
    repo = AddressSettingsRepository({"dup.#": {"id_cache_size": 5}}, id_cache_size=123)
    assert repo.match("dup.x").id_cache_size == 5
    assert repo.match("other").id_cache_size == 123


def test_explicit_max_redelivery_delay_is_kept() -> None:
    repo = AddressSettingsRepository({"#": {"redelivery_delay": 100, "max_redelivery_delay": 250}})
    assert repo.match("x").max_redelivery_delay == 250


def test_set_and_remove_invalidate_the_cache_and_notify() -> None:
    calls: list[int] = []
    repo = AddressSettingsRepository({"orders.#": {"max_delivery_attempts": 3}})
    repo.add_listener(lambda: calls.append(1))
    first = repo.match("orders.eu")
    assert first.max_delivery_attempts == 3
    assert repo.match("orders.eu") is first  # cached

    repo.set("orders.eu", {"max_delivery_attempts": 7})
    assert repo.match("orders.eu").max_delivery_attempts == 7
    repo.set("orders.#", {"max_delivery_attempts": 2, "redelivery_delay": 9})
    assert repo.match("orders.eu").redelivery_delay == 9

    assert repo.remove("orders.eu") is True
    assert repo.match("orders.eu").max_delivery_attempts == 2
    assert repo.remove("orders.eu") is False
    assert calls == [1, 1, 1]
    assert "orders.#" in repo and len(repo) == 1
    assert repo.entries == {"orders.#": {"max_delivery_attempts": 2, "redelivery_delay": 9}}


def test_cache_is_bounded() -> None:
    repo = AddressSettingsRepository({"q.#": {"max_delivery_attempts": 2}}, cache_size=8)
    for i in range(100):
        assert repo.match(f"q.{i}").max_delivery_attempts == 2
    assert len(repo._cache) <= 8


@pytest.mark.parametrize(
    ("partial", "fragment"),
    [
        ({"max_delivery_atempts": 3}, "max_delivery_atempts: unknown"),
        ({"max_delivery_attempts": "3"}, "max_delivery_attempts: expected int"),
        ({"max_delivery_attempts": True}, "max_delivery_attempts: expected int"),
        ({"auto_create_queues": 1}, "auto_create_queues: expected bool"),
        ({"default_queue_routing_type": "BROADCAST"}, "default_queue_routing_type: expected ANYCAST or MULTICAST"),
    ],
)
def test_validate_partial_rejects(partial: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        validate_partial(partial)
    with pytest.raises(ValueError, match=fragment):
        AddressSettingsRepository({"#": partial})


def test_validate_partial_normalises() -> None:
    assert validate_partial({"default_queue_routing_type": "anycast", "redelivery_multiplier": 2}) == {
        "default_queue_routing_type": "ANYCAST", "redelivery_multiplier": 2.0}


@pytest.mark.parametrize(
    ("delay", "multiplier", "cap", "count", "expected"),
    [
        (0, 2.0, None, 5, 0),
        (100, 1.0, None, 1, 100),
        (100, 1.0, None, 9, 100),
        (100, 2.0, None, 1, 100),
        (100, 2.0, None, 2, 200),
        (100, 2.0, None, 4, 800),
        (100, 2.0, None, 10, 1000),  # capped at delay * 10
        (100, 2.0, 300, 3, 300),
    ],
)
def test_redelivery_delay_for(delay: int, multiplier: float, cap: int | None, count: int, expected: int) -> None:
    s = AddressSettings(redelivery_delay=delay, redelivery_multiplier=multiplier, max_redelivery_delay=cap)
    assert s.redelivery_delay_for(count) == expected
    assert s.resolved().redelivery_delay_for(count) == expected


# -- property: the repository equals a naive merge over all matching patterns ----

PATTERNS = ["#", "a.#", "a.b.#", "a.*", "*.b", "a.b", "*.*", "#.c", "a.*.c", "b"]
FIELDS = ["max_delivery_attempts", "redelivery_delay", "expiry_delay"]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(PATTERNS),
                    st.dictionaries(st.sampled_from(FIELDS), st.integers(0, 50), max_size=3), max_size=6),
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4),
)
def test_match_equals_naive_merge(entries: dict, words: list[str]) -> None:
    address = ".".join(words)
    repo = AddressSettingsRepository(entries)
    expected = {}
    for pattern in reversed(by_specificity(p for p in entries if matches(p, address))):
        expected.update(entries[pattern])  # the more specific pattern overwrites
    got = repo.match(address)
    for field in FIELDS:
        assert getattr(got, field) == expected.get(field, getattr(AddressSettings(), field))
