"""The protocol-neutral server session (petrel.server.session) on an in-process broker:
confirmations after the disk and in order, sends and their refusals, BLOCK through the one
read-flow owner, holds, acknowledgements, transactions, consumers, release."""

from __future__ import annotations

import asyncio

import pytest

from petrel.config import BrokerConfig
from petrel.core.consumer import Consumer
from petrel.core.message import Message, RoutingType
from petrel.server import refusals
from petrel.server.access import Access
from petrel.server.broker import Broker
from petrel.server.flow import ReadFlow
from petrel.server.session import ServerSession


class Transport:
    def __init__(self) -> None:
        self.reading = True
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.reading = False
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.reading = True
        self.calls.append("resume")


class Conn:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closed = False
        self.writing_paused = False
        self.peer = "test"
        self.transport = Transport()
        self.reads = ReadFlow(self)

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.out.append(data)

    def close(self, **kw) -> None:
        self.closed = True


def config(tmp_path, **kw) -> BrokerConfig:
    return BrokerConfig(max_disk_usage=100, data_dir=tmp_path, host="127.0.0.1", port=0, stomp_port=-1,
                        http_port=-1, security_enabled=False, **kw)


def run(tmp_path, body, **kw):
    """Run `body(broker, session, conn, failures, ran)` on a broker of its own."""
    async def main():
        async with Broker(config(tmp_path, **kw)) as broker:
            conn = Conn()
            failures: list = []
            ran: list = []

            def run_fn(fn):
                ran.append(fn)
                fn()
                session.flush()

            session = ServerSession(broker, conn, Access(broker.security), run=run_fn, on_sync_failed=failures.append)
            result = body(broker, session, conn, failures, ran)
            if asyncio.iscoroutine(result):
                result = await result
            return result

    return asyncio.run(main())


