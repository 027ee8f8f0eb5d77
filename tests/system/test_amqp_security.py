"""AMQP 1.0 with security on, against a real `petrel run`: SASL PLAIN checked against the users
file (a wrong password refused), no anonymous client unless allowed, and a link to an address the
user may not use refused with amqp:unauthorized-access."""

from __future__ import annotations

from pathlib import Path

import pytest
from proton import Message
from proton import ConnectionException
from proton.utils import BlockingConnection, LinkDetached

from petrel.security.users import UserStore
from petrel.testing.process import OWN_SECURITY, BrokerProcess

SETTINGS = '''
[security]
users_file = "users.toml"
login_failure_delay = 100

[security_settings."orders.#"]
send = ["producer"]
consume = ["consumer"]
createAddress = ["producer", "consumer"]
createDurableQueue = ["producer", "consumer"]
'''
PASSWORDS = {"producer": "producer-pw", "consumer": "consumer-pw"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("amqp-secure") / "b"
    workdir.mkdir()
    users = UserStore(workdir / "users.toml")
    for name, password in PASSWORDS.items():
        users.add(name, password, [name])
    users.save()
    b = BrokerProcess(workdir, settings=SETTINGS, env=OWN_SECURITY).start()
    yield b
    b.kill9()


def connect(b: BrokerProcess, user: str | None, password: str | None = None, mechs: str = "PLAIN") -> BlockingConnection:
    kw = {"allowed_mechs": mechs, "allow_insecure_mechs": True}
    if user is not None:
        kw.update(user=user, password=PASSWORDS[user] if password is None else password)
    return BlockingConnection(f"amqp://127.0.0.1:{b.port}", timeout=20, **kw)


def test_plain_login_sends_and_receives(secure):
    producer = connect(secure, "producer")
    consumer = connect(secure, "consumer")
    try:
        producer.create_sender("queue://orders.new").send(Message(body="o1", durable=True))
        r = consumer.create_receiver("queue://orders.new")
        assert r.receive(timeout=10).body == "o1"
        r.accept()
    finally:
        producer.close()
        consumer.close()


def test_a_wrong_password_is_refused(secure):
    with pytest.raises(ConnectionException):
        connect(secure, "producer", "not-the-password")


def test_no_anonymous_client_when_security_does_not_allow_one(secure):
    with pytest.raises(ConnectionException):
        connect(secure, None, mechs="ANONYMOUS")


def test_links_the_user_may_not_use_are_refused_with_unauthorized_access(secure):
    consumer = connect(secure, "consumer")
    try:
        with pytest.raises(LinkDetached, match="amqp:unauthorized-access"):
            consumer.create_sender("queue://orders.new")
        with pytest.raises(LinkDetached, match="amqp:unauthorized-access"):
            consumer.create_receiver("queue://private.x")
        # the connection is still good for what the user may do
        r = consumer.create_receiver("queue://orders.other")
        assert r is not None
    finally:
        consumer.close()


def test_anonymous_allowed_gets_its_role(tmp_path: Path) -> None:
    settings = ('[security]\nallow_anonymous = true\nanonymous_role = "guest"\n'
                '[security_settings."public.#"]\nsend = ["guest"]\nconsume = ["guest"]\n'
                'createAddress = ["guest"]\ncreateDurableQueue = ["guest"]\n')
    b = BrokerProcess(tmp_path / "b", settings=settings, env=OWN_SECURITY).start()
    try:
        c = connect(b, None, mechs="ANONYMOUS")
        try:
            c.create_sender("queue://public.news").send(Message(body="hi"))
            r = c.create_receiver("queue://public.news")
            assert r.receive(timeout=10).body == "hi"
            r.accept()
            with pytest.raises(LinkDetached, match="amqp:unauthorized-access"):
                c.create_sender("queue://private.x")
        finally:
            c.close()
    finally:
        b.stop()
