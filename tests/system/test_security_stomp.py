"""Security over STOMP with real `petrel run` processes and stomp.py: logins, every permission a
STOMP frame needs (auto-create included), wildcard precedence, anonymous access, a password changed
while connected, failed logins."""

from __future__ import annotations

import itertools
import queue
import socket
import time
from pathlib import Path

import pytest
import stomp
from stomp.exception import ConnectFailedException

from cli_process import ok
from conftest import Listener, read_until_closed
from petrel.security.users import UserStore
from petrel.testing.process import OWN_SECURITY, BrokerProcess, wait_for

PASSWORDS = {"admin": "admin-pw", "producer": "producer-pw", "consumer": "consumer-pw", "eu": "eu-pw",
             "creator": "creator-pw", "alice": "alice-pw"}
SETTINGS = '''
[security]
users_file = "users.toml"
login_failure_delay = 300

[security_settings."orders.#"]
send = ["producer"]
consume = ["consumer"]

[security_settings."orders.eu.*"]
send = ["eu"]
consume = ["eu"]

[security_settings."auto.#"]
send = ["creator", "producer"]
consume = ["creator", "producer"]
createAddress = ["creator"]
createDurableQueue = ["creator"]
createNonDurableQueue = ["creator"]
deleteDurableQueue = ["creator"]

[[queues]]
name = "orders.us"

[[queues]]
name = "orders.eu.paris"
'''
_ids = itertools.count()


def write_users(path: Path) -> None:
    users = UserStore(path)
    for name, password in PASSWORDS.items():
        users.add(name, password, [name if name != "alice" else "producer"])
    users.save()


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("secure") / "b"
    workdir.mkdir()
    write_users(workdir / "users.toml")
    b = BrokerProcess(workdir, settings=SETTINGS, env=OWN_SECURITY).start()
    yield b
    b.kill9()


def login(b: BrokerProcess, user: str | None, password: str | None = None, client_id: str | None = None):
    conn = stomp.Connection12([("127.0.0.1", b.stomp_port)], heartbeats=(0, 0))
    listener = Listener()
    conn.set_listener("l", listener)
    if user is not None and password is None:
        password = PASSWORDS[user]
    conn.connect(user, password, wait=True, headers={"client-id": client_id} if client_id else {})
    return conn, listener


def outcome(conn: stomp.Connection12, listener: Listener, frame: str, destination: str, **headers: str) -> str:
    """Send one frame with a receipt: "ok" when the receipt comes, else the ERROR's message."""
    receipt = f"r{next(_ids)}"
    headers = {"receipt": receipt, **headers}
    if frame == "SEND":
        conn.send(destination, b"body", headers=headers)
    elif frame == "SUBSCRIBE":
        conn.subscribe(destination, id=f"s{next(_ids)}", headers=headers)
    elif frame == "UNSUBSCRIBE":
        conn.unsubscribe(id=headers.pop("id", "none"), headers=headers)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            got = listener.receipts.get(timeout=0.05)
            if got == receipt:
                return "ok"
        except queue.Empty:
            pass
        try:
            return listener.errors.get_nowait().headers.get("message", "")
        except queue.Empty:
            pass
    raise AssertionError(f"no receipt and no ERROR for {frame} {destination}")


def attempt(b: BrokerProcess, user: str, frame: str, destination: str, **headers: str) -> str:
    conn, listener = login(b, user, client_id=headers.pop("client_id", None))
    try:
        result = outcome(conn, listener, frame, destination, **headers)
        if result != "ok":  # an ERROR closes the connection
            wait_for(lambda: listener.disconnected, 10)
        return result
    finally:
        if conn.is_connected():
            conn.disconnect()


def refusal(user: str, permission: str, address: str) -> str:
    return f"user {user!r} lacks permission {permission!r} on address {address!r}"


# (user, frame, destination, extra headers, expected: "ok" or the permission refused)
CASES = [
    # send and consume, decided by orders.# for orders.us
    ("producer", "SEND", "/queue/orders.us", {}, "ok"),
    ("consumer", "SEND", "/queue/orders.us", {}, "send"),
    ("consumer", "SUBSCRIBE", "/queue/orders.us", {}, "ok"),
    ("producer", "SUBSCRIBE", "/queue/orders.us", {}, "consume"),
    # orders.eu.* is more specific than orders.#, which is more specific than the default "#"
    ("eu", "SEND", "/queue/orders.eu.paris", {}, "ok"),
    ("eu", "SUBSCRIBE", "/queue/orders.eu.paris", {}, "ok"),
    ("producer", "SEND", "/queue/orders.eu.paris", {}, "send"),
    ("consumer", "SUBSCRIBE", "/queue/orders.eu.paris", {}, "consume"),
    ("eu", "SEND", "/queue/orders.us", {}, "send"),
    ("admin", "SEND", "/queue/orders.us", {}, "send"),  # a matching pattern inherits nothing from "#"
    ("admin", "SEND", "/queue/misc.admin", {}, "ok"),  # the default "#": everything for role admin
    ("producer", "SEND", "/queue/misc.producer", {}, "send"),
    # auto-create: createAddress, then createDurableQueue for the anycast queue
    ("creator", "SEND", "/queue/auto.q1", {}, "ok"),
    ("producer", "SEND", "/queue/auto.q2", {}, "createAddress"),
    ("creator", "SUBSCRIBE", "/queue/auto.q3", {}, "ok"),
    ("producer", "SUBSCRIBE", "/queue/auto.q4", {}, "createAddress"),
]


