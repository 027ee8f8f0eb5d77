"""Prepared transactions in the core (core/prepared.py) on a real FileStore: a branch that sends
to `out` and acknowledges what it took from `in`, prepared, then committed or rolled back, live
or after one or more restarts (its sends invisible and its acknowledged messages held meanwhile)."""

from __future__ import annotations

import pytest
from office_harness import Sink, flush, open_file_office

from petrel.core.message import Message, RoutingType
from petrel.core.prepared import UnknownXid
from petrel.core.queue import Consumer
from petrel.core.transaction import Transaction

ANY = RoutingType.ANYCAST
XID = b"\x00\x00\x00\x01gtrid-1|bqual-1"


def durable(office, address: str, body: bytes) -> Message:
    return Message(id=office.store.next_id(), address=address, body=body, durable=True, timestamp=office.now())


def take_all(office, name: str) -> tuple[Consumer, Sink]:
    queue = office.queues[name]
    sink = Sink()
    consumer = Consumer(queue, sink)
    queue.add_consumer(consumer)
    return consumer, sink


def available(office, name: str) -> list[tuple[bytes, int]]:
    """What a new consumer of `name` gets: (body, delivery count) of each, then closed."""
    consumer, sink = take_all(office, name)
    got = [(ref.message.body, ref.delivery_count) for ref in sink.got]
    consumer.closed = True  # (nothing more for it while they go back)
    for ref in reversed(sink.got):
        office.queues[name].cancel(ref, redelivered=False)
    office.queues[name].remove_consumer(consumer)
    return got


def prepared_branch(tmp_path, xid: bytes = XID):
    """`in` holds three messages; a branch takes two of them and sends one to `out`; prepared."""
    office, store = open_file_office(tmp_path)
    office.ensure_defaults()
    for name in ("in", "out"):
        office.create_queue(name, name, ANY)
    for i in range(3):
        office.send(durable(office, "in", b"in-%d" % i), ANY)
    consumer, sink = take_all(office, "in")
    tx = Transaction("branch")
    for ref in sink.got[:2]:
        tx.hold_ack(ref)
    consumer.closed = True
    for ref in reversed(sink.got[2:]):
        office.queues["in"].cancel(ref, redelivered=False)
    office.queues["in"].remove_consumer(consumer)
    office.send(durable(office, "out", b"sent"), ANY, tx)
    assert office.prepare(tx, xid) is True
    flush(store)
    return office, store


def restart(office, store, tmp_path):
    flush(store)
    store.close()
    return open_file_office(tmp_path)


def test_prepared_work_waits_then_a_commit_applies_it_for_good(tmp_path):
    office, store = prepared_branch(tmp_path)
    assert list(office.prepared) == [XID]
    assert available(office, "out") == []  # the send is invisible
    assert available(office, "in") == [(b"in-2", 0)]  # the acknowledged two are held
    office.commit_prepared(XID)
    assert office.prepared == {}
    assert available(office, "out") == [(b"sent", 0)]
    assert available(office, "in") == [(b"in-2", 0)]
    office, store = restart(office, store, tmp_path)
    assert office.prepared == {}
    assert available(office, "out") == [(b"sent", 0)] and available(office, "in") == [(b"in-2", 0)]
    store.close()


def test_a_rollback_drops_the_sends_and_gives_the_acknowledged_back_redelivered(tmp_path):
    office, store = prepared_branch(tmp_path)
    office.rollback_prepared(XID)
    assert available(office, "out") == []
    assert sorted(available(office, "in")) == [(b"in-0", 1), (b"in-1", 1), (b"in-2", 0)]
    with pytest.raises(UnknownXid):
        office.commit_prepared(XID)
    office, store = restart(office, store, tmp_path)
    assert office.prepared == {} and available(office, "out") == []
    assert sorted(body for body, _ in available(office, "in")) == [b"in-0", b"in-1", b"in-2"]
    store.close()


@pytest.mark.parametrize("restarts", [1, 2])
def test_a_restart_keeps_it_prepared_and_a_commit_after_it_applies(tmp_path, restarts):
    office, store = prepared_branch(tmp_path)
    for _ in range(restarts):
        office, store = restart(office, store, tmp_path)
        assert list(office.prepared) == [XID]
        assert available(office, "out") == []
        assert available(office, "in") == [(b"in-2", 0)]
        assert office.queues["in"].message_count == 3  # two of them held by the branch
    office.commit_prepared(XID)
    assert office.prepared == {}
    assert available(office, "out") == [(b"sent", 0)] and available(office, "in") == [(b"in-2", 0)]
    office, store = restart(office, store, tmp_path)
    assert office.prepared == {}
    assert available(office, "out") == [(b"sent", 0)] and available(office, "in") == [(b"in-2", 0)]
    assert office.queues["in"].message_count == 1
    store.close()


