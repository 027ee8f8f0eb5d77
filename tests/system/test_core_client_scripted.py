"""Client behaviour a real broker does not show on demand, driven by a scripted CORE server
(built on the codec, in the test's event loop): redirects, topology-driven failover, a
silent broker, a full confirmation window, requests and commits cut by a failure, settlements
of a lost connection's deliveries (never sent on the next one). Plus the
broker adapter's own DISCONNECT, from an in-process broker."""

from __future__ import annotations

import asyncio
import socket
import tempfile
import time

import pytest

from petrel.client import (
    ClientError,
    Connection,
    ConnectionFailed,
    FailoverInterrupted,
    Message,
    TransactionRolledBack,
    connect,
)
from petrel.codec.core import (
    NEED_DATA,
    Ack,
    CloseConsumer,
    CloseSession,
    Commit,
    Connect,
    Connected,
    CoreConnection,
    CreateConsumer,
    CreateSession,
    Credit,
    Deliver,
    Disconnect,
    Error,
    ErrorCode,
    Member,
    Nack,
    Ping,
    Pong,
    Result,
    Role,
    Rollback,
    Send,
    SendConfirm,
    Topology,
)
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system


def run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.01)


class Scripted:
    """A CORE server that answers the handshake and session/consumer requests, records every
    other event, and does only what the test tells it to."""

    def __init__(self, *, node_id: str = "scripted", ttl: int = 60000, members: list[Member] | None = None,
                 refuse: Error | None = None, answer_pings: bool = True) -> None:
        self.node_id = node_id
        self.ttl = ttl
        self.members = members
        self.refuse = refuse
        self.answer_pings = answer_pings
        self.events: list = []
        self.peers: list[tuple[CoreConnection, asyncio.StreamWriter]] = []
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self, port: int = 0) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        codec = CoreConnection(Role.SERVER)
        self.peers.append((codec, writer))
        try:
            while data := await reader.read(65536):
                codec.receive_data(data)
                while (event := codec.next_event()) is not NEED_DATA:
                    self._on(codec, writer, event)
        except (ConnectionError, ClientError):
            pass
        finally:
            writer.close()

    def _on(self, codec: CoreConnection, writer: asyncio.StreamWriter, event) -> None:
        if isinstance(event, Connect):
            if self.refuse is not None:
                writer.write(codec.send(self.refuse))
                writer.close()
                return
            version = codec.accept(event)
            writer.write(codec.send(Connected(version, sorted(codec.capabilities), "Scripted", self.node_id,
                                              "", self.ttl)))
            if self.members is not None:
                writer.write(codec.send(Topology(1, self.members)))
        elif isinstance(event, (CreateSession, CreateConsumer, CloseSession)):
            writer.write(codec.send(Result(event.corr, 0, "", {"queue": "q"})))
        elif isinstance(event, CloseConsumer):
            self.events.append(event)
            writer.write(codec.send(Result(event.corr, 0, "", None)))
        elif isinstance(event, Rollback):
            self.events.append(event)
            writer.write(codec.send(Result(event.corr, 0, "", None)))
        elif isinstance(event, Ack) and event.corr:
            self.events.append(event)
            writer.write(codec.send(Result(event.corr, 0, "", len(event.seqs))))
        elif isinstance(event, Ping):
            self.events.append(event)
            if self.answer_pings:
                writer.write(codec.send(Pong(event.nonce)))
        else:
            self.events.append(event)

    def send_all(self, event) -> None:
        for codec, writer in self.peers:
            if not writer.is_closing():
                writer.write(codec.send(event))

    def drop_all(self) -> None:
        for _, writer in self.peers:
            writer.transport.abort()

    async def stop(self) -> None:
        self.drop_all()
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("scripted-real")).start()
    yield b
    b.stop()


def real_url(b: BrokerProcess) -> str:
    return f"tcp://127.0.0.1:{b.port}"


# -- redirect and topology ----------------------------------------------------------------------


