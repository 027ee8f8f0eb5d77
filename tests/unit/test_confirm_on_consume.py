"""A durable send's confirmation goes out once its message is consumed, if that comes before its
sync (petrel.server.confirmations.Confirmations), and only then: never for a read with anything else
durable in it, a transactional ack, an ack at dispatch, a message that ended another way, nor
ahead of an earlier read still waiting for its sync."""

from __future__ import annotations

from petrel.core.message import RoutingType

from test_server_session import _consumer, message, run, settle

ANY = RoutingType.ANYCAST


def held_syncs(broker) -> list:
    """Hold every store sync until the test releases it (the disk is slow)."""
    held = []
    real_sync = broker.store.sync

    def slow_sync(fn, *, transactional=False, failed=None):
        held.append(lambda: real_sync(fn, transactional=transactional, failed=failed))

    broker.store.sync = slow_sync
    return held


def release(held) -> None:
    while held:
        held.pop(0)()


async def released(held, conn, expected: list) -> None:
    """Let the held syncs go; then exactly `expected` has gone out."""
    release(held)
    await settle(lambda: len(conn.out) >= len(expected))
    assert conn.out == expected


def durable_send(session, address: str, receipt: bytes):
    m = message(session, address, receipt, durable=True)
    session.send(m, ANY)
    session.confirm(receipt, durable=True, sent=m)
    return m


def test_a_consumed_send_is_confirmed_before_its_sync_and_once(tmp_path):
    async def body(broker, session, conn, failures, ran):
        consumer, got = _consumer(session, "q")
        held = held_syncs(broker)
        durable_send(session, "q", b"r1")
        durable_send(session, "q", b"r2")
        session.flush()  # one read, two sends
        assert conn.out == [] and len(got) == 2
        session.acknowledge(consumer, [got[0]])
        assert conn.out == []  # the read's other message is not consumed yet
        session.acknowledge(consumer, [got[1]])
        assert conn.out == [b"r1", b"r2"]
        release(held)
        await settle(lambda: all(r.message.confirm_hook is None for r in got))
        assert conn.out == [b"r1", b"r2"]  # the sync releases nothing twice
        assert failures == []

    run(tmp_path, body)


def test_a_read_with_anything_else_durable_waits_for_its_sync(tmp_path):
    async def body(broker, session, conn, failures, ran):
        consumer, got = _consumer(session, "q")
        held = held_syncs(broker)
        durable_send(session, "q", b"send")
        session.confirm(b"commit", durable=True)  # e.g. a commit's reply: only the disk releases it
        session.flush()
        session.acknowledge(consumer, [got[0]])
        assert conn.out == []
        await released(held, conn, [b"send", b"commit"])

    run(tmp_path, body)


def test_acks_in_a_transaction_or_at_dispatch_release_nothing_early(tmp_path):
    async def body(broker, session, conn, failures, ran):
        consumer, got = _consumer(session, "q")
        held = held_syncs(broker)
        durable_send(session, "q", b"tx")
        session.flush()
        session.begin("t")
        session.acknowledge(consumer, [got[0]], "t")
        session.commit("t")  # its reply waits for the disk, and so does the send
        assert conn.out == []
        durable_send(session, "q", b"dispatch")
        session.flush()
        got[1].queue.acknowledge(got[1], consumer=consumer)  # as an at-most-once consumer at dispatch
        assert conn.out == [] and got[1].message.confirm_hook is None
        await released(held, conn, [b"tx", b"dispatch"])

    run(tmp_path, body)


def test_a_later_read_released_early_waits_for_an_earlier_reads_sync(tmp_path):
    async def body(broker, session, conn, failures, ran):
        consumer, got = _consumer(session, "q")
        held = held_syncs(broker)
        session.confirm(b"first", durable=True)
        session.flush()
        durable_send(session, "q", b"second")
        session.flush()
        session.acknowledge(consumer, [got[0]])
        assert conn.out == []  # read 2 is ready, read 1 is not: nothing overtakes
        await released(held, conn, [b"first", b"second"])

    run(tmp_path, body)


def test_a_message_ending_another_way_waits_for_the_sync(tmp_path):
    async def body(broker, session, conn, failures, ran):
        queue, _ = session.open_queue("q", ANY)
        held = held_syncs(broker)
        m = durable_send(session, "q", b"purged")
        session.flush()
        assert m.confirm_hook is not None
        queue.purge()
        assert m.confirm_hook is None and conn.out == []
        await released(held, conn, [b"purged"])

    run(tmp_path, body)


def test_a_topic_send_waits_for_every_durable_subscription(tmp_path):
    async def body(broker, session, conn, failures, ran):
        c1, got1 = _consumer(session, "t", RoutingType.MULTICAST, client_id="c", durable_name="a")
        c2, got2 = _consumer(session, "t", RoutingType.MULTICAST, client_id="c", durable_name="b")
        held = held_syncs(broker)
        m = message(session, "t", b"x", durable=True)
        session.send(m, RoutingType.MULTICAST)
        session.confirm(b"topic", durable=True, sent=m)
        session.flush()
        assert m.ref_count == 2
        session.acknowledge(c1, [got1[0]])
        assert conn.out == []
        session.acknowledge(c2, [got2[0]])
        assert conn.out == [b"topic"]
        release(held)

    run(tmp_path, body)
