"""The ``[security.ldap]`` table of broker.toml: defaults, and errors naming the bad key without
showing a password (petrel.config, petrel.security.config.LdapModel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from petrel.config import load_config
from petrel.errors import ConfigError
from petrel.security.guard import Security

BASE = 'url = "ldap://ldap.example.com:389"\n'


def load(tmp_path: Path, table: str):
    path = tmp_path / "broker.toml"
    path.write_text(f"[security.ldap]\n{table}", encoding="utf-8")
    return load_config(path, env={})


def error_of(tmp_path: Path, table: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, table)
    assert "\n" not in str(info.value)
    return str(info.value).split(": ", 1)[1]


def test_defaults(tmp_path: Path) -> None:
    ldap = load(tmp_path, BASE + 'user_dn_template = "uid={user},ou=people,dc=example,dc=com"\n').security.ldap
    assert ldap.url == "ldap://ldap.example.com:389"
    assert (ldap.timeout, ldap.cache_seconds, ldap.ldap_only) == (5, 60, False)
    assert (ldap.group_search_base, ldap.group_search_filter, ldap.role_attribute) == (None, "(member={dn})", "cn")
    assert ldap.user_search_filter == "(uid={user})" and ldap.bind_dn is None
    (tmp_path / "plain.toml").write_text("")
    assert load_config(tmp_path / "plain.toml", env={}).security.ldap is None


def test_a_broker_with_ldap_builds_its_login(tmp_path: Path) -> None:
    config = load(tmp_path, BASE + 'user_dn_template = "uid={user},dc=x"\nldap_only = true\n')
    security = Security.from_config(config)
    assert security.ldap is not None and security.ldap.only and security.ldap.url == "ldap://ldap.example.com:389"
    off = Security.from_config(config.model_copy(update={"security_enabled": False}))
    assert off.ldap is None


@pytest.mark.parametrize("table, expected", [
    ('url = "http://x"\nuser_dn_template = "uid={user}"\n',
     "security.ldap.url: must be ldap://host[:port] or ldaps://host[:port] (got 'http://x')"),
    (BASE + 'user_dn_template = "uid=someone"\n',
     "security.ldap.user_dn_template: must contain {user} once (got 'uid=someone')"),
    (BASE + 'user_search_base = "dc=x"\nuser_search_filter = "(uid=*)"\n',
     "security.ldap.user_search_filter: must contain {user} once (got '(uid=*)')"),
    (BASE + 'user_dn_template = "uid={user}"\ngroup_search_filter = "(member=x)"\n',
     "security.ldap.group_search_filter: must contain {dn} once (got '(member=x)')"),
    (BASE + 'user_dn_template = "uid={user}"\ntimeout = 0\n',
     "security.ldap.timeout: Input should be greater than or equal to 1 (got 0)"),
    (BASE + 'user_dn_template = "uid={user}"\nurll = "x"\n', "security.ldap.urll: unknown setting (did you mean url?)"),
    ('user_dn_template = "uid={user}"\n', "security.ldap.url: Field required"),
    (BASE, "security.ldap: set user_dn_template or user_search_base (one of them)"),
    (BASE + 'user_dn_template = "uid={user}"\nuser_search_base = "dc=x"\n',
     "security.ldap: set user_dn_template or user_search_base (one of them)"),
    (BASE + 'user_search_base = "dc=x"\nbind_dn = "cn=svc"\n', "security.ldap: set bind_dn and bind_password together"),
    (BASE + 'user_search_base = "dc=x"\nbind_dn = "cn=svc"\nbind_password = ""\n',
     "security.ldap: bind_password must not be empty (an empty password is an unauthenticated bind)"),
])
def test_errors_name_the_key(tmp_path: Path, table: str, expected: str) -> None:
    assert error_of(tmp_path, table) == expected


def test_an_error_never_shows_the_bind_password(tmp_path: Path) -> None:
    message = error_of(tmp_path, BASE + 'bind_dn = "cn=svc"\nbind_password = "s3cret-pw"\n')
    assert message == "security.ldap: set user_dn_template or user_search_base (one of them)"