@pytest.mark.parametrize("failover", [False, True])
def test_disconnect_with_redirect_moves_the_client(real, failover):
    async def go():
        fake = await Scripted().start()
        target = fake.url if not failover else f"failover:({fake.url})?randomize=false&initialReconnectDelay=10"
        async with await connect(target) as conn:
            session = await conn.session()
            assert conn.node_id == "scripted"
            fake.send_all(Disconnect(2, "moving you", f"127.0.0.1:{real.port}"))
            await wait_until(lambda: conn.connected and conn.endpoint.port == real.port)
            assert conn.failovers == 1 and conn.node_id != "scripted"
            await session.producer("queue://redirected").send(b"hi", wait=True)
            consumer = await session.consumer("queue://redirected")
            assert (await consumer.receive(5)).body == b"hi"
        await fake.stop()

    run(go())


def test_topology_members_become_failover_targets(real):
    async def go():
        fake = await Scripted(members=[Member("scripted", "127.0.0.1:1", None),
                                       Member("real", f"127.0.0.1:{real.port}", None)]).start()
        url = f"failover:({fake.url})?randomize=false&initialReconnectDelay=10&maxReconnectDelay=50"
        async with await connect(url) as conn:
            assert [m.node_id for m in conn.topology] == ["scripted", "real"]
            session = await conn.session()
            await fake.stop()  # the only broker in the URL is gone
            await wait_until(lambda: conn.connected and conn.endpoint.port == real.port)
            await session.producer("queue://via.topology").send(b"x", wait=True)

    run(go())


def test_topology_updates_can_be_turned_off(real):
    async def go():
        fake = await Scripted(members=[Member("real", f"127.0.0.1:{real.port}", None)]).start()
        url = f"failover:({fake.url})?updateURIsSupported=false&maxReconnectAttempts=2&initialReconnectDelay=10"
        conn = await connect(url)
        failed = []
        conn.on_interrupted.append(lambda: failed.append(1))
        await fake.stop()
        await wait_until(lambda: conn._failure is not None)
        with pytest.raises(ConnectionFailed):
            await conn.session()
        await conn.close()

    run(go())


# -- pings and TTL -------------------------------------------------------------------------------


def test_client_detects_a_silent_broker():
    async def go():
        fake = await Scripted(ttl=600, answer_pings=False).start()
        conn = await connect(fake.url)
        try:
            t0 = time.monotonic()
            await wait_until(lambda: not conn.connected, timeout=10)
            assert 0.55 < time.monotonic() - t0 < 8
            pings = [e for e in fake.events if isinstance(e, Ping)]
            assert pings  # the client pinged while it waited
            with pytest.raises(ConnectionFailed):
                await conn.session()
        finally:
            await conn.close()
            await fake.stop()

    run(go())


def test_client_answers_broker_pings():
    async def go():
        fake = await Scripted().start()
        async with await connect(fake.url):
            fake.send_all(Ping(77))
            await wait_until(lambda: any(isinstance(e, Pong) and e.nonce == 77 for e in fake.events))
        await fake.stop()

    run(go())


# -- windows, interrupted requests ------------------------------------------------------------------


def test_a_full_confirmation_window_blocks_the_producer():
    async def go():
        fake = await Scripted().start()
        async with await connect(fake.url, confirmation_window=4096) as conn:
            session = await conn.session()
            producer = session.producer("queue://blocked")
            sent = 0
            with pytest.raises(asyncio.TimeoutError):
                while True:
                    await asyncio.wait_for(producer.send(b"x" * 1000), 0.3)
                    sent += 1
            assert sent == 5  # 4096 bytes of room: the fifth send filled it
            await wait_until(lambda: len([e for e in fake.events if isinstance(e, Send)]) == sent)
            fake.send_all(SendConfirm(session.id, sent))
            await asyncio.wait_for(producer.send(b"y" * 1000), 5)
            assert session.unconfirmed == 1
            fake.send_all(SendConfirm(session.id, sent + 1))
            await asyncio.wait_for(session.flush(), 5)
            conn._closing = True  # skip waiting for confirmations the script will never send
        await fake.stop()

    run(go())


