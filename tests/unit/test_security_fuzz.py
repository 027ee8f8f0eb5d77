"""Property tests of the login and permission paths: any input is a Subject, a refusal or a clear
ValueError, never another exception; decisions follow the most specific pattern, cached or not."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.core.wildcard import by_specificity, matches
from petrel.security import AuthenticationFailed, Security, Subject
from petrel.security.permissions import PERMISSIONS, Authorizer, validate_settings
from petrel.security.users import UserStore

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
WORD = st.sampled_from(["a", "b", "c", "*", "#"])
PATTERN = st.lists(WORD, min_size=1, max_size=3).map(".".join)
ADDRESS = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(".".join)
ROLES = st.frozensets(st.sampled_from(["r1", "r2", "r3", "admin"]), max_size=3)
TABLE = st.dictionaries(st.sampled_from(PERMISSIONS[:4]), st.lists(st.sampled_from(["r1", "r2", "r3"]), max_size=2),
                        max_size=3)


@SETTINGS
@given(st.dictionaries(PATTERN, TABLE, max_size=5), st.lists(st.tuples(ROLES, st.sampled_from(PERMISSIONS[:4]),
                                                                       ADDRESS), min_size=1, max_size=20))
def test_decisions_follow_the_most_specific_pattern_cached_or_not(configured, asks) -> None:
    cached = Authorizer(configured)
    table = dict(configured)
    table.setdefault("#", {p: ["admin"] for p in PERMISSIONS})
    for _ in range(2):  # the second round answers from the cache
        for roles, permission, address in asks:
            deciding = by_specificity([p for p in table if matches(p, address)])[0]
            expected = bool(set(table[deciding].get(permission, ())) & roles)
            subject = Subject("u", roles)
            assert cached.allowed(subject, permission, address) is expected
            assert Authorizer(configured).allowed(subject, permission, address) is expected
            if expected:  # more roles never take a permission away
                assert cached.allowed(Subject("u", roles | {"r3"}), permission, address)


@SETTINGS
@given(st.dictionaries(st.text(max_size=8), st.dictionaries(st.text(max_size=12), st.one_of(
    st.lists(st.text(max_size=5), max_size=3), st.text(max_size=5), st.integers())), max_size=3))
def test_any_settings_are_accepted_or_a_value_error(settings_value) -> None:
    try:
        validate_settings(settings_value)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)


TEXT = st.one_of(st.none(), st.text(max_size=40), st.sampled_from(["alice", "alice-pw", "", "\x00", "é" * 30]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(user=TEXT, password=TEXT, anonymous=st.booleans())
def test_any_credentials_log_in_or_are_refused(tmp_path: Path, user, password, anonymous) -> None:
    users = UserStore(tmp_path / "users.toml")
    if "alice" not in users.users:
        users.add("alice", "alice-pw", ["app"])
    security = Security(users=users, allow_anonymous=anonymous, cluster_user="cluster", cluster_password="c-pw")
    try:
        subject = security.login(user, password, "1.2.3.4:5")
    except AuthenticationFailed as exc:
        assert str(exc).startswith("login refused: ")
        assert not (user == "alice" and password == "alice-pw")
        return
    assert subject.remote == "1.2.3.4:5"
    if user:
        assert (user, password) == ("alice", "alice-pw") and subject.roles == frozenset({"app"})
    else:
        assert anonymous and subject.user is None and subject.roles == frozenset({"anonymous"})