@pytest.mark.parametrize("user, frame, destination, headers, expected", CASES)
def test_permissions_on_send_and_subscribe(secure, user, frame, destination, headers, expected) -> None:
    got = attempt(secure, user, frame, destination, **headers)
    address = destination.split("/")[-1]
    assert got == ("ok" if expected == "ok" else refusal(user, expected, address))


def test_queues_of_topics_need_their_create_and_delete_permissions(secure) -> None:
    holder, holder_listener = login(secure, "creator")  # its subscription keeps the address
    assert outcome(holder, holder_listener, "SUBSCRIBE", "/topic/auto.t1") == "ok"
    # a subscription is a non-durable queue; producer may consume but not create one
    assert attempt(secure, "producer", "SUBSCRIBE", "/topic/auto.t1") == refusal(
        "producer", "createNonDurableQueue", "auto.t1")
    assert attempt(secure, "creator", "SUBSCRIBE", "/topic/auto.t1") == "ok"
    durable = {"durable-subscription-name": "sub"}
    assert attempt(secure, "producer", "SUBSCRIBE", "/topic/auto.t1", client_id="p1", **durable) == refusal(
        "producer", "createDurableQueue", "auto.t1")
    assert attempt(secure, "creator", "SUBSCRIBE", "/topic/auto.t1", client_id="c1", **durable) == "ok"
    # the durable subscription exists now: subscribing again creates nothing, so consume is enough
    assert attempt(secure, "producer", "SUBSCRIBE", "/topic/auto.t1", client_id="c1", **durable) == "ok"
    # unsubscribing it deletes the durable queue
    assert attempt(secure, "producer", "UNSUBSCRIBE", "/topic/auto.t1", client_id="c1", **durable) == refusal(
        "producer", "deleteDurableQueue", "auto.t1")
    assert attempt(secure, "creator", "UNSUBSCRIBE", "/topic/auto.t1", client_id="c1", **durable) == "ok"
    holder.disconnect()


def test_messages_flow_between_allowed_users_and_refusals_are_audited(secure) -> None:
    producer, _ = login(secure, "producer")
    consumer, listener = login(secure, "consumer")
    try:
        consumer.subscribe("/queue/orders.us", id="1", ack="auto")
        for i in range(20):
            producer.send("/queue/orders.us", f"m{i}".encode())
        bodies: list[str] = []
        while len(bodies) < 20:
            body = listener.get().body
            if body != "body":  # left by the tests before
                bodies.append(body)
        assert sorted(bodies) == sorted(f"m{i}" for i in range(20))
    finally:
        producer.disconnect()
        consumer.disconnect()
    assert attempt(secure, "consumer", "SEND", "/queue/orders.us") != "ok"
    wait_for(lambda: "action=send address=orders.us result=refused" in secure.log_path.read_text(), 10)
    # (the module's broker is shared: other tests may have audited sends to orders.us by other users)
    refusals = [x for x in secure.log_path.read_text().splitlines() if "action=send address=orders.us result=refused" in x]
    assert any("petrel.audit" in x and "user=consumer remote=127.0.0.1:" in x for x in refusals), refusals


def test_a_failed_login_is_refused_slowly_and_the_broker_stays_up(secure) -> None:
    for user, password in [("producer", "wrong"), ("nobody", "x")]:
        t0 = time.monotonic()
        with pytest.raises(ConnectFailedException):
            login(secure, user, password)
        assert time.monotonic() - t0 >= 0.3  # login_failure_delay
    # raw: an ERROR frame with a clear message, then the connection closes
    s = socket.create_connection(("127.0.0.1", secure.stomp_port), timeout=10)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:producer\npasscode:bad\n\n\x00")
    data = read_until_closed(s)
    assert data.startswith(b"ERROR\n") and b"login refused: invalid user or password" in data
    assert data.endswith(b"<closed>")
    assert "login refused for 'producer' from 127.0.0.1:" in secure.log_path.read_text()
    assert "bad" not in "\n".join(x for x in secure.log_path.read_text().splitlines() if "login refused" in x)
    # many failures at once are all refused, none blocks the others nor the broker
    socks = [socket.create_connection(("127.0.0.1", secure.stomp_port), timeout=10) for _ in range(20)]
    t0 = time.monotonic()
    for s in socks:
        s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:eu\npasscode:bad\n\n\x00")
    conn, _ = login(secure, "eu")  # a good login meanwhile is not held up by the failing ones
    assert time.monotonic() - t0 < 2.0
    conn.disconnect()
    for s in socks:
        assert b"login refused" in read_until_closed(s)
        s.close()
    assert attempt(secure, "producer", "SEND", "/queue/orders.us") == "ok"