def test_requests_in_flight_fail_with_failover_interrupted(real):
    async def go():
        fake = await Scripted().start()
        url = f"failover:({fake.url},{real_url(real)})?randomize=false&initialReconnectDelay=10"
        async with await connect(url) as conn:
            request = asyncio.ensure_future(conn.create_queue("interrupted.q"))
            await wait_until(lambda: fake.events)
            fake.drop_all()
            await fake.stop()
            with pytest.raises(FailoverInterrupted):
                await request
            await wait_until(lambda: conn.connected)
            assert await conn.create_queue("interrupted.q", exists_ok=True)

    run(go())


def test_commit_in_flight_fails_with_a_rollback_error(real):
    async def go():
        fake = await Scripted().start()
        url = f"failover:({fake.url},{real_url(real)})?randomize=false&initialReconnectDelay=10"
        async with await connect(url) as conn:
            session = await conn.session(transacted=True)
            await session.producer("queue://tx.cut").send(b"lost")
            commit = asyncio.ensure_future(session.commit())
            await wait_until(lambda: any(isinstance(e, Commit) for e in fake.events))
            await fake.stop()
            with pytest.raises(TransactionRolledBack, match="during commit"):
                await commit
            await wait_until(lambda: conn.connected)
            await session.producer("queue://tx.cut").send(b"kept")
            await session.commit()
            assert (await conn.queue_info("tx.cut"))["message_count"] == 1

    run(go())


def test_refused_connection_reports_the_broker_error():
    async def go():
        fake = await Scripted(refuse=Error(ErrorCode.UNSUPPORTED, "no common CORE version")).start()
        with pytest.raises(ClientError, match="no common CORE version"):
            await connect(fake.url)
        await fake.stop()

    run(go())


# -- the broker adapter's DISCONNECT, in-process ------------------------------------------------------


def test_broker_disconnect_redirects_a_client(real):
    from petrel.config import BrokerConfig
    from petrel.server.broker import Broker

    async def go():
        config = BrokerConfig(data_dir=tempfile.mkdtemp(), host="127.0.0.1", port=0, stomp_port=-1, http_port=-1,
                              security_enabled=False)
        async with Broker(config) as broker:
            local = f"tcp://127.0.0.1:{broker.ports['all']}"
            async with await connect(local) as conn:
                session = await conn.session()
                assert conn.node_id == broker.node_id
                [adapter] = [c.adapter for c in broker.connections if c.adapter is not None]
                adapter.disconnect("scale-down", f"127.0.0.1:{real.port}")
                await wait_until(lambda: conn.connected and conn.endpoint.port == real.port)
                assert conn.node_id != broker.node_id
                await session.producer("queue://after.redirect").send(b"ok", wait=True)

    run(go())


def test_a_call_during_the_loss_waits_for_it_to_be_handled():
    """Regression: a request made after the socket was aborted, before the loss callback ran,
    must let the loop run (it used to spin) and then fail cleanly."""

    async def go():
        fake = await Scripted().start()
        conn = await connect(fake.url)
        try:
            conn._transport.abort()
            with pytest.raises(ConnectionFailed):
                await asyncio.wait_for(conn.session(), 5)
        finally:
            await conn.close()
            await fake.stop()

    run(go())


# -- settlements across a failover ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deliver(consumer, seq: int) -> Deliver:
    body = b"m%d" % seq
    return Deliver(consumer.session.id, consumer.id, seq, 0, seq, "q", True, 4, 0, 0, {}, body, len(body))


def settlements(fake: Scripted) -> list[tuple]:
    """What ``fake`` was told about deliveries: (frame name, delivery numbers or credit)."""
    out = []
    for e in fake.events:
        if isinstance(e, (Ack, Nack)):
            out.append((type(e).__name__, e.seqs))
        elif isinstance(e, CloseConsumer):
            out.append(("CloseConsumer", e.returned))
        elif isinstance(e, Credit):
            out.append(("Credit", e.credit))
    return out


