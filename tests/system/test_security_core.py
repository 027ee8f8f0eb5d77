"""Security over CORE with real `petrel run` processes and Petrel's client: logins, every
permission a CORE request needs, wildcard precedence, anonymous access, a password changed while
connected, and the cluster's own frames, which only the cluster user may send."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from petrel.client import ConnectionFailed, RequestFailed, SendFailed, connect
from petrel.codec.core import NEED_DATA, Connect, CoreConnection, Disconnect, ErrorCode, Role, encode_frame
from petrel.codec.core.cluster import MigrationBegin
from petrel.security.users import UserStore
from petrel.testing.process import OWN_SECURITY, BrokerProcess

pytestmark = pytest.mark.system

CLUSTER_PASSWORD = "cluster-s3cret"
ROLES = {"admin": ["admin"], "producer": ["producer"], "consumer": ["consumer"], "browser": ["browser"],
         "maker": ["maker"], "breaker": ["breaker"], "eu": ["eu"], "alice": ["producer"]}
SETTINGS = f'''
cluster_user = "petrel-cluster"
cluster_password = "{CLUSTER_PASSWORD}"

[security]
users_file = "users.toml"
login_failure_delay = 300

[security_settings."orders.#"]
send = ["producer"]
consume = ["consumer"]
browse = ["browser"]

[security_settings."orders.eu.*"]
send = ["eu"]

[security_settings."made.#"]
send = ["maker"]
createAddress = ["maker"]
createDurableQueue = ["maker"]
createNonDurableQueue = ["maker"]
deleteAddress = ["breaker"]
deleteDurableQueue = ["breaker"]
deleteNonDurableQueue = ["breaker"]

[[queues]]
name = "orders.us"

[[queues]]
name = "orders.eu.paris"
'''


def password(user: str) -> str:
    return f"{user}-pw"


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("secure-core") / "b"
    workdir.mkdir()
    users = UserStore(workdir / "users.toml")
    for user, roles in ROLES.items():
        users.add(user, password(user), roles)
    users.save()
    b = BrokerProcess(workdir, settings=SETTINGS, env=OWN_SECURITY).start()
    yield b
    b.kill9()


def run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def url(b: BrokerProcess) -> str:
    return f"tcp://127.0.0.1:{b.port}"


def refusal(user: str | None, permission: str, address: str) -> str:
    who = f"user {user!r}" if user else "an anonymous user"
    return f"{who} lacks permission {permission!r} on address {address!r}"


async def as_user(b: BrokerProcess, user: str, action) -> str:
    """``action(conn)`` as ``user``: "ok", or the broker's refusal (code UNAUTHORIZED)."""
    async with await connect(url(b), user=user, password=password(user)) as conn:
        try:
            await action(conn)
        except (RequestFailed, SendFailed) as exc:
            assert exc.code == ErrorCode.UNAUTHORIZED, exc
            return str(exc)
        return "ok"


async def send(conn, destination: str) -> None:
    session = await conn.session()
    await session.producer(destination).send(b"x", wait=True)


async def consume(conn, destination: str, **options) -> None:
    session = await conn.session()
    await session.consumer(destination, **options)


async def browse(conn, queue: str) -> None:
    await conn.browse(queue)


# (user, action, expected: "ok" or (permission, address))
CASES = [
    ("producer", lambda c: send(c, "queue://orders.us"), "ok"),
    ("consumer", lambda c: send(c, "queue://orders.us"), ("send", "orders.us")),
    ("consumer", lambda c: consume(c, "queue://orders.us"), "ok"),
    ("consumer", lambda c: consume(c, "orders.us"), "ok"),  # the queue by name
    ("producer", lambda c: consume(c, "queue://orders.us"), ("consume", "orders.us")),
    ("browser", lambda c: browse(c, "orders.us"), "ok"),
    ("consumer", lambda c: browse(c, "orders.us"), ("browse", "orders.us")),
    ("browser", lambda c: c.queue_seqs("orders.us"), "ok"),
    ("producer", lambda c: c.queue_seqs("orders.us"), ("browse", "orders.us")),
    ("consumer", lambda c: c.create_cursor("orders.us", "spark"), "ok"),
    ("browser", lambda c: c.create_cursor("orders.us", "spark2"), ("consume", "orders.us")),
    # orders.eu.* wins over orders.#, and inherits nothing from it
    ("eu", lambda c: send(c, "queue://orders.eu.paris"), "ok"),
    ("producer", lambda c: send(c, "queue://orders.eu.paris"), ("send", "orders.eu.paris")),
    ("consumer", lambda c: consume(c, "queue://orders.eu.paris"), ("consume", "orders.eu.paris")),
    ("admin", lambda c: send(c, "queue://orders.us"), ("send", "orders.us")),
    ("admin", lambda c: send(c, "queue://elsewhere"), "ok"),  # the default "#" for role admin
    # auto-create on send and on a consumer
    ("maker", lambda c: send(c, "queue://made.q1"), "ok"),
    ("producer", lambda c: send(c, "queue://made.q2"), ("send", "made.q2")),
    ("breaker", lambda c: send(c, "topic://made.t1"), ("send", "made.t1")),
    ("maker", lambda c: consume(c, "topic://made.t2"), ("consume", "made.t2")),
    # explicit address and queue requests
    ("maker", lambda c: c.create_address("made.a1"), "ok"),
    ("breaker", lambda c: c.create_address("made.a2"), ("createAddress", "made.a2")),
    ("maker", lambda c: c.create_queue("made.d1", durable=True), "ok"),
    ("breaker", lambda c: c.create_queue("made.d2", durable=True), ("createAddress", "made.d2")),
    ("maker", lambda c: c.create_queue("made.n1", durable=False), "ok"),
]


