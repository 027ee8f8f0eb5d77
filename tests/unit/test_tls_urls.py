"""ssl:// in client URLs and cluster connectors, and the client's TLS options."""

from __future__ import annotations

import ssl

import pytest

from petrel.client.failover import ReconnectPlan
from petrel.client.tls import client_context
from petrel.client.url import Endpoint, parse_url
from petrel.cluster.config import connector_tls, parse_connector
from petrel.config import BrokerConfig
from petrel.testing.certs import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_ssl_urls_give_tls_endpoints() -> None:
    url = parse_url("ssl://broker1:61617?trustStorePath=/ca.pem")
    assert url.endpoints == (Endpoint("broker1", 61617, True),)
    assert str(url.endpoints[0]) == "ssl://broker1:61617"
    assert url.options == {"trustStorePath": "/ca.pem"}
    assert parse_url("tcp://b:1").endpoints[0].tls is False


def test_ssl_enabled_makes_tcp_endpoints_tls() -> None:
    assert parse_url("tcp://b:1?sslEnabled=true").endpoints[0].tls
    assert not parse_url("tcp://b:1?sslEnabled=false").endpoints[0].tls
    with pytest.raises(ValueError, match="sslEnabled"):
        parse_url("tcp://b:1?sslEnabled=maybe")


def test_failover_lists_of_ssl_endpoints_keep_their_tls_options() -> None:
    url = parse_url("failover:(ssl://a:1,ssl://b:2)?randomize=false&trustStorePath=/ca.pem&verifyHost=false")
    assert [e.tls for e in url.endpoints] == [True, True]
    assert url.options == {"trustStorePath": "/ca.pem", "verifyHost": "false"}
    assert not url.failover.randomize


def test_brokers_learnt_by_a_tls_url_are_reached_with_tls() -> None:
    plan = ReconnectPlan(parse_url("failover:(ssl://a:1)"))
    plan.learn(["c:3", "ssl://d:4"])
    assert plan.discovered == [Endpoint("c", 3, True), Endpoint("d", 4, True)]
    plan.set_redirect("e:5")
    assert plan.redirect == Endpoint("e", 5, True)
    plain = ReconnectPlan(parse_url("failover:(tcp://a:1)"))
    plain.learn(["c:3", "ssl://d:4"])
    assert plain.discovered == [Endpoint("c", 3, False), Endpoint("d", 4, True)]


def test_ssl_connectors() -> None:
    assert parse_connector("ssl://10.0.0.1:61617") == ("10.0.0.1", 61617)
    assert connector_tls("ssl://h:1") and not connector_tls("tcp://h:1") and not connector_tls("h:1")
    with pytest.raises(ValueError, match="tcp:// and ssl://"):
        parse_connector("udp://h:1")
    config = BrokerConfig(connectors={"a": "ssl://h:1", "b": "tcp://h:2"}, security_enabled=False)
    assert config.connector_url("a") == "ssl://h:1"
    assert config.connector_url("b") == "h:2"
    assert config.connector_url("ssl://[::1]:3") == "ssl://[::1]:3"


def test_client_context_options(pki, tmp_path) -> None:
    ctx = client_context({"trustStorePath": str(pki.ca.cert)})
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert not client_context({"sslCa": str(pki.ca.cert), "verifyhost": "false"}).check_hostname
    client_context({"trustStorePath": str(pki.ca.cert), "keyStorePath": str(pki.client.cert),
                    "sslKey": str(pki.client.key)})
    with pytest.raises(ValueError, match="trustStorePath: no such file"):
        client_context({"trustStorePath": str(tmp_path / "none.pem")})
    with pytest.raises(ValueError, match="verifyHost"):
        client_context({"verifyHost": "perhaps"})
    with pytest.raises(ValueError, match="sslKey: give the client certificate too"):
        client_context({"sslKey": str(pki.client.key)})
    with pytest.raises(ValueError, match="keyStorePath: cannot load"):
        client_context({"keyStorePath": str(pki.client.cert), "sslKey": str(pki.server.key)})
    locked = pki.ca.issue("locked-client", "locked", hosts=(), key_password="pw")
    with pytest.raises(ValueError, match="keyStorePassword"):
        client_context({"keyStorePath": str(locked.cert), "sslKey": str(locked.key)})
    client_context({"keyStorePath": str(locked.cert), "sslKey": str(locked.key), "keyStorePassword": "pw"})