async def fail_over(a: Scripted, conn, port: int, during) -> Scripted:
    """Stop ``a``, run ``during()`` while the client has no connection, then start the broker
    it reconnects to, on ``port``."""
    await a.stop()
    await wait_until(lambda: not conn.connected)
    await during()
    b = await Scripted(node_id="b").start(port)
    await wait_until(lambda: conn.failovers == 1 and conn.connected)
    return b


def failover_to(a: Scripted, port: int) -> str:
    return f"failover:({a.url},tcp://127.0.0.1:{port})?randomize=false&initialReconnectDelay=10&maxReconnectDelay=50"


def test_settlements_of_a_lost_connection_never_reach_the_next_one():
    """Delivery numbers are per connection: the next broker numbers its own deliveries 1, 2,
    3 again. An ack (waited for or batched), a nack, a message given back, made while the
    client reconnects or after, names a delivery of the lost connection: none is sent (the
    broker redelivers those messages), and the new deliveries are settled as usual."""

    async def go():
        a = await Scripted(node_id="a").start()
        port = free_port()
        conn = await connect(failover_to(a, port))
        session = await conn.session()
        consumer = await session.consumer("queue://q", ack="client", window=100_000)
        for seq in (1, 2, 3, 4):
            a.send_all(deliver(consumer, seq))
        old = [await consumer.receive(5) for _ in range(3)]
        waited: list[asyncio.Future] = []

        async def during() -> None:
            waited.append(asyncio.ensure_future(consumer.ack(old[0], cumulative=True)))
            old[1].ack()
            old[2].nack()

        b = await fail_over(a, conn, port, during)
        assert await asyncio.wait_for(waited[0], 5) == 0
        assert await consumer.ack(old[1]) == 0  # after the failover too
        old[1].ack(cumulative=True)
        old[2].nack()
        b.send_all(deliver(consumer, 1))
        fresh = await consumer.receive(5)
        assert fresh.body == b"m1"
        assert await consumer.ack(fresh) == 1
        await consumer.close()
        assert settlements(b) == [("Ack", [1]), ("CloseConsumer", [])]
        conn._closing = True
        await conn.close()
        await b.stop()

    run(go())


def test_a_transacted_rollback_gives_back_only_the_live_connections_messages():
    async def go():
        a = await Scripted(node_id="a").start()
        port = free_port()
        conn = await connect(failover_to(a, port))
        session = await conn.session(transacted=True)
        consumer = await session.consumer("queue://q", window=100_000)

        async def during() -> None:
            pass

        a.send_all(deliver(consumer, 1))
        old = await consumer.receive(5)
        b = await fail_over(a, conn, port, during)
        for seq in (1, 2):
            b.send_all(deliver(consumer, seq))
        await wait_until(lambda: consumer.buffered == 2)
        with pytest.raises(TransactionRolledBack):
            await session.commit()  # it consumed `old` before the failover
        assert len([e for e in b.events if isinstance(e, Rollback)]) == 1
        # the two new deliveries went back, numbered on b; `old` was never named there
        assert settlements(b) == [("Nack", [2, 1])]
        assert old.seq == 1
        conn._closing = True
        await conn.close()
        await b.stop()

    run(go())


def test_a_transacted_send_made_while_reconnecting_makes_the_commit_roll_back():
    """A send made after the connection went (the transaction had no work then) is dropped
    at the reconnection with its transaction: the commit must not go through on the next
    broker as an empty transaction, or the send would be lost unnoticed."""

    async def go():
        a = await Scripted(node_id="a").start()
        port = free_port()
        conn = await connect(failover_to(a, port))
        session = await conn.session(transacted=True)
        producer = session.producer("queue://q")

        async def during() -> None:
            await producer.send(Message(b"while away"))

        b = await fail_over(a, conn, port, during)
        with pytest.raises(TransactionRolledBack):
            await asyncio.wait_for(session.commit(), 5)  # (b never answers a COMMIT)
        assert not [e for e in b.events if isinstance(e, (Send, Commit))]
        assert len([e for e in b.events if isinstance(e, Rollback)]) == 1
        conn._closing = True
        await conn.close()
        await b.stop()

    run(go())