def test_frames_pipelined_behind_a_connect_wait_for_its_login(secure) -> None:
    consumer, listener = login(secure, "consumer")
    consumer.subscribe("/queue/orders.us", id="1", ack="auto")
    try:
        listener.drain(idle=0.5)
        for password, body in [("bad", b"sneaky"), (PASSWORDS["producer"], b"welcome")]:
            s = socket.create_connection(("127.0.0.1", secure.stomp_port), timeout=10)
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:producer\npasscode:" + password.encode()
                      + b"\n\n\x00SEND\ndestination:/queue/orders.us\n\n" + body + b"\x00DISCONNECT\nreceipt:bye\n\n\x00")
            data = read_until_closed(s)
            s.close()
            if body == b"sneaky":
                assert data.startswith(b"ERROR\n") and b"RECEIPT" not in data
            else:
                assert data.startswith(b"CONNECTED\n") and b"receipt-id:bye" in data
        assert [m.body for m in listener.drain(idle=1.0)] == ["welcome"]
    finally:
        consumer.disconnect()
    s = socket.create_connection(("127.0.0.1", secure.stomp_port), timeout=10)
    s.sendall(b"SEND\ndestination:/queue/orders.us\n\nsneaky\x00")  # no CONNECT at all
    assert read_until_closed(s) == b"<closed>"


def test_anonymous_is_refused_by_default(secure) -> None:
    with pytest.raises(ConnectFailedException):
        login(secure, None)
    s = socket.create_connection(("127.0.0.1", secure.stomp_port), timeout=10)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
    assert b"anonymous access is not allowed" in read_until_closed(s)


def test_anonymous_allowed_gets_its_role(tmp_path: Path) -> None:
    settings = ('[security]\nallow_anonymous = true\nanonymous_role = "guest"\n'
                '[security_settings."public.#"]\nsend = ["guest"]\nconsume = ["guest"]\n'
                'createAddress = ["guest"]\ncreateDurableQueue = ["guest"]\n')
    b = BrokerProcess(tmp_path / "b", settings=settings, env=OWN_SECURITY).start()
    try:
        conn, listener = login(b, None)
        assert outcome(conn, listener, "SUBSCRIBE", "/queue/public.news") == "ok"
        assert outcome(conn, listener, "SEND", "/queue/public.news") == "ok"
        assert listener.get().body == "body"
        assert outcome(conn, listener, "SEND", "/queue/private.x") == refusal_anonymous("send", "private.x")
        # the generated admin still logs in, and has "#" outside public.#
        password = next(x for x in b.log_path.read_text().splitlines() if "created the users file" in x)
        password = password.split('password "')[1].split('"')[0]
        assert attempt_with(b, "admin", password, "SEND", "/queue/private.x") == "ok"
    finally:
        b.stop()


def refusal_anonymous(permission: str, address: str) -> str:
    return f"an anonymous user lacks permission {permission!r} on address {address!r}"


def attempt_with(b: BrokerProcess, user: str, password: str, frame: str, destination: str) -> str:
    conn, listener = login(b, user, password)
    try:
        return outcome(conn, listener, frame, destination)
    finally:
        if conn.is_connected():
            conn.disconnect()


def test_a_password_changed_while_connected(secure) -> None:
    """`petrel user reset` while alice is connected. Decided: a connection keeps the subject it
    logged in with (as Artemis does); the new password and roles apply from the next login."""
    users_file = secure.workdir / "users.toml"
    conn, listener = login(secure, "alice")
    try:
        assert outcome(conn, listener, "SEND", "/queue/orders.us") == "ok"
        ok("user", "reset", "alice", "--password", "alice-new", "--role", "consumer", "--user-file", str(users_file))
        with pytest.raises(ConnectFailedException):
            login(secure, "alice", "alice-pw")
        fresh, fresh_listener = login(secure, "alice", "alice-new")
        try:  # the new login has the new roles
            assert outcome(fresh, fresh_listener, "SEND", "/queue/orders.us") == refusal("alice", "send", "orders.us")
        finally:
            fresh.disconnect() if fresh.is_connected() else None
        # the old connection still has its subject: it may still send
        assert outcome(conn, listener, "SEND", "/queue/orders.us") == "ok"
    finally:
        conn.disconnect()
        users = UserStore.load(users_file)
        users.reset("alice", password="alice-pw", roles=["producer"])
        users.save()
