"""AMQP 1.0 over the broker's TLS listener (certificates made at run time), with proton's SSL:
the all-protocols port and amqp_port speak AMQP inside TLS; a client that does not trust the
broker's CA does not get a connection, and the broker serves others meanwhile; with mutual TLS
a client certificate mapped to a user logs in with SASL EXTERNAL."""

from __future__ import annotations

import json

import pytest
from proton import ConnectionException, Message, SSLDomain
from proton.utils import BlockingConnection, LinkDetached

from petrel.security import UserStore
from petrel.testing.certs import make_pki
from petrel.testing.process import OWN_SECURITY, BrokerProcess, free_port


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("amqp-pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki):
    amqp_port = free_port()
    settings = (f"ssl_enabled = true\nssl_cert = {json.dumps(str(pki.server.cert))}\n"
                f"ssl_key = {json.dumps(str(pki.server.key))}\nssl_ca = {json.dumps(str(pki.ca.cert))}\n"
                f"amqp_port = {amqp_port}\n")
    b = BrokerProcess(tmp_path_factory.mktemp("amqp-tls") / "b", settings=settings).start()
    b.amqp_port = amqp_port
    yield b
    b.kill9()


def domain(ca) -> SSLDomain:
    d = SSLDomain(SSLDomain.MODE_CLIENT)
    d.set_trusted_ca_db(str(ca))
    d.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)  # against the name in the URL: localhost
    return d


@pytest.mark.parametrize("which", ["port", "amqp_port"])
def test_amqp_inside_tls(tls_broker, pki, which):
    port = getattr(tls_broker, which)
    c = BlockingConnection(f"amqps://localhost:{port}", timeout=20, ssl_domain=domain(pki.ca.cert))
    try:
        c.create_sender("queue://tls.q").send(Message(body=f"over TLS on {which}", durable=True))
        r = c.create_receiver("queue://tls.q")
        assert r.receive(timeout=10).body == f"over TLS on {which}"
        r.accept()
    finally:
        c.close()


def test_a_client_not_trusting_the_ca_gets_no_connection(tls_broker, pki):
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqps://localhost:{tls_broker.port}", timeout=10, ssl_domain=domain(pki.other_ca.cert))
    c = BlockingConnection(f"amqps://localhost:{tls_broker.port}", timeout=20, ssl_domain=domain(pki.ca.cert))
    c.close()


def test_a_client_certificate_logs_in_with_sasl_external(tmp_path, pki):
    users = tmp_path / "users.toml"
    store = UserStore(users)
    store.add("alice", "alice-pw", ["app"])
    store.save()
    settings = (f"ssl_enabled = true\nssl_need_client_auth = true\nssl_cert = {json.dumps(str(pki.server.cert))}\n"
                f"ssl_key = {json.dumps(str(pki.server.key))}\nssl_ca = {json.dumps(str(pki.ca.cert))}\n"
                f"[security]\nusers_file = {json.dumps(str(users))}\n"
                f"certificate_users = {{ {json.dumps(pki.client.subject)} = 'alice' }}\nlogin_failure_delay = 0\n"
                '[security_settings."tls.#"]\nsend = ["app"]\nconsume = ["app"]\ncreateAddress = ["app"]\n'
                'createDurableQueue = ["app"]\n')
    with BrokerProcess(tmp_path / "b", settings=settings, env=OWN_SECURITY) as b:
        alice = domain(pki.ca.cert)
        alice.set_credentials(str(pki.client.cert), str(pki.client.key), None)
        c = BlockingConnection(f"amqps://localhost:{b.port}", timeout=20, ssl_domain=alice, allowed_mechs="EXTERNAL")
        try:
            c.create_sender("queue://tls.cert").send(Message(body="as alice"))
            r = c.create_receiver("queue://tls.cert")
            assert r.receive(timeout=10).body == "as alice"
            r.accept()
            with pytest.raises(LinkDetached, match="amqp:unauthorized-access"):
                c.create_sender("queue://elsewhere")  # alice's roles, not more
        finally:
            c.close()
        # the stranger's certificate (another CA) gets no connection
        stranger = domain(pki.ca.cert)
        stranger.set_credentials(str(pki.stranger.cert), str(pki.stranger.key), None)
        with pytest.raises(ConnectionException):
            BlockingConnection(f"amqps://localhost:{b.port}", timeout=10, ssl_domain=stranger, allowed_mechs="EXTERNAL")
