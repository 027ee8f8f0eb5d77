"""Browsing a paging queue (core/browsing.py) on a real FileStore, without an event loop: every
message in order, the paged ones streamed from the page files, none consumed; a selector; and
consumers draining the queue (depaging past the browse) during the browse."""

from __future__ import annotations

from petrel.core.browsing import QueueBrowse
from petrel.core.message import Message, RoutingType
from petrel.core.queue import Consumer

from office_harness import Sink, flush, open_file_office

ANY = RoutingType.ANYCAST


def open_office(path):
    return open_file_office(path, {"q": {"max_size_bytes": 16 * 1024}})


def fill(office, store, n):
    office.create_queue("q", "q", ANY)
    for i in range(n):
        office.send(Message(id=store.next_id(), address="q", body=b"%06d" % i + b"x" * 200, durable=True,
                            properties={"index": i, "even": i % 2 == 0}, timestamp=office.now()), ANY)
    flush(store)
    q = office.queues["q"]
    assert q.paging and q.page_backlog > n // 2
    return q


def browse_all(browse, step=100):
    out = []
    while not browse.finished:
        got = browse.next(step)
        assert len(got) == step or browse.finished
        out += got
    return out


def test_a_browse_shows_every_message_paged_or_not_in_order_and_consumes_none(tmp_path):
    office, store = open_office(tmp_path)
    q = fill(office, store, 3000)
    count = q.message_count
    held = browse_all(QueueBrowse(office, q))
    assert [h.message.properties["index"] for h in held] == list(range(3000))
    assert any(h.paged for h in held) and not held[0].paged
    assert held[2500].message.body.startswith(b"002500")
    assert q.message_count == count and q.paging  # nothing consumed, nothing depaged
    evens = browse_all(QueueBrowse(office, q, "even = TRUE AND index >= 100"), step=7)
    assert [h.message.properties["index"] for h in evens] == list(range(100, 3000, 2))
    store.close()


def test_a_browse_opened_before_later_sends_ends_at_the_tail_it_saw(tmp_path):
    office, store = open_office(tmp_path)
    q = fill(office, store, 1000)
    browse = QueueBrowse(office, q)
    first = browse.next(10)
    for i in range(1000, 1100):
        office.send(Message(id=store.next_id(), address="q", body=b"late", durable=True,
                            properties={"index": i}, timestamp=office.now()), ANY)
    flush(store)
    rest = browse_all(browse)
    assert [h.message.properties["index"] for h in first + rest] == list(range(1000))
    store.close()


def test_consumers_draining_the_queue_during_a_browse_do_not_make_it_repeat_or_stall(tmp_path):
    """A consumer takes 1,500 messages mid-browse: depaging moves the page cursor far past where
    the browse is in the page files; the browse goes on from the cursor, in order, none twice,
    to the end (those out with the consumer and read back meanwhile are not shown again)."""
    office, store = open_office(tmp_path)
    q = fill(office, store, 3000)
    browse = QueueBrowse(office, q)
    shown = browse.next(50)
    sink = Sink()
    q.add_consumer(Consumer(q, sink, window=1500))
    for _ in range(100):
        flush(store)
        office.depage(q)
    assert len(sink.got) == 1500 and q.paging
    shown += browse_all(browse)
    index = [h.message.properties["index"] for h in shown]
    assert index == sorted(set(index)) and index[-1] == 2999
    assert len(index) >= 1500
    store.close()
