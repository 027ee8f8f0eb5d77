"""LDAP logins on a real `petrel run` (issue 13) against a real OpenLDAP slapd
(`petrel.testing.ldap`): an LDAP user gets the roles of its groups over STOMP (stomp.py), CORE
(Petrel's client) and the management API (HTTP basic); wrong passwords, unknown users and
injections are refused; with slapd killed or hung, LDAP logins are refused within the timeout
with a message naming the server while users-file logins go on, and they work again once slapd
is back."""

from __future__ import annotations

import asyncio
import base64
import socket
import time
import urllib.error
import urllib.request

import pytest
import stomp

from conftest import Listener, read_until_closed
from petrel.client import ConnectionFailed, SendFailed, connect
from petrel.codec.core import ErrorCode
from petrel.security.users import UserStore
from petrel.testing.ldap import LdapServer, ldap_available
from petrel.testing.process import OWN_SECURITY, BrokerProcess, wait_for

pytestmark = pytest.mark.skipif(ldap_available() is not None, reason=f"no slapd: {ldap_available()}")

LDAP_USERS = {"alice": "alice-pw", "bob": "bob-pw", "dave": "dave-pw"}
GROUPS = {"producers": ["alice"], "consumers": ["bob"], "audit": ["bob"], "ops": ["dave"]}
SETTINGS = '''
[security]
users_file = "users.toml"
login_failure_delay = 50

[security.ldap]
url = "{url}"
user_dn_template = "uid={{user}},ou=people,dc=example,dc=com"
group_search_base = "ou=groups,dc=example,dc=com"
timeout = 2
cache_seconds = 0

[security_settings."orders.#"]
send = ["producers", "local"]
consume = ["consumers"]
view = ["audit", "ops"]
manage = ["ops"]

[[queues]]
name = "orders.us"
'''
INVALID = "login refused: invalid user or password"


@pytest.fixture(scope="module")
def slapd(tmp_path_factory):
    with LdapServer(tmp_path_factory.mktemp("slapd"), users=LDAP_USERS, groups=GROUPS) as server:
        yield server


