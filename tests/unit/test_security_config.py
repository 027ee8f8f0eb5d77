"""The security settings of broker.toml: validation naming the bad key, paths, variables (petrel.config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from petrel.config import env_settable, load_config
from petrel.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(*args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_defaults_are_secure(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), env={})
    assert config.security_enabled is True
    assert config.security.allow_anonymous is False and config.security.anonymous_role == "anonymous"
    assert config.security.users_file is None and config.security_settings == {}


def test_settings_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '''
[security]
users_file = "etc/users.toml"
allow_anonymous = true
anonymous_role = "guest"
certificate_users = { "CN=app,O=Example" = "app" }

[security_settings."orders.#"]
send = ["app"]
consume = ["app", "audit"]
''')
    config = load_config(path, env={})
    assert config.security.users_file == tmp_path / "etc" / "users.toml"  # next to broker.toml
    assert config.security.allow_anonymous and config.security.anonymous_role == "guest"
    assert config.security.certificate_users == {"CN=app,O=Example": "app"}
    assert config.security_settings == {"orders.#": {"send": ["app"], "consume": ["app", "audit"]}}


def test_an_unknown_permission_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, '[security_settings."orders.#"]\nsendd = ["app"]\n')
    message = error_of(path, env={})
    assert message.startswith(f"{path}: security_settings: ")
    assert '"orders.#".sendd: unknown permission (did you mean send?)' in message


def test_roles_must_be_a_list(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, '[security_settings.q]\nsend = "app"\n'), env={})
    assert "security_settings" in message and "send" in message


def test_an_unknown_security_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "[security]\nallow_anonymus = true\n"), env={})
    assert "security.allow_anonymus: unknown setting (did you mean allow_anonymous?)" in message


def test_security_enabled_from_the_environment() -> None:
    assert "security_enabled" in env_settable()
    assert "security" not in env_settable() and "security_settings" not in env_settable()
    assert load_config(None, env={"PETREL_SECURITY_ENABLED": "false"}).security_enabled is False
    message = error_of(None, env={"PETREL_SECURITY_ENABLED": "maybe"})
    assert message.startswith("environment: PETREL_SECURITY_ENABLED:")
    assert "only be set in the config file" in error_of(None, env={"PETREL_SECURITY_SETTINGS": "x"})


def test_a_relative_ldap_ca_file_is_next_to_broker_toml(tmp_path: Path) -> None:
    path = write(tmp_path, '''
[security.ldap]
url = "ldaps://ldap.example.com"
ca_file = "etc/ldap-ca.pem"
user_dn_template = "uid={user},ou=people,dc=example,dc=com"
''')
    assert load_config(path, env={}).security.ldap.ca_file == tmp_path / "etc" / "ldap-ca.pem"
    absolute = write(tmp_path, '''
[security.ldap]
url = "ldaps://ldap.example.com"
ca_file = "/srv/ca.pem"
user_dn_template = "uid={user},ou=people,dc=example,dc=com"
''')
    assert load_config(absolute, env={}).security.ldap.ca_file == Path("/srv/ca.pem")


def test_a_stopping_broker_ends_its_ldap_login_threads(tmp_path: Path) -> None:
    import asyncio

    from petrel.config import BrokerConfig
    from petrel.security.config import SecurityModel
    from petrel.server.broker import Broker

    ldap = {"url": "ldap://127.0.0.1:1", "user_dn_template": "uid={user},dc=example"}
    config = BrokerConfig(data_dir=tmp_path / "data", port=0, stomp_port=-1, http_port=-1, max_disk_usage=100,
                          security=SecurityModel(ldap=ldap))

    async def run() -> Broker:
        broker = Broker(config)
        await broker.start()
        await broker.stop()
        return broker

    broker = asyncio.run(run())
    with pytest.raises(RuntimeError, match="shutdown"):  # its pool takes no more logins
        broker.security.ldap.executor.submit(print)