async def settle(cond, seconds: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not cond():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def message(session: ServerSession, address: str, body: bytes = b"x", durable: bool = False, **props) -> Message:
    return Message(id=session.next_id(), address=address, body=body, properties=dict(props), durable=durable)


# -- confirmations ---------------------------------------------------------------------------------


def test_confirmations_wait_for_one_sync_per_read_and_go_out_in_read_order(tmp_path):
    async def body(broker, session, conn, failures, ran):
        syncs = []
        real_sync = broker.store.sync
        held = []

        def slow_sync(fn, *, transactional=False, failed=None):
            syncs.append(transactional)
            held.append(lambda: real_sync(fn, transactional=transactional, failed=failed))

        broker.store.sync = slow_sync
        session.confirm(b"a", durable=True)
        session.confirm(b"b", durable=True, transactional=True)
        session.confirm(b"c")
        session.flush()  # read 1: one sync for all three
        assert syncs == [True] and conn.out == []
        session.confirm(b"d")  # read 2: needs no sync, yet waits behind read 1
        session.flush()
        assert syncs == [True] and conn.out == []
        for release in held:
            release()
        await settle(lambda: len(conn.out) == 4)
        assert conn.out == [b"a", b"b", b"c", b"d"]
        session.confirm(b"e")  # nothing waiting: goes out at once
        session.flush()
        assert conn.out[-1] == b"e"
        session.flush()  # an empty read: no sync
        assert syncs == [True]
        assert failures == []

    run(tmp_path, body)


def test_a_failed_sync_confirms_nothing_more_and_is_reported_once(tmp_path):
    async def body(broker, session, conn, failures, ran):
        def failing_sync(fn, *, transactional=False, failed=None):
            failed(OSError("disk gone"))

        broker.store.sync = failing_sync
        calls = []
        session.confirm(b"a", durable=True)
        session.confirm(lambda: calls.append(1))
        session.flush()
        session.confirm(b"b", durable=True)
        session.flush()
        session.confirm(b"c")
        session.flush()
        assert conn.out == [] and calls == []
        assert len(failures) == 1 and isinstance(failures[0], refusals.NotDurable)
        assert "disk gone" in str(failures[0]) and session.not_durable

    run(tmp_path, body)


# -- sends -----------------------------------------------------------------------------------------


def test_send_routes_and_reports_the_result(tmp_path):
    def body(broker, session, conn, failures, ran):
        results = []
        m = message(session, "orders", _PETREL_ROUTE="forged", colour="red")
        result = session.send(m, RoutingType.ANYCAST, then=results.append)
        assert results == [result] and result.queues == 1
        queue = broker.office.queues["orders"]
        assert queue.message_count == 1
        assert "_PETREL_ROUTE" not in m.properties and m.properties["colour"] == "red"

    run(tmp_path, body)


def test_internal_names_are_refused_as_not_authorized(tmp_path):
    def body(broker, session, conn, failures, ran):
        with pytest.raises(refusals.NotAuthorized, match="internal to the cluster"):
            session.send(message(session, "$.petrel.sf.x"), RoutingType.ANYCAST)
        with pytest.raises(refusals.NotAuthorized):
            session.open_queue("$.petrel.sf.x", RoutingType.ANYCAST)
        assert "$.petrel.sf.x" not in broker.office.queues

    run(tmp_path, body)


def test_a_full_address_under_fail_is_refused_and_bad_selectors_too(tmp_path):
    def body(broker, session, conn, failures, ran):
        session.send(message(session, "full", b"x" * 200), RoutingType.ANYCAST)
        with pytest.raises(refusals.AddressFull) as info:
            session.send(message(session, "full", b"y" * 200), RoutingType.ANYCAST)
        assert info.value.kind == "address-full"
        assert broker.office.queues["full"].message_count == 1
        with pytest.raises(refusals.SelectorRefused):
            session.open_queue("q", RoutingType.ANYCAST, selector="colour = = 'red'")

    run(tmp_path, body, address_settings={"full": {"max_size_bytes": 100, "address_full_policy": "FAIL"}})


def test_refusal_of_maps_the_domain_errors():
    from petrel.core.errors import RoutingError
    from petrel.core.limits import AddressFull
    from petrel.core.selector import SelectorError
    from petrel.core.transaction import TransactionRolledBack
    from petrel.security.errors import NotAuthorized

    assert isinstance(refusals.refusal_of(RoutingError("r")), refusals.RoutingRefused)
    assert isinstance(refusals.refusal_of(AddressFull("f")), refusals.AddressFull)
    assert isinstance(refusals.refusal_of(SelectorError("a = = b", "bad", 4)), refusals.SelectorRefused)
    assert isinstance(refusals.refusal_of(TransactionRolledBack("t")), refusals.TransactionRolledBack)
    refused = refusals.refusal_of(NotAuthorized("send", "a", "bob"))
    assert isinstance(refused, refusals.NotAuthorized) and "bob" in str(refused)
    same = refusals.InvalidRequest("x")
    assert refusals.refusal_of(same) is same


# -- flow control ----------------------------------------------------------------------------------


def test_read_flow_resumes_only_when_no_reason_is_left():
    conn = Conn()
    flow = conn.reads
    flow.pause("block")
    flow.pause("hold")
    flow.pause("hold")
    assert conn.transport.calls == ["pause"] and flow.reasons() == ["block", "hold"]
    flow.resume("block")
    flow.resume("hold")
    assert not conn.transport.reading
    flow.resume("hold")
    assert conn.transport.reading and conn.transport.calls == ["pause", "resume"]
    flow.resume("hold")  # nothing to lift
    assert conn.transport.calls == ["pause", "resume"]
    flow.pause("tls")
    conn.closed = True
    flow.resume("tls")  # a closed connection is not resumed
    assert conn.transport.calls == ["pause", "resume", "pause"]


def test_blocked_producer_stays_paused_while_a_hold_is_on(tmp_path):
    def body(broker, session, conn, failures, ran):
        session.block("orders")
        assert session.blocked and not conn.transport.reading
        session.hold()
        broker.office.limits.wake()  # room again: the block lifts, the hold does not
        assert not session.blocked and not conn.transport.reading
        done = []
        session.resume_held(lambda: done.append(1))
        assert done == [1] and conn.transport.reading and len(ran) == 1

    run(tmp_path, body)


def test_a_send_to_a_full_block_address_pauses_reads_until_there_is_room(tmp_path):
    def body(broker, session, conn, failures, ran):
        session.send(message(session, "slow", b"x" * 200), RoutingType.ANYCAST)
        assert not session.blocked and conn.transport.reading
        session.send(message(session, "slow", b"y" * 200), RoutingType.ANYCAST)  # full: still stored, then BLOCK
        assert session.blocked and not conn.transport.reading
        queue = broker.office.queues["slow"]
        consumer = Consumer(queue, lambda c, ref: None, auto_ack=True)
        session.add_consumer(consumer)
        queue.add_consumer(consumer)
        assert queue.message_count == 0
        assert not session.blocked and conn.transport.reading

    run(tmp_path, body, address_settings={"slow": {"max_size_bytes": 100, "address_full_policy": "BLOCK"}})


# -- consumers, acknowledgements, transactions ------------------------------------------------------


def _consumer(session, name, routing_type=RoutingType.ANYCAST, **kw):
    queue, selector = session.open_queue(name, routing_type, **{k: v for k, v in kw.items()
                                                                 if k in ("selector", "client_id", "durable_name")})
    got = []
    consumer = Consumer(queue, lambda c, ref: got.append(ref), selector=selector, window=kw.get("window", -1))
    session.add_consumer(consumer)
    queue.add_consumer(consumer)
    return consumer, got


def test_acknowledge_cancel_and_cumulative_ranges(tmp_path):
    def body(broker, session, conn, failures, ran):
        consumer, got = _consumer(session, "q")
        for n in range(3):
            session.send(message(session, "q", b"%d" % n), RoutingType.ANYCAST)
        assert [r.message.body for r in got] == [b"0", b"1", b"2"]
        refs = session.refs_through(consumer, got[1].seq)
        assert [r.message.body for r in refs] == [b"0", b"1"]
        assert session.refs_through(consumer, 10_000) == []
        session.acknowledge(consumer, refs)
        queue = consumer.queue
        assert queue.message_count == 1
        session.cancel(consumer, [got[2]])
        assert got[-1].message.body == b"2" and got[-1].delivery_count == 1  # redelivered

    run(tmp_path, body)


def test_local_transactions_by_name(tmp_path):
    def body(broker, session, conn, failures, ran):
        session.begin("t1")
        with pytest.raises(refusals.TransactionUnknown):
            session.begin("t1")
        session.send(message(session, "q"), RoutingType.ANYCAST, "t1")
        queue = broker.office.queues["q"]
        assert queue.message_count == 0
        session.commit("t1")
        assert queue.message_count == 1 and "t1" not in session.transactions
        with pytest.raises(refusals.TransactionUnknown):
            session.send(message(session, "q"), RoutingType.ANYCAST, "t1")
        assert queue.message_count == 1
        session.begin("t2")
        session.send(message(session, "q"), RoutingType.ANYCAST, "t2")
        session.rollback("t2")
        assert queue.message_count == 1
        # acks in a transaction settle at commit; reopen keeps a transaction by that name
        consumer, got = _consumer(session, "q")
        session.begin("t3")
        session.acknowledge(consumer, [got[0]], "t3")
        assert queue.message_count == 1
        session.commit("t3", reopen=True)
        assert queue.message_count == 0 and "t3" in session.transactions
        tx = session.transaction("t3")
        tx.rollback_only = "a duplicate"
        with pytest.raises(refusals.TransactionRolledBack, match="rolled back"):
            session.commit("t3")

    run(tmp_path, body)


def test_open_queue_multicast_and_durable_subscriptions(tmp_path):
    def body(broker, session, conn, failures, ran):
        c1, got1 = _consumer(session, "news", RoutingType.MULTICAST)
        c2, got2 = _consumer(session, "news", RoutingType.MULTICAST, client_id="app", durable_name="sub",
                             selector="colour = 'red'")
        assert c2.queue.name == "app.sub" and c2.queue.durable and c2.selector is None
        session.send(message(session, "news", colour="red"), RoutingType.MULTICAST)
        session.send(message(session, "news", colour="blue"), RoutingType.MULTICAST)
        assert len(got1) == 2 and len(got2) == 1
        session.remove_consumer(c2)
        assert c2.closed and c2.id not in session.consumers
        assert session.delete_durable("app", "sub") and "app.sub" not in broker.office.queues
        assert not session.delete_durable("app", "sub")

    run(tmp_path, body)


def test_release_rolls_back_and_returns_unacknowledged_messages(tmp_path):
    def body(broker, session, conn, failures, ran):
        consumer, got = _consumer(session, "q", window=10)
        session.send(message(session, "q"), RoutingType.ANYCAST)
        session.begin("t")
        session.send(message(session, "q"), RoutingType.ANYCAST, "t")
        queue = consumer.queue
        assert len(got) == 1 and queue.delivering_count == 1
        conn.closed = True
        session.release()
        assert consumer.closed and queue.delivering_count == 0 and queue.message_count == 1
        assert session.transactions == {} and session.consumers == {}
        done = []
        session.resume_held(lambda: done.append(1))  # nothing runs for a connection that is gone
        assert done == []

    run(tmp_path, body)


def test_pushes_go_out_after_what_earlier_reads_wait_for(tmp_path):
    async def body(broker, session, conn, failures, ran):
        held = []
        real_sync = broker.store.sync
        broker.store.sync = lambda fn, *, transactional=False, failed=None: held.append(
            lambda: real_sync(fn, transactional=transactional, failed=failed))
        session.confirm(b"receipt", durable=True)
        session.flush()
        session.confirmations.after_pending([b"topology"])
        assert conn.out == []
        held[0]()
        await settle(lambda: len(conn.out) == 2)
        assert conn.out == [b"receipt", b"topology"]
        session.confirmations.after_pending([b"now"])  # nothing waiting: at once
        assert conn.out[-1] == b"now"

    run(tmp_path, body)


def test_block_reads_false_leaves_the_blocked_result_to_the_adapter(tmp_path):
    def body(broker, session, conn, failures, ran):
        session.send(message(session, "slow", b"x" * 200), RoutingType.ANYCAST)
        result = session.send(message(session, "slow", b"y" * 200), RoutingType.ANYCAST, block_reads=False)
        assert result.blocked and not session.blocked and conn.transport.reading
        session.hold()
        session.release_hold()  # lifted without running anything
        assert not session.held and conn.transport.reading and ran == []

    run(tmp_path, body, address_settings={"slow": {"max_size_bytes": 100, "address_full_policy": "BLOCK"}})