@pytest.fixture(scope="module")
def broker(slapd, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ldap-broker") / "b"
    workdir.mkdir()
    users = UserStore(workdir / "users.toml")
    users.add("local", "local-pw", ["local"])
    users.save()
    b = BrokerProcess(workdir, http=True, env=OWN_SECURITY, settings=SETTINGS.format(url=slapd.url)).start()
    yield b
    b.kill9()


def stomp_connect(b: BrokerProcess, user: str, password: str) -> str:
    """A raw STOMP CONNECT: "CONNECTED", or the ERROR frame's message (the broker then closes)."""
    with socket.create_connection(("127.0.0.1", b.stomp_port), timeout=10) as sock:
        sock.sendall(f"CONNECT\naccept-version:1.2\nhost:/\nlogin:{user}\npasscode:{password}\n\n\x00".encode())
        data = b""
        while b"\x00" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        frame = data.decode(errors="replace")
        if frame.startswith("CONNECTED"):
            return "CONNECTED"
        assert frame.startswith("ERROR"), frame
        assert read_until_closed(sock).endswith(b"<closed>")
        return next(line[len("message:"):] for line in frame.splitlines() if line.startswith("message:"))


def stomp_outcome(b: BrokerProcess, user: str, frame: str, destination: str) -> str:
    """SEND or SUBSCRIBE with a receipt as ``user``: "ok", or the ERROR's message."""
    conn = stomp.Connection12([("127.0.0.1", b.stomp_port)], heartbeats=(0, 0))
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect(user, LDAP_USERS[user], wait=True)
    try:
        if frame == "SEND":
            conn.send(destination, b"body", headers={"receipt": "r1"})
        else:
            conn.subscribe(destination, id="s1", headers={"receipt": "r1"})
        got = wait_for(lambda: "ok" if not listener.receipts.empty() else
                       (listener.errors.get().headers.get("message") if not listener.errors.empty() else None), 10)
        return got
    finally:
        if conn.is_connected():
            conn.disconnect()


def http(b: BrokerProcess, method: str, path: str, user: str, password: str) -> tuple[int, str]:
    auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    headers = {"Authorization": auth}
    data = None
    if method != "GET":
        headers["Content-Type"] = "application/json"
        data = b"{}"
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def core(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def core_send(b: BrokerProcess, user: str, password: str, destination: str = "queue://orders.us") -> str:
    async with await connect(f"tcp://127.0.0.1:{b.port}", user=user, password=password) as conn:
        session = await conn.session()
        try:
            await session.producer(destination).send(b"x", wait=True)
        except SendFailed as exc:
            assert exc.code == ErrorCode.UNAUTHORIZED, exc
            return str(exc)
        return "ok"


def lacks(user: str, permission: str, address: str = "orders.us") -> str:
    return f"user {user!r} lacks permission {permission!r} on address {address!r}"


def test_ldap_users_get_the_roles_of_their_groups_over_stomp(broker) -> None:
    assert stomp_outcome(broker, "alice", "SEND", "/queue/orders.us") == "ok"
    assert stomp_outcome(broker, "alice", "SUBSCRIBE", "/queue/orders.us") == lacks("alice", "consume")
    assert stomp_outcome(broker, "bob", "SUBSCRIBE", "/queue/orders.us") == "ok"
    assert stomp_outcome(broker, "bob", "SEND", "/queue/orders.us") == lacks("bob", "send")


def test_ldap_users_get_the_roles_of_their_groups_over_core(broker) -> None:
    assert core(core_send(broker, "alice", "alice-pw")) == "ok"
    assert lacks("bob", "send") in core(core_send(broker, "bob", "bob-pw"))


def test_ldap_users_get_the_roles_of_their_groups_over_management(broker) -> None:
    assert http(broker, "GET", "/api/v1/queues/orders.us", "bob", "bob-pw")[0] == 200  # audit: view
    status, body = http(broker, "POST", "/api/v1/queues/orders.us/purge", "bob", "bob-pw")
    assert status == 403 and "'manage'" in body
    assert http(broker, "POST", "/api/v1/queues/orders.us/purge", "dave", "dave-pw")[0] == 200  # ops: manage
    assert http(broker, "GET", "/api/v1/queues/orders.us", "alice", "alice-pw")[0] == 403  # producers only
    assert http(broker, "GET", "/api/v1/queues/orders.us", "bob", "wrong")[0] == 401


@pytest.mark.parametrize("user, password", [
    ("alice", "bob-pw"), ("nobody", "x"), ("*)(uid=*", "alice-pw"), ("*", "alice-pw"),
    ("alice)(|(uid=*", "alice-pw"), ("uid=alice,ou=people,dc=example,dc=com", "alice-pw"), ("ALICE", "alice-pw"),
    ("alice ", "alice-pw"),
])
def test_wrong_passwords_unknown_users_and_injections_are_refused(broker, user, password) -> None:
    assert stomp_connect(broker, user, password) == INVALID
    with pytest.raises(ConnectionFailed, match="invalid user or password"):
        core(connect(f"tcp://127.0.0.1:{broker.port}", user=user, password=password))
    assert http(broker, "GET", "/api/v1/queues/orders.us", user, password)[0] == 401


def test_an_empty_password_is_refused(broker) -> None:
    assert stomp_connect(broker, "alice", "") == INVALID + " (an empty password never logs in through LDAP)"


def test_ldap_down_refuses_ldap_logins_in_time_and_nothing_else(broker, slapd) -> None:
    assert stomp_connect(broker, "alice", "alice-pw") == "CONNECTED"
    reported = broker.log_path.read_text().count("LDAP logins are refused until it answers")
    slapd.kill()
    try:
        t0 = time.monotonic()
        message = stomp_connect(broker, "alice", "alice-pw")
        assert message == f"login refused: the LDAP server at {slapd.url} refused the connection (is it running?)"
        assert time.monotonic() - t0 < 2.0
        with pytest.raises(ConnectionFailed, match="refused the connection"):
            core(connect(f"tcp://127.0.0.1:{broker.port}", user="bob", password="bob-pw"))
        # the users file, the management API's /health and the broker go on
        assert stomp_connect(broker, "local", "local-pw") == "CONNECTED"
        assert core(core_send(broker, "local", "local-pw")) == "ok"
        assert broker.health() != {}
    finally:
        slapd.start()
    assert stomp_connect(broker, "alice", "alice-pw") == "CONNECTED"
    assert broker.proc.poll() is None
    wait_for(lambda: "answers again" in broker.log(), 10)
    # logged once for the episode, however many logins it refused
    assert broker.log_path.read_text().count("LDAP logins are refused until it answers") == reported + 1


def test_a_hung_ldap_server_is_refused_within_the_timeout(broker, slapd) -> None:
    slapd.pause()
    try:
        t0 = time.monotonic()
        message = stomp_connect(broker, "alice", "alice-pw")
        took = time.monotonic() - t0
        assert message == f"login refused: the LDAP server at {slapd.url} did not answer within 2 s"
        assert 1.5 < took < 5.0
        t0 = time.monotonic()
        assert stomp_connect(broker, "local", "local-pw") == "CONNECTED"
        assert time.monotonic() - t0 < 1.5
    finally:
        slapd.resume()
    assert stomp_connect(broker, "alice", "alice-pw") == "CONNECTED"
