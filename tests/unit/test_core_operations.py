"""Operator actions on queues: browse, count, remove, move, retry, pause."""

from __future__ import annotations

from petrel.core import operations
from petrel.core.message import RoutingType
from petrel.core.queue import Consumer

from office_harness import Sink, make_office, msg

ANY = RoutingType.ANYCAST


def fill(office, address, items):
    for body, props in items:
        office.send(msg(office, address, body, properties=props), ANY)


def test_browse_and_count_do_not_consume():
    office, _ = make_office()
    fill(office, "q", [(b"a", {"k": "1"}), (b"b", {"k": "2"}), (b"c", {"k": "1"})])
    q = office.queues["q"]
    assert [r.message.body for r in operations.browse(q)] == [b"a", b"b", b"c"]
    assert [r.message.body for r in operations.browse(q, filter="k = '1'")] == [b"a", b"c"]
    assert operations.count(q, "k = '1'") == 2
    assert q.message_count == 3


def test_remove_with_filter():
    office, _ = make_office()
    fill(office, "q", [(b"a", {"k": "1"}), (b"b", {"k": "2"})])
    q = office.queues["q"]
    assert operations.remove(office, q, "k = '1'") == 1
    assert [r.message.body for r in q.iter_refs()] == [b"b"]


def test_move_keeps_order_and_retry_returns_dead_letters():
    office, _ = make_office({"q": {"max_delivery_attempts": 1}})
    fill(office, "q", [(b"1", {}), (b"2", {})])
    office.create_queue("other", "other", ANY)
    q = office.queues["q"]
    assert operations.move(office, q, "other") == 2
    assert [r.message.body for r in office.queues["other"].iter_refs()] == [b"1", b"2"]
    # dead-letter one, then retry it back to where it came from
    fill(office, "q", [(b"poison", {})])
    q = office.queues["q"]  # the drained auto-created queue was auto-deleted; this one is new
    sink = Sink()
    c = Consumer(q, sink, window=1)
    q.add_consumer(c)
    q.cancel(sink.got[0])
    q.remove_consumer(c)
    assert office.queues["DLQ"].message_count == 1
    assert operations.retry(office, office.queues["DLQ"]) == 1
    assert office.queues["DLQ"].message_count == 0
    assert [r.message.body for r in office.queues["q"].iter_refs()] == [b"poison"]


def test_pause_stops_dispatch_until_resume():
    office, _ = make_office()
    fill(office, "q", [(b"a", {})])
    q = office.queues["q"]
    q.pause()
    sink = Sink()
    q.add_consumer(Consumer(q, sink, auto_ack=True))
    fill(office, "q", [(b"b", {})])
    assert sink.got == []
    q.resume()
    assert sink.bodies == [b"a", b"b"]