@pytest.mark.parametrize("user, action, expected", CASES)
def test_permissions(secure, user, action, expected) -> None:
    got = run(as_user(secure, user, action))
    if expected == "ok":
        assert got == "ok"
    else:  # a refused send says "the broker refused a message: " first
        assert got.endswith(refusal(user, *expected)), got


def test_create_and_delete_permissions(secure) -> None:
    async def go() -> None:
        async with await connect(url(secure), user="maker", password=password("maker")) as maker:
            await maker.create_address("made.addr", ("ANYCAST", "MULTICAST"))
            await maker.create_queue("made.durable", "made.addr", durable=True)
            await maker.create_queue("made.volatile", "made.addr", "MULTICAST", durable=False)
            for name, permission in [("made.durable", "deleteDurableQueue"), ("made.volatile", "deleteNonDurableQueue")]:
                with pytest.raises(RequestFailed) as info:
                    await maker.delete_queue(name)
                assert str(info.value) == refusal("maker", permission, "made.addr")
            with pytest.raises(RequestFailed) as info:
                await maker.delete_address("made.addr")
            assert str(info.value) == refusal("maker", "deleteAddress", "made.addr")
            # a queue on an existing address needs no createAddress
            async with await connect(url(secure), user="breaker", password=password("breaker")) as breaker:
                with pytest.raises(RequestFailed) as info:
                    await breaker.create_queue("made.other", "made.addr", durable=False)
                assert str(info.value) == refusal("breaker", "createNonDurableQueue", "made.addr")
                await breaker.delete_queue("made.durable")
                await breaker.delete_queue("made.volatile")
                await breaker.delete_address("made.addr")
                assert await breaker.address_info("made.addr") is None
            # durable subscriptions: created by a consumer with a subscription name
            async with await connect(url(secure), user="maker", password=password("maker"), client_id="m") as m:
                session = await m.session()
                with pytest.raises(RequestFailed, match="lacks permission 'consume'"):
                    await session.consumer("topic://made.news", subscription="s")

    run(go())


def test_a_refused_send_leaves_the_connection_usable(secure) -> None:
    async def go() -> None:
        async with await connect(url(secure), user="producer", password=password("producer")) as conn:
            session = await conn.session()
            with pytest.raises(SendFailed) as info:
                await session.producer("queue://orders.eu.paris").send(b"no", wait=True)
            assert info.value.code == ErrorCode.UNAUTHORIZED
            assert refusal("producer", "send", "orders.eu.paris") in str(info.value)
            await session.producer("queue://orders.us").send(b"yes", wait=True)
        assert "action=send address=orders.eu.paris result=refused" in secure.log_path.read_text()

    run(go())


def test_failed_logins_are_refused_slowly_and_the_broker_stays_up(secure) -> None:
    async def go() -> None:
        for user, pw in [("producer", "wrong"), ("nobody", "x"), (None, None)]:
            t0 = time.monotonic()
            with pytest.raises(ConnectionFailed) as info:
                await connect(url(secure), user=user, password=pw)
            assert time.monotonic() - t0 >= 0.3
            expected = "anonymous access is not allowed" if user is None else "invalid user or password"
            assert f"login refused: {expected}" in str(info.value)
            assert info.value.code == ErrorCode.UNAUTHORIZED and "give the right user and password" in str(info.value)
        # a refused login is final: a client told to reconnect forever stops at once, it does not retry
        t0 = time.monotonic()
        with pytest.raises(ConnectionFailed, match="invalid user or password"):
            await asyncio.wait_for(connect(f"failover:({url(secure)})?maxReconnectAttempts=-1&startupMaxReconnectAttempts=-1",
                                           user="producer", password="wrong"), 20)
        assert time.monotonic() - t0 < 10
        # twenty failing at once do not hold up a good login
        failing = [asyncio.create_task(connect(url(secure), user="eu", password="bad")) for _ in range(20)]
        t0 = time.monotonic()
        async with await connect(url(secure), user="eu", password=password("eu")):
            assert time.monotonic() - t0 < 2.0
        for result in await asyncio.gather(*failing, return_exceptions=True):
            assert isinstance(result, ConnectionFailed)
        assert await as_user(secure, "producer", lambda c: send(c, "queue://orders.us")) == "ok"

    run(go())


