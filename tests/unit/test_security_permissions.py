"""Per-address permissions: wildcard precedence, every permission, the decision cache (petrel.security.permissions)."""

from __future__ import annotations

import pytest

from petrel.security.permissions import PERMISSIONS, Authorizer, validate_settings
from petrel.security.subject import INTERNAL, Subject


def subject(*roles: str) -> Subject:
    return Subject("u", frozenset(roles))


def test_permission_names_are_artemis_names() -> None:
    assert set(PERMISSIONS) == {"send", "consume", "browse", "createAddress", "deleteAddress", "createDurableQueue",
                                "deleteDurableQueue", "createNonDurableQueue", "deleteNonDurableQueue", "manage",
                                "view", "edit"}


@pytest.mark.parametrize("permission", PERMISSIONS)
def test_every_permission_is_granted_and_refused_on_its_own(permission: str) -> None:
    auth = Authorizer({"a.b": {permission: ["r"]}})
    assert auth.allowed(subject("r"), permission, "a.b")
    assert not auth.allowed(subject("other"), permission, "a.b")
    for other in PERMISSIONS:
        if other != permission:
            assert not auth.allowed(subject("r"), other, "a.b"), other


def test_most_specific_pattern_wins_outright() -> None:
    auth = Authorizer({
        "#": {"send": ["everyone"], "consume": ["everyone"]},
        "orders.#": {"send": ["orders"]},
        "orders.eu.*": {"send": ["eu"], "consume": ["eu"]},
        "orders.eu.paris": {"consume": ["paris"]},
    })
    # orders.eu.* beats orders.# beats #
    assert auth.allowed(subject("eu"), "send", "orders.eu.lyon")
    assert not auth.allowed(subject("orders"), "send", "orders.eu.lyon")
    assert not auth.allowed(subject("everyone"), "send", "orders.eu.lyon")
    # orders.# for what orders.eu.* does not match; no inheritance from #: consume is refused
    assert auth.allowed(subject("orders"), "send", "orders.us.boston")
    assert auth.allowed(subject("orders"), "send", "orders")  # "#" matches zero words
    assert not auth.allowed(subject("everyone"), "consume", "orders.us.boston")
    assert auth.allowed(subject("orders"), "send", "orders.eu.lyon.x")  # * is one word: orders.# decides
    # a literal beats the * pattern and inherits nothing from it
    assert auth.allowed(subject("paris"), "consume", "orders.eu.paris")
    assert not auth.allowed(subject("eu"), "consume", "orders.eu.paris")
    assert not auth.allowed(subject("eu"), "send", "orders.eu.paris")
    # the rest falls to #
    assert auth.allowed(subject("everyone"), "consume", "invoices")
    assert auth.grants("orders.eu.lyon")[0] == "orders.eu.*"


def test_without_a_hash_pattern_admin_gets_everything_elsewhere() -> None:
    auth = Authorizer({"orders.#": {"send": ["app"]}})
    for permission in PERMISSIONS:
        assert auth.allowed(subject("admin"), permission, "anything.else")
    assert not auth.allowed(subject("admin"), "send", "orders.x")  # the specific pattern wins
    assert not auth.allowed(subject("app"), "send", "anything.else")
    configured = Authorizer({"#": {"send": ["app"]}})
    assert not configured.allowed(subject("admin"), "send", "x")  # a configured "#" replaces the default


def test_no_settings_grant_everything_to_admin_only() -> None:
    auth = Authorizer()
    assert all(auth.allowed(subject("admin"), p, "x.y") for p in PERMISSIONS)
    assert not any(auth.allowed(subject("app"), p, "x.y") for p in PERMISSIONS)
    assert not auth.allowed(Subject(None, frozenset({"anonymous"})), "send", "x")


def test_internal_is_allowed_everything() -> None:
    auth = Authorizer({"#": {}})
    assert all(auth.allowed(INTERNAL, p, "$.petrel.sf.x") for p in PERMISSIONS)


def test_the_cache_follows_roles_and_updates() -> None:
    auth = Authorizer({"q": {"send": ["app"]}})
    before = Subject("alice", frozenset({"other"}))
    assert not auth.allowed(before, "send", "q")
    assert not auth.allowed(before, "send", "q")  # a cached refusal
    after = Subject("alice", frozenset({"app"}))  # alice was given role app and logged in again
    assert auth.allowed(after, "send", "q")
    assert not auth.allowed(before, "send", "q")
    auth.update({"q": {"send": ["other"]}})  # the settings change: no stale decision
    assert auth.allowed(before, "send", "q")
    assert not auth.allowed(after, "send", "q")


@pytest.mark.parametrize("settings, expected", [
    ({"orders.#": {"sendd": ["a"]}}, '"orders.#".sendd: unknown permission (did you mean send?)'),
    ({"q": {"publish": ["a"]}}, '"q".publish: unknown permission (one of: send,'),
    ({"q": {"send": "a"}}, '"q".send: must be a list of role names'),
    ({"q": {"send": ["$internal"]}}, '"q".send: "$internal" is not a role name'),
    ({"q\n": {"a b": ["x"]}}, '"q\\n"."a b": unknown permission'),
    ({"": {"send": ["a"]}}, "non-empty"),
])
def test_bad_settings_name_the_key(settings: dict, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_settings(settings)
    assert expected in str(info.value)
