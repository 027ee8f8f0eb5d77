"""LDAP logins (`petrel.security.ldap`, issue 13) against a real OpenLDAP slapd
(`petrel.testing.ldap`): binds as the user, roles from groups, escaped input, an empty password,
a hung or stopped server refused within the timeout and logged once, the cache, and how
`Security` combines LDAP with the users file and the cluster user."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.security.config import LdapModel
from petrel.security.errors import AuthenticationFailed
from petrel.security.guard import Security
from petrel.security.ldap import LdapLogin, LdapRefused
from petrel.security.subject import Subject
from petrel.security.users import UserStore
from petrel.testing.certs import make_pki
from petrel.testing.ldap import ROOT_DN, ROOT_PASSWORD, LdapServer, ldap_available
from petrel.testing.process import wait_for

pytestmark = pytest.mark.skipif(ldap_available() is not None, reason=f"no slapd: {ldap_available()}")

USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw", "*": "star-pw"}
GROUPS = {"producers": ["alice"], "audit": ["alice", "bob"], "$internal": ["carol"]}
PEOPLE = "ou=people,dc=example,dc=com"
GROUPS_BASE = "ou=groups,dc=example,dc=com"


@pytest.fixture(scope="module")
def slapd(tmp_path_factory):
    with LdapServer(tmp_path_factory.mktemp("slapd"), users=USERS, groups=GROUPS) as server:
        yield server


def _model(server: LdapServer, fields: dict, extra: dict) -> LdapModel:
    return LdapModel(**{"url": server.url, "group_search_base": GROUPS_BASE, "timeout": 2, "cache_seconds": 0,
                        **fields, **extra})


def template(server: LdapServer, **extra) -> LdapModel:
    return _model(server, {"user_dn_template": f"uid={{user}},{PEOPLE}"}, extra)


def search(server: LdapServer, **extra) -> LdapModel:
    return _model(server, {"bind_dn": ROOT_DN, "bind_password": ROOT_PASSWORD, "user_search_base": PEOPLE}, extra)


def anonymous_search(server: LdapServer, **extra) -> LdapModel:
    return _model(server, {"user_search_base": PEOPLE}, extra)


def refused(login: LdapLogin, user: str, password: str) -> str:
    with pytest.raises(LdapRefused) as info:
        login.authenticate(user, password)
    return str(info.value)


@pytest.mark.parametrize("model", [template, search, anonymous_search])
def test_a_user_gets_the_roles_of_its_groups(slapd, model) -> None:
    login = LdapLogin(model(slapd))
    assert login.authenticate("alice", "alice-pw").roles == {"producers", "audit"}
    assert login.authenticate("bob", "bob-pw").roles == {"audit"}
    # a group whose name is a reserved role ($internal: the cluster's) grants nothing
    assert login.authenticate("carol", "carol-pw").roles == frozenset()
    # without group_search_base, LDAP gives no roles
    assert LdapLogin(model(slapd, group_search_base=None)).authenticate("alice", "alice-pw").roles == frozenset()


@pytest.mark.parametrize("model", [template, search, anonymous_search])
def test_wrong_passwords_unknown_users_and_injections_are_refused(slapd, model) -> None:
    login = LdapLogin(model(slapd))
    for user, password in [("alice", "bob-pw"), ("alice", "alice-pw "), ("nobody", "alice-pw"),
                           ("*)(uid=*", "alice-pw"), ("alice)(uid=*", "alice-pw"), ("a*", "alice-pw"),
                           ("alice,ou=people", "alice-pw"), ("alice\x00", "alice-pw"), ("x" * 300, "alice-pw")]:
        assert refused(login, user, password) == "invalid user or password", user
    # the entry uid=* exists: its name is escaped into the DN and the filter, and matches itself only
    assert login.authenticate("*", "star-pw").user == "*"
    assert refused(login, "*", "alice-pw") == "invalid user or password"


NAMES = st.one_of(st.sampled_from(sorted(USERS)), st.text(max_size=16),
                  st.sampled_from(["ALICE", "Alice", " alice", "alice ", "al*", "\\", "alice\\", "(alice)", "#alice",
                                   "alice,ou=people", "alice+cn=x", "alice\x00"]))
PASSWORDS = st.one_of(st.sampled_from(sorted(USERS.values())), st.text(max_size=12))


@given(user=NAMES, password=PASSWORDS, model=st.sampled_from([template, search]))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_credentials_log_in_exactly_as_the_directory_says_or_are_refused(slapd, user, password, model) -> None:
    # LDAP matches names ignoring case and spaces: only the entry's own uid logs in, so one
    # LDAP user is one Petrel user (audit lines, per-user limits)
    login = LdapLogin(model(slapd))
    if password and USERS.get(user) == password:
        roles = {group for group, members in GROUPS.items() if user in members and not group.startswith("$")}
        assert login.authenticate(user, password) == Subject(user, frozenset(roles))
    else:
        assert refused(login, user, password).startswith("invalid user or password")


@pytest.mark.parametrize("model", [template, search, anonymous_search])
def test_an_empty_password_never_logs_in(slapd, model) -> None:
    # an LDAP simple bind with a DN and no password is an "unauthenticated bind": it succeeds
    login = LdapLogin(model(slapd))
    assert "an empty password never logs in" in refused(login, "alice", "")


def test_a_wrong_bind_password_is_named(slapd) -> None:
    model = search(slapd).model_copy(update={"bind_password": "wrong"})
    message = refused(LdapLogin(model), "alice", "alice-pw")
    assert f"the LDAP server at {slapd.url} refused bind_dn {ROOT_DN!r}" in message


def test_a_hung_or_stopped_server_is_refused_within_the_timeout_and_logged_once(slapd, caplog) -> None:
    login = LdapLogin(template(slapd, timeout=1))
    caplog.set_level(logging.INFO, logger="petrel.security.ldap")
    slapd.pause()
    try:
        for _ in range(2):
            t0 = time.monotonic()
            assert refused(login, "alice", "alice-pw") == f"the LDAP server at {slapd.url} did not answer within 1 s"
            assert time.monotonic() - t0 < 2.5
    finally:
        slapd.resume()
    slapd.kill()
    try:
        t0 = time.monotonic()
        assert "refused the connection (is it running?)" in refused(login, "alice", "alice-pw")
        assert time.monotonic() - t0 < 1.0
    finally:
        slapd.start()
    assert login.authenticate("alice", "alice-pw").roles == {"producers", "audit"}
    down = [r for r in caplog.records if getattr(r, "event", "") == "security.ldap_down"]
    up = [r for r in caplog.records if getattr(r, "event", "") == "security.ldap_up"]
    assert len(down) == 1 and "did not answer within 1 s: LDAP logins are refused until it answers" in down[0].message
    assert len(up) == 1 and up[0].message == f"the LDAP server at {slapd.url} answers again"


def test_a_successful_login_is_remembered_for_cache_seconds(slapd) -> None:
    cached = LdapLogin(template(slapd, cache_seconds=60))
    uncached = LdapLogin(template(slapd))
    assert cached.authenticate("bob", "bob-pw").roles == {"audit"}
    assert uncached.authenticate("bob", "bob-pw").roles == {"audit"}
    slapd.kill()
    try:
        assert cached.authenticate("bob", "bob-pw").roles == {"audit"}  # no LDAP call
        assert "refused the connection" in refused(cached, "bob", "other")  # another password is not
        assert "refused the connection" in refused(uncached, "bob", "bob-pw")
    finally:
        slapd.start()


def test_a_change_in_ldap_takes_effect_when_the_cached_login_expires(tmp_path) -> None:
    from ldap3 import MODIFY_DELETE, MODIFY_REPLACE, Connection

    with LdapServer(tmp_path / "slapd", users=USERS, groups=GROUPS) as server:
        login = LdapLogin(template(server, cache_seconds=1))
        assert login.authenticate("alice", "alice-pw").roles == {"producers", "audit"}
        admin = Connection(server.url, ROOT_DN, ROOT_PASSWORD, auto_bind=True)
        assert admin.modify(server.user_dn("alice"), {"userPassword": [(MODIFY_REPLACE, ["new-pw"])]})
        assert admin.modify(f"cn=audit,{GROUPS_BASE}", {"member": [(MODIFY_DELETE, [server.user_dn("alice")])]})
        admin.unbind()
        assert login.authenticate("alice", "alice-pw").roles == {"producers", "audit"}  # remembered
        t0 = time.monotonic()

        def expired() -> bool:
            try:
                login.authenticate("alice", "alice-pw")
            except LdapRefused as exc:
                assert str(exc) == "invalid user or password"
                return True
            return False

        wait_for(expired, 5)
        assert time.monotonic() - t0 > 0.5
        assert login.authenticate("alice", "new-pw").roles == {"producers"}


def security(slapd: LdapServer, tmp_path, **extra) -> Security:
    users = UserStore(tmp_path / "users.toml")
    users.add("filed", "filed-pw", ["local"])
    users.add("bob", "file-bob-pw", ["local"])
    users.save()
    return Security(users=users, cluster_user="$cluster", cluster_password="cluster-secret",
                    login_failure_delay=0.05, ldap=LdapLogin(template(slapd, **extra)))


def test_the_users_file_first_then_ldap(slapd, tmp_path) -> None:
    sec = security(slapd, tmp_path)
    assert sec.login("filed", "filed-pw").roles == {"local"}
    assert sec.login("alice", "alice-pw", "1.2.3.4:5").roles == {"producers", "audit"}
    assert sec.login("alice", "alice-pw", "1.2.3.4:5").remote == "1.2.3.4:5"
    # a user of the users file is decided there: its LDAP password does not log it in
    assert sec.login("bob", "file-bob-pw").roles == {"local"}
    with pytest.raises(AuthenticationFailed, match="login refused: invalid user or password"):
        sec.login("bob", "bob-pw")
    assert sec.login("$cluster", "cluster-secret").internal


def test_ldap_only_ignores_the_users_file(slapd, tmp_path) -> None:
    # a broker with ldap_only creates no users file with a generated admin
    fresh = Security(users=UserStore(tmp_path / "fresh" / "users.toml"), ldap=LdapLogin(template(slapd, ldap_only=True)))
    assert fresh.prepare() is None and not (tmp_path / "fresh" / "users.toml").exists()
    without = Security(users=UserStore(tmp_path / "other" / "users.toml"), ldap=LdapLogin(template(slapd)))
    assert without.prepare() is not None and (tmp_path / "other" / "users.toml").exists()
    sec = security(slapd, tmp_path, ldap_only=True)
    assert sec.login("bob", "bob-pw").roles == {"audit"}
    for user, password in [("bob", "file-bob-pw"), ("filed", "filed-pw")]:
        with pytest.raises(AuthenticationFailed, match="login refused: invalid user or password"):
            sec.login(user, password)
    assert sec.login("$cluster", "cluster-secret").internal


def test_a_hung_server_holds_up_no_other_login(slapd, tmp_path) -> None:
    sec = security(slapd, tmp_path, timeout=2)

    async def go() -> None:
        hung = [asyncio.create_task(sec.login_async("alice", "alice-pw")) for _ in range(12)]
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        assert (await sec.login_async("filed", "filed-pw")).roles == {"local"}
        assert (await sec.login_async("$cluster", "cluster-secret")).internal
        assert time.monotonic() - t0 < 1.5
        for result in await asyncio.gather(*hung, return_exceptions=True):
            assert isinstance(result, AuthenticationFailed)
            assert f"login refused: the LDAP server at {slapd.url} did not answer within 2 s" == str(result)

    slapd.pause()
    try:
        asyncio.run(asyncio.wait_for(go(), 30))
    finally:
        slapd.resume()
    assert asyncio.run(sec.login_async("alice", "alice-pw")).roles == {"producers", "audit"}


def test_ldaps_checks_the_servers_certificate(tmp_path) -> None:
    pki = make_pki(tmp_path / "pki")
    other_host = pki.ca.issue("other-host", "ldap", hosts=("ldap.example.org",))
    cases = [(pki.server, pki.ca.cert, None), (pki.server, pki.other_ca.cert, "(unable to get local issuer certificate)"),
             (pki.expired_server, pki.ca.cert, "(certificate has expired)"),
             (other_host, pki.ca.cert, "presented a certificate for another host name")]
    for issued, ca_file, error in cases:
        with LdapServer(tmp_path / issued.cert.stem, users=USERS, groups=GROUPS, tls=(issued.cert, issued.key)) as server:
            assert server.url.startswith("ldaps://")
            login = LdapLogin(template(server, ca_file=ca_file))
            if error is None:
                assert login.authenticate("alice", "alice-pw").roles == {"producers", "audit"}
            else:
                message = refused(login, "alice", "alice-pw")
                assert message.startswith(f"the LDAP server at {server.url} presented a certificate")
                assert error in message
