"""The ``ssl_*`` settings: a bad key, certificate or CA is a one-line ConfigError before anything listens."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from petrel.config import load_config
from petrel.errors import ConfigError
from petrel.server.tls import link_context, rfc4514, server_context
from petrel.testing.certs import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return path


def tls_toml(pki, **extra: object) -> str:
    values = {"ssl_enabled": True, "ssl_cert": str(pki.server.cert), "ssl_key": str(pki.server.key), **extra}
    lines = []
    for key, value in values.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        elif isinstance(value, list):
            lines.append(f"{key} = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in value)}]")
        else:
            lines.append(f'{key} = "{value}"')
    return "\n".join(lines) + "\n"


def error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env=env or {})
    return str(info.value)


def test_defaults_are_off_and_safe() -> None:
    config = load_config(None, env={})
    assert not config.ssl_enabled and not config.http_ssl_enabled and not config.ssl_need_client_auth
    assert config.ssl_protocols == ["TLSv1.2", "TLSv1.3"]


def test_a_good_setup_loads_and_builds_a_tls12_plus_context(tmp_path: Path, pki) -> None:
    config = load_config(write(tmp_path, tls_toml(pki, ssl_ca=pki.ca.cert, ssl_need_client_auth=True)), env={})
    ctx = server_context(config)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert all(c["protocol"] in ("TLSv1.2", "TLSv1.3") for c in ctx.get_ciphers())
    assert not any("RC4" in c["name"] or "NULL" in c["name"] or "-CBC-" in c["name"] for c in ctx.get_ciphers())


def test_tls_needs_a_certificate_and_a_key(tmp_path: Path) -> None:
    assert "ssl_enabled: needs ssl_cert and ssl_key" in error(tmp_path, "ssl_enabled = true\n")
    assert "http_ssl_enabled: needs ssl_cert and ssl_key" in error(tmp_path, "http_ssl_enabled = true\n")


def test_a_missing_certificate_is_named(tmp_path: Path, pki) -> None:
    message = error(tmp_path, tls_toml(pki, ssl_cert=tmp_path / "nope.pem"))
    assert message.startswith(f"{tmp_path / 'broker.toml'}: ")
    assert f"ssl_cert: no such file: {tmp_path / 'nope.pem'}" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_key_is_named(tmp_path: Path, pki) -> None:
    key = tmp_path / "locked.key"
    key.write_bytes(pki.server.key.read_bytes())
    key.chmod(0)
    assert "ssl_key: cannot read" in error(tmp_path, tls_toml(pki, ssl_key=key))


def test_a_file_that_is_not_pem_is_named(tmp_path: Path, pki) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"\x00\x01 not a certificate")
    assert f"ssl_cert: {junk} is not a PEM file" in error(tmp_path, tls_toml(pki, ssl_cert=junk))
    assert "is a directory" in error(tmp_path, tls_toml(pki, ssl_ca=tmp_path))


def test_a_key_that_is_not_the_certificates_is_named(tmp_path: Path, pki) -> None:
    message = error(tmp_path, tls_toml(pki, ssl_key=pki.client.key))
    assert f"ssl_key: {pki.client.key} is not the key of ssl_cert {pki.server.cert}" in message


def test_an_encrypted_key_needs_its_password(tmp_path: Path, pki) -> None:
    locked = pki.ca.issue("locked", "broker", key_password="s3cret")
    assert "is encrypted: set ssl_key_password" in error(tmp_path, tls_toml(pki, ssl_cert=locked.cert,
                                                                            ssl_key=locked.key))
    assert "wrong ssl_key_password" in error(tmp_path, tls_toml(pki, ssl_cert=locked.cert, ssl_key=locked.key,
                                                                ssl_key_password="wrong"))
    config = load_config(write(tmp_path, tls_toml(pki, ssl_cert=locked.cert, ssl_key=locked.key,
                                                  ssl_key_password="s3cret")), env={})
    assert server_context(config) is not None


def test_mutual_tls_needs_a_ca(tmp_path: Path, pki) -> None:
    assert "ssl_need_client_auth: needs ssl_ca" in error(tmp_path, tls_toml(pki, ssl_need_client_auth=True))


def test_a_ca_file_without_certificates_is_named(tmp_path: Path, pki) -> None:
    message = error(tmp_path, tls_toml(pki, ssl_ca=pki.client.key))
    assert "ssl_ca:" in message and "no usable CA certificate" in message


def test_protocols_tls13_only_and_old_versions_refused(tmp_path: Path, pki) -> None:
    config = load_config(write(tmp_path, tls_toml(pki)), env={"PETREL_SSL_PROTOCOLS": "TLSv1.3"})
    assert server_context(config).minimum_version == ssl.TLSVersion.TLSv1_3
    message = error(tmp_path, tls_toml(pki, ssl_protocols=["TLSv1.1", "TLSv1.2"]))
    assert "ssl_protocols" in message and "TLSv1.1" in message


def test_a_cipher_list_that_matches_nothing_is_named(tmp_path: Path, pki) -> None:
    assert "ssl_ciphers: no cipher matches 'NOPE-CIPHER'" in error(tmp_path, tls_toml(pki, ssl_ciphers="NOPE-CIPHER"))
    config = load_config(write(tmp_path, tls_toml(pki, ssl_ciphers="ECDHE+AESGCM")), env={})
    assert server_context(config) is not None


def test_cert_without_key_is_refused(tmp_path: Path, pki) -> None:
    assert "give both or neither" in error(tmp_path, f'ssl_cert = "{pki.server.cert}"\n')


def test_link_context_trusts_the_ca_and_presents_the_brokers_certificate(tmp_path: Path, pki) -> None:
    config = load_config(write(tmp_path, tls_toml(pki, ssl_ca=pki.ca.cert, ssl_verify_host=False)), env={})
    ctx = link_context(config)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname
    assert any("test CA" in str(c.get("subject")) for c in ctx.get_ca_certs())


def test_subjects_are_rfc4514_most_specific_first_and_escaped() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "Acme, Inc."),), (("commonName", "alice"),))
    assert rfc4514(subject) == r"CN=alice,O=Acme\, Inc.,C=US"
    assert rfc4514(((("commonName", " #x+y "),),)) == r"CN=\ #x\+y\ "
    assert rfc4514(((("commonName", "a"), ("userId", "7")),)) == "CN=a+UID=7"


def test_generated_subjects_match_what_the_broker_computes(pki) -> None:
    assert pki.client.subject == "CN=alice,O=Petrel Tests"


def test_relative_paths_in_the_file_are_relative_to_it(tmp_path: Path, pki, monkeypatch) -> None:
    instance = tmp_path / "instance"
    (instance / "certs").mkdir(parents=True)
    for source, name in ((pki.server.cert, "broker.pem"), (pki.server.key, "broker.key"), (pki.ca.cert, "ca.pem")):
        (instance / "certs" / name).write_bytes(source.read_bytes())
    (instance / "broker.toml").write_text(
        'ssl_enabled = true\nssl_cert = "certs/broker.pem"\nssl_key = "certs/broker.key"\nssl_ca = "certs/ca.pem"\n')
    monkeypatch.chdir(tmp_path)
    config = load_config(instance / "broker.toml", env={})
    assert config.ssl_cert == instance / "certs" / "broker.pem" and config.ssl_ca == instance / "certs" / "ca.pem"