def test_a_commit_waiting_for_the_reconnection_rolls_back_if_the_failover_took_its_sends():
    """The commit is asked for while there is no connection, after a send the reconnection
    drops: it must go out as a ROLLBACK once connected (it checked for lost work before it
    waited), not commit an empty transaction on the next broker."""

    async def go():
        a = await Scripted(node_id="a").start()
        port = free_port()
        conn = await connect(failover_to(a, port))
        session = await conn.session(transacted=True)
        producer = session.producer("queue://q")
        committing: list[asyncio.Task] = []

        async def during() -> None:
            await producer.send(Message(b"while away"))
            committing.append(asyncio.ensure_future(session.commit()))
            await asyncio.sleep(0.05)  # the commit is waiting for a connection now

        b = await fail_over(a, conn, port, during)
        with pytest.raises(TransactionRolledBack):
            await asyncio.wait_for(committing[0], 5)  # (b never answers a COMMIT)
        assert not [e for e in b.events if isinstance(e, (Send, Commit))]
        assert len([e for e in b.events if isinstance(e, Rollback)]) == 1
        conn._closing = True
        await conn.close()
        await b.stop()

    run(go())


def test_a_window_0_receive_waiting_through_a_failover_asks_the_next_broker():
    """Credit asked for while there is no connection is not counted as given: the receive
    waiting through the failover asks the next broker for its one message."""

    async def go():
        a = await Scripted(node_id="a").start()
        port = free_port()
        conn = await connect(failover_to(a, port))
        session = await conn.session()
        consumer = await session.consumer("queue://q", window=0)
        waiting: list[asyncio.Future] = []

        async def during() -> None:
            waiting.append(asyncio.ensure_future(consumer.receive(10)))
            await asyncio.sleep(0.05)

        b = await fail_over(a, conn, port, during)
        await wait_until(lambda: ("Credit", 1) in settlements(b), 5)
        b.send_all(deliver(consumer, 1))
        assert (await asyncio.wait_for(waiting[0], 5)).body == b"m1"
        conn._closing = True
        await conn.close()
        await b.stop()

    run(go())


def test_the_sync_client_settles_nothing_of_a_lost_connection():
    """The sync consumer's thread-side queue outlives the connection: its messages are not
    handed out once their connection is lost, and acks and nacks of taken ones are dropped."""

    async def go():
        loop = asyncio.get_running_loop()
        a = await Scripted(node_id="a").start()
        port = free_port()
        sync = await loop.run_in_executor(None, lambda: Connection(failover_to(a, port)))
        conn = sync.async_connection
        session = await loop.run_in_executor(None, sync.session)
        consumer = await loop.run_in_executor(None, lambda: session.consumer("queue://q", ack="client"))
        for seq in (1, 2, 3, 4):
            a.send_all(deliver(consumer._async, seq))
        taken = [await loop.run_in_executor(None, consumer.receive, 5) for _ in range(2)]
        await wait_until(lambda: len(consumer._items) == 2)

        async def during() -> None:
            assert await loop.run_in_executor(None, consumer.receive, 0.1) is None  # 3 and 4: lost
            taken[0].ack()
            taken[1].nack()
            await asyncio.sleep(0.05)

        b = await fail_over(a, conn, port, during)
        taken[0].ack(cumulative=True)
        b.send_all(deliver(consumer._async, 1))
        fresh = await loop.run_in_executor(None, consumer.receive, 5)
        assert fresh.body == b"m1"
        fresh.ack()
        await wait_until(lambda: settlements(b))
        await asyncio.sleep(0.1)
        assert settlements(b) == [("Ack", [1])]
        conn._closing = True
        await loop.run_in_executor(None, sync.close)
        await b.stop()

    run(go())