def test_a_restart_keeps_it_prepared_and_a_rollback_after_it_undoes_it(tmp_path):
    office, store = prepared_branch(tmp_path)
    office, store = restart(office, store, tmp_path)
    office.rollback_prepared(XID)
    assert available(office, "out") == []
    assert sorted(available(office, "in")) == [(b"in-0", 1), (b"in-1", 1), (b"in-2", 0)]
    office, store = restart(office, store, tmp_path)
    assert office.prepared == {} and available(office, "out") == []
    assert sorted(body for body, _ in available(office, "in")) == [b"in-0", b"in-1", b"in-2"]
    store.close()


def test_two_branches_and_a_message_of_two_queues_acknowledged_in_both(tmp_path):
    """A multicast message in two queues, each reference acknowledged by another prepared branch:
    the first commit does not delete it (the other branch may still roll back)."""
    office, store = open_file_office(tmp_path)
    office.ensure_defaults()
    office.create_queue("a", "news", RoutingType.MULTICAST)
    office.create_queue("b", "news", RoutingType.MULTICAST)
    office.send(durable(office, "news", b"both"), RoutingType.MULTICAST)
    for name, xid in (("a", b"xa"), ("b", b"xb")):
        consumer, sink = take_all(office, name)
        tx = Transaction(name)
        tx.hold_ack(sink.got[0])
        office.queues[name].remove_consumer(consumer)
        assert office.prepare(tx, xid)
    office, store = restart(office, store, tmp_path)
    assert sorted(office.prepared) == [b"xa", b"xb"]
    office.commit_prepared(b"xa")
    office, store = restart(office, store, tmp_path)
    office.rollback_prepared(b"xb")
    assert available(office, "a") == [] and available(office, "b") == [(b"both", 1)]
    office, store = restart(office, store, tmp_path)
    assert available(office, "a") == [] and [body for body, _ in available(office, "b")] == [b"both"]
    store.close()


def test_a_branch_without_work_is_read_only(tmp_path):
    office, store = open_file_office(tmp_path)
    assert office.prepare(Transaction("nothing"), XID) is False
    assert office.prepared == {}
    office, store = restart(office, store, tmp_path)
    assert office.prepared == {}
    store.close()


def test_an_auto_created_queue_a_prepared_branch_sends_to_is_not_auto_deleted(tmp_path):
    office, store = open_file_office(tmp_path)
    office.ensure_defaults()
    tx = Transaction("branch")
    office.send(durable(office, "auto.out", b"later"), ANY, tx)  # the queue is auto-created
    assert office.queues["auto.out"].auto_created
    assert office.prepare(tx, XID)
    assert available(office, "auto.out") == []  # its consumer leaves an empty queue: it stays
    office, store = restart(office, store, tmp_path)
    assert available(office, "auto.out") == []
    office.commit_prepared(XID)
    assert available(office, "auto.out") == [(b"later", 0)]
    store.close()


def test_a_prepared_sends_large_file_is_not_an_orphan_at_start_up(tmp_path):
    from petrel.storage.large import LargeMessageStore, reconcile
    from petrel.storage.store import NullStore, PreparedRecord, Recovered, RecoveredRef

    large = LargeMessageStore(tmp_path)
    body = large.write(7, [b"big" * 10])
    sent = Message(id=7, address="q", body=b"", durable=True, large=body)
    recovered = Recovered(prepared=[PreparedRecord(3, XID, [(sent, [RecoveredRef(1, 1)])])])
    assert reconcile(large, recovered, NullStore()) == 0
    assert large.names() == ["7.msg"]


def test_a_send_that_cannot_be_routed_rolls_the_branch_back_and_keeps_nothing(tmp_path, monkeypatch):
    from petrel.core.errors import RoutingError
    from petrel.core.transaction import TransactionRolledBack

    office, store = open_file_office(tmp_path)
    office.ensure_defaults()
    office.create_queue("in", "in", ANY)
    office.send(durable(office, "in", b"taken"), ANY)
    consumer, sink = take_all(office, "in")
    tx = Transaction("branch")
    tx.hold_ack(sink.got[0])
    office.queues["in"].remove_consumer(consumer)
    office.send(durable(office, "out", b"fine"), ANY, tx)
    office.send(durable(office, "out", b"broken"), ANY, tx)
    route = office._route

    def fails_on_broken(message, *args, **kwargs):
        if message.body == b"broken":
            raise RoutingError("cannot copy its body")
        return route(message, *args, **kwargs)

    monkeypatch.setattr(office, "_route", fails_on_broken)
    with pytest.raises(TransactionRolledBack):
        office.prepare(tx, XID)
    monkeypatch.undo()
    assert office.prepared == {} and office._held == {}
    assert available(office, "out") == [] and available(office, "in") == [(b"taken", 1)]
    office, store = restart(office, store, tmp_path)
    assert office.prepared == {} and "out" not in office.queues  # (auto-deleted, empty)
    assert [body for body, _ in available(office, "in")] == [b"taken"]
    store.close()