def raw_frames(b: BrokerProcess, connect_frame: Connect, *events) -> list:
    """``connect_frame`` then ``events`` in one write, without waiting; the broker's answers."""
    client = CoreConnection(Role.CLIENT)
    data = client.send(connect_frame) + b"".join(encode_frame(e) for e in events)
    with socket.create_connection(("127.0.0.1", b.port), timeout=10) as s:
        s.sendall(data)
        s.settimeout(10)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    client.receive_data(got)
    out = []
    while (event := client.next_event()) is not NEED_DATA:
        out.append(event)
        if type(event).__name__ == "Error":
            break
    return out


def test_cluster_frames_need_the_cluster_user(secure) -> None:
    events = raw_frames(secure, Connect([1], user="admin", password=password("admin"), ttl=-1),
                        MigrationBegin(1, "node-x", "admin", password("admin")))
    names = [type(e).__name__ for e in events]
    assert names[0] == "Connected" and names[-1] == "Error"
    assert events[-1].code == ErrorCode.UNAUTHORIZED and "cluster user and password" in events[-1].message
    # the cluster user with the cluster password is the cluster's own subject
    events = raw_frames(secure, Connect([1], user="petrel-cluster", password=CLUSTER_PASSWORD, ttl=-1),
                        MigrationBegin(1, "node-x", "petrel-cluster", CLUSTER_PASSWORD), Disconnect(0, "done"))
    assert type(events[0]).__name__ == "Connected"
    assert [e for e in events if type(e).__name__ == "Result"][0].code == 0  # MIGRATION_BEGIN accepted
    assert all(type(e).__name__ != "Error" for e in events)


def test_anonymous_allowed_gets_its_role(tmp_path: Path) -> None:
    settings = ('[security]\nallow_anonymous = true\nanonymous_role = "guest"\n'
                '[security_settings."public.#"]\nsend = ["guest"]\nconsume = ["guest"]\n'
                'createAddress = ["guest"]\ncreateDurableQueue = ["guest"]\n')
    b = BrokerProcess(tmp_path / "b", settings=settings, env=OWN_SECURITY).start()

    async def go() -> None:
        async with await connect(url(b)) as conn:
            session = await conn.session()
            consumer = await session.consumer("queue://public.news")
            await session.producer("queue://public.news").send(b"hello", wait=True)
            assert (await consumer.receive(5)).body == b"hello"
            with pytest.raises(SendFailed) as info:
                await session.producer("queue://private").send(b"no", wait=True)
            assert refusal(None, "send", "private") in str(info.value)

    try:
        run(go())
    finally:
        b.stop()


def test_a_password_changed_while_connected(secure) -> None:
    """Decided, as Artemis: a connection keeps the subject it logged in with; a new password and
    new roles apply from the next login."""
    users_file = secure.workdir / "users.toml"

    async def go() -> None:
        async with await connect(url(secure), user="alice", password=password("alice")) as conn:
            session = await conn.session()
            await session.producer("queue://orders.us").send(b"before", wait=True)
            users = UserStore.load(users_file)
            users.reset("alice", password="alice-new", roles=["consumer"])
            users.save()
            with pytest.raises(ConnectionFailed, match="invalid user or password"):
                await connect(url(secure), user="alice", password=password("alice"))
            async with await connect(url(secure), user="alice", password="alice-new") as fresh:
                fresh_session = await fresh.session()
                with pytest.raises(SendFailed, match="lacks permission 'send'"):
                    await fresh_session.producer("queue://orders.us").send(b"x", wait=True)
            await session.producer("queue://orders.us").send(b"after", wait=True)  # still its old subject

    try:
        run(go())
    finally:
        users = UserStore.load(users_file)
        users.reset("alice", password=password("alice"), roles=["producer"])
        users.save()


def test_a_drainer_moves_messages_with_the_cluster_credentials_only(secure, tmp_path: Path) -> None:
    source = BrokerProcess(tmp_path / "src", name="src").start()  # the test run's: no security

    async def fill() -> None:
        async with await connect(url(source)) as conn:
            producer = (await conn.session()).producer("queue://moved.q")
            for i in range(50):
                await producer.send(b"%d" % i, durable=True)
            await producer.flush()

    run(fill())
    source.stop()

    def drain(password: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "petrel", "drain", "--data-dir", str(source.data_dir),
                               "--target", url(secure), "--user", "petrel-cluster", "--password", password,
                               "--progress", "none"], capture_output=True, text=True, timeout=120)

    refused = drain("not-the-password")
    assert refused.returncode != 0 and "invalid user or password" in refused.stderr, refused.stderr
    done = drain(CLUSTER_PASSWORD)
    assert done.returncode == 0, done.stderr

    async def count() -> int:
        async with await connect(url(secure), user="admin", password=password("admin")) as conn:
            consumer = await (await conn.session()).consumer("queue://moved.q")
            got = 0
            while await consumer.receive(2) is not None:
                got += 1
            return got

    assert run(count()) == 50
