"""Sequence ranges and named cursors of a queue (core/cursors.py), without an event loop: on a
NullStore, and on a real FileStore across restarts, paging and compaction."""

from __future__ import annotations

import threading

import pytest

from petrel.core.cursors import CursorExists, CursorInvalid, CursorNotFound
from petrel.core.message import DUPLICATE_ID, Message, RoutingType
from petrel.core.postoffice import PostOffice
from petrel.core.settings import AddressSettingsRepository
from petrel.storage.file_store import FileStore

from office_harness import ManualClock, consume, make_office, msg

ANY = RoutingType.ANYCAST


def seqs(answer):
    return [h.seq for h in answer.messages]


def fill(office, queue, n, **kw):
    for i in range(n):
        office.send(msg(office, queue, b"m%d" % i, properties={DUPLICATE_ID: f"d{i}"}, **kw), ANY)


def test_tail_and_earliest_of_an_empty_queue_are_the_same():
    office, _ = make_office()
    office.create_queue("q", "q", ANY)
    assert office.tail_seq("q") == office.earliest_seq("q") == 1
    fill(office, "q", 3)
    assert (office.earliest_seq("q"), office.tail_seq("q")) == (1, 4)


def test_a_range_reports_what_consumers_took_as_gaps_and_is_the_same_browsed_twice():
    office, _ = make_office()
    office.create_queue("q", "q", ANY)
    fill(office, "q", 10)
    consumer, sink = consume(office, "q", window=2)
    q = office.queues["q"]
    for ref in list(sink.got):
        q.acknowledge(ref)  # seqs 1 and 2 gone; 3 and 4 now out with the consumer, not acked
    q.remove_consumer(consumer)
    answer = office.browse_range("q", 1, 11, 100)
    assert seqs(answer) == list(range(3, 11))
    assert answer.next_seq == 11 and answer.earliest_seq == 3 and answer.tail_seq == 11
    again = office.browse_range("q", 1, 11, 100)
    assert [(h.seq, h.message.id, h.message.body) for h in again.messages] == \
        [(h.seq, h.message.id, h.message.body) for h in answer.messages]
    first = answer.messages[0].message
    assert first.duplicate_id == "d2" and first.body == b"m2"
    assert q.message_count == 8  # nothing consumed by browsing


def test_messages_out_with_a_consumer_are_still_in_the_range():
    office, _ = make_office()
    office.create_queue("q", "q", ANY)
    fill(office, "q", 4)
    _, sink = consume(office, "q", window=2)
    assert len(sink.got) == 2
    assert seqs(office.browse_range("q", 1, 5, 10)) == [1, 2, 3, 4]


def test_max_cuts_the_range_and_next_seq_continues_it():
    office, _ = make_office()
    office.create_queue("q", "q", ANY)
    fill(office, "q", 10)
    q = office.queues["q"]
    for ref in [r for r in q.iter_refs() if r.seq in (2, 5)]:
        q.take(ref)
        office.reference_done(ref, 0)
    answer = office.browse_range("q", 1, 11, 3)
    assert seqs(answer) == [1, 3, 4] and answer.next_seq == 6  # 5 is absent, 6 comes next
    rest = office.browse_range("q", answer.next_seq, 11, 100)
    assert seqs(rest) == [6, 7, 8, 9, 10] and rest.next_seq == 11
    small = office.browse_range("q", 1, 11, 100, max_bytes=1)
    assert seqs(small) == [1] and small.next_seq == 3  # at least one, whatever the budget


def test_bad_input_is_a_clear_error():
    office, _ = make_office()
    office.create_queue("q", "q", ANY)
    fill(office, "q", 2)
    with pytest.raises(CursorNotFound):
        office.browse_range("nope", 0, 1, 1)
    with pytest.raises(CursorInvalid):
        office.browse_range("q", 5, 2, 1)
    with pytest.raises(CursorInvalid):
        office.browse_range("q", -1, 2, 1)
    with pytest.raises(CursorInvalid):
        office.browse_range("q", 1, 2, 0)
    with pytest.raises(CursorInvalid):
        office.ack_upto("q", "c", -1)
    with pytest.raises(CursorInvalid):
        office.ack_upto("q", "c", 3)  # the tail is 3: nothing there yet
    with pytest.raises(CursorNotFound):
        office.ack_upto("q", "c", 1, create=False)
    with pytest.raises(CursorNotFound):
        office.seq_cursor("q", "c")
    with pytest.raises(CursorNotFound):
        office.delete_seq_cursor("q", "c")
    with pytest.raises(CursorInvalid):
        office.create_seq_cursor("q", "c", 99)
    office.create_seq_cursor("q", "c")
    with pytest.raises(CursorExists):
        office.create_seq_cursor("q", "c", exists_ok=False)


def test_cursors_are_monotonic_idempotent_and_retention_follows_the_lowest():
    office, _ = make_office()
    office.create_queue("q", "q", ANY)
    fill(office, "q", 10)
    q = office.queues["q"]
    slow = office.create_seq_cursor("q", "slow")
    assert slow.acked == 1
    fast = office.ack_upto("q", "fast", 6)
    assert fast.acked == 7
    assert q.message_count == 10  # "slow" still holds everything
    assert office.ack_upto("q", "fast", 3).acked == 7  # lower: nothing moves
    office.ack_upto("q", "slow", 4)
    assert q.message_count == 6 and office.earliest_seq("q") == 5
    assert seqs(office.browse_range("q", 1, 11, 100)) == [5, 6, 7, 8, 9, 10]
    office.delete_seq_cursor("q", "slow")  # "fast" alone holds the queue now
    assert office.earliest_seq("q") == 7 and q.messages_acked == 6
    office.ack_upto("q", "fast", 7)
    assert office.earliest_seq("q") == 8 and q.messages_acked == 7
    assert [c.info() for c in office.seq_cursors("q")] == [{"name": "fast", "acked": 8}]


def test_ordinary_consumers_keep_working_beside_a_cursor():
    office, _ = make_office()
    office.create_queue("q", "q", ANY)
    office.create_seq_cursor("q", "spark")
    fill(office, "q", 6)
    consumer, sink = consume(office, "q", window=2)
    q = office.queues["q"]
    for ref in list(sink.got):
        q.acknowledge(ref)
    q.remove_consumer(consumer)
    assert seqs(office.browse_range("q", 1, 7, 100)) == [3, 4, 5, 6]
    office.ack_upto("q", "spark", 4)
    assert seqs(office.browse_range("q", 1, 7, 100)) == [5, 6]


def test_an_acked_message_out_with_a_consumer_is_settled_for_it():
    office, _ = make_office()
    office.create_queue("q", "q", ANY)
    fill(office, "q", 3)
    consumer, sink = consume(office, "q", window=1)
    office.ack_upto("q", "c", 1)
    q = office.queues["q"]
    assert q.delivering_count <= 1 and 1 not in consumer.delivering
    assert seqs(office.browse_range("q", 1, 4, 10)) == [2, 3]


def test_expired_messages_are_gaps():
    office, clock = make_office()
    office.create_queue("q", "q", ANY)
    office.send(msg(office, "q", b"a"), ANY)
    office.send(msg(office, "q", b"b", expiration=clock.now + 10), ANY)
    office.send(msg(office, "q", b"c"), ANY)
    assert seqs(office.browse_range("q", 1, 4, 10)) == [1, 2, 3]
    clock.advance(20)
    assert seqs(office.browse_range("q", 1, 4, 10)) == [1, 3]


def test_a_page_of_a_long_range_with_expired_messages_cuts_where_the_held_ones_do():
    """A page is cut from the first max + 1 held messages (the rest of a long range is not
    gathered first: reading a big backlog page by page grew quadratically)."""
    office, clock = make_office()
    office.create_queue("q", "q", ANY)
    for i in range(2000):
        office.send(msg(office, "q", b"m", expiration=clock.now + 10 if i % 3 == 0 else 0), ANY)
    clock.advance(20)  # seqs 1, 4, 7 ... expired
    answer = office.browse_range("q", 1, 2001, 4)
    assert seqs(answer) == [2, 3, 5, 6] and answer.next_seq == 8
    whole, start = [], 1
    while start < 2001:
        page = office.browse_range("q", start, 2001, 97)
        whole += seqs(page)
        start = page.next_seq
    assert whole == [s for s in range(1, 2001) if s % 3 != 1]


def test_scheduled_messages_are_held():
    office, clock = make_office()
    office.create_queue("q", "q", ANY)
    office.send(msg(office, "q", b"later", scheduled=clock.now + 60_000), ANY)
    office.send(msg(office, "q", b"now"), ANY)
    assert seqs(office.browse_range("q", 0, 10, 10)) == [1, 2] and office.earliest_seq("q") == 1


# -- on a FileStore --------------------------------------------------------------------------


def open_office(path, settings=None):
    store = FileStore(path, file_size=256 * 1024, datasync=False)
    clock = ManualClock()
    office = PostOffice(store, AddressSettingsRepository(settings or {}), clock, clock=clock)
    office.recover(store.recover())
    office.ensure_defaults()
    return office, store


def flush(store):
    done = threading.Event()
    store.sync(done.set)
    assert done.wait(10)


def send_durable(office, store, queue, n, size=10):
    for i in range(n):
        office.send(Message(id=store.next_id(), address=queue, body=b"%06d" % i + b"x" * size, durable=True,
                            properties={DUPLICATE_ID: f"d{i}"}, timestamp=office.now()), ANY)


def test_cursors_and_what_they_hold_survive_a_restart(tmp_path):
    office, store = open_office(tmp_path)
    office.create_queue("q", "q", ANY)
    send_durable(office, store, "q", 20)
    office.create_seq_cursor("q", "a")
    office.ack_upto("q", "b", 14)
    office.ack_upto("q", "a", 4)
    before = office.browse_range("q", 0, 21, 100)
    assert seqs(before) == list(range(5, 21))
    flush(store)
    store.close()
    office, store = open_office(tmp_path)
    assert {c.name: c.acked for c in office.seq_cursors("q")} == {"a": 5, "b": 15}
    after = office.browse_range("q", 0, 21, 100)
    assert seqs(after) == seqs(before)
    assert [h.message.body for h in after.messages] == [h.message.body for h in before.messages]
    assert [h.message.duplicate_id for h in after.messages] == [f"d{i}" for i in range(4, 20)]
    assert office.tail_seq("q") >= 21
    office.delete_seq_cursor("q", "a")
    flush(store)
    store.close()
    office, store = open_office(tmp_path)
    assert [c.name for c in office.seq_cursors("q")] == ["b"]
    assert seqs(office.browse_range("q", 0, 21, 100)) == list(range(15, 21))  # "a" no longer holds them
    store.close()


def test_a_range_covers_paged_messages_and_a_cursor_releases_them(tmp_path):
    office, store = open_office(tmp_path, {"q": {"max_size_bytes": 16 * 1024}})
    office.create_queue("q", "q", ANY)
    office.create_seq_cursor("q", "c")
    send_durable(office, store, "q", 400, size=200)
    q = office.queues["q"]
    assert q.paging and q.page_backlog > 0
    flush(store)
    answer = office.browse_range("q", 1, 401, 1000)
    assert seqs(answer) == list(range(1, 401))
    assert any(h.paged for h in answer.messages)
    assert answer.messages[300].message.body.startswith(b"000300")
    assert answer.messages[300].message.duplicate_id == "d300"
    part = office.browse_range("q", 250, 260, 5)
    assert seqs(part) == [250, 251, 252, 253, 254] and part.next_seq == 255
    import random

    rng = random.Random(3)
    for _ in range(50):  # ranges anywhere, read from the marks earlier reads left: the same answers
        lo = rng.randint(1, 400)
        hi = rng.randint(lo, 401)
        got = office.browse_range("q", lo, hi, 1000)
        assert [(h.seq, h.message.body) for h in got.messages] == \
            [(h.seq, h.message.body) for h in answer.messages[lo - 1:hi - 1]]
    office.ack_upto("q", "c", 349)  # most of the paged backlog goes
    flush(store)
    assert seqs(office.browse_range("q", 1, 401, 1000)) == list(range(350, 401))
    assert q.message_count == 51 and office.earliest_seq("q") == 350
    store.close()
    office, store = open_office(tmp_path, {"q": {"max_size_bytes": 16 * 1024}})
    assert seqs(office.browse_range("q", 1, 401, 1000)) == list(range(350, 401))
    store.close()


def test_cursors_survive_compaction(tmp_path):
    office, store = open_office(tmp_path)
    office.create_queue("q", "q", ANY)
    send_durable(office, store, "q", 300, size=2000)
    for seq in range(0, 280, 7):
        office.ack_upto("q", "c", seq)
    flush(store)
    store.messages.compact()
    flush(store)
    store.close()
    office, store = open_office(tmp_path)
    assert office.seq_cursor("q", "c").acked == 274
    assert seqs(office.browse_range("q", 0, 301, 1000)) == list(range(274, 301))
    store.close()


def test_the_sequence_index_agrees_with_a_scan_of_the_queue():
    """Sends with priorities, consumers acknowledging out of order and giving messages back,
    expiry, purges: the index the ranges read keeps every held reference and only those."""
    import random

    from petrel.core.cursors import SeqIndex, held_in_memory

    rng = random.Random(7)
    office, clock = make_office()
    office.create_queue("q", "q", ANY)
    q = office.queues["q"]
    office.browse_range("q", 0, 1, 1)  # the index exists from here on
    consumer, sink = consume(office, "q", window=50)
    taken = 0
    for step in range(6000):
        op = rng.random()
        if op < 0.55:
            office.send(msg(office, "q", b"x", priority=rng.randint(0, 9),
                            expiration=clock.now + 5 if rng.random() < 0.05 else 0), ANY)
        elif op < 0.9:
            out = list(consumer.delivering.values())
            if out:
                ref = rng.choice(out)
                if rng.random() < 0.9:
                    q.acknowledge(ref)
                    taken += 1
                else:
                    q.cancel(ref)
        elif op < 0.95:
            clock.advance(3)
            q.expire_scan(clock.now)
        elif op < 0.96:
            office.ack_upto("q", "c", max(office.tail_seq("q") - 200, 0))
        if step % 500 == 0:
            index = SeqIndex.of(q)
            assert [r.seq for r in index.between(0, 1 << 40)] == sorted(held_in_memory(q))
    index = SeqIndex.of(q)
    assert [r.seq for r in index.between(0, 1 << 40)] == sorted(held_in_memory(q))
    assert taken > 1000 and len(index.refs) < 2 * q.message_count + 4096 + 1024


def test_a_queue_read_by_cursors_is_not_redistributed_until_its_last_cursor_goes():
    from petrel.core.remote import RemoteBinding

    office, clock = make_office({"#": {"redistribution_delay": 0}})
    office.create_queue("orders", "orders", ANY)
    office.create_seq_cursor("orders", "spark")
    consumer, _ = consume(office, "orders", window=0)

    class Link:
        node_id = "B"
        connected = True
        sf_queue = office.create_queue("$.petrel.sf.test.B", "$.petrel.sf.test.B", ANY)

    binding = RemoteBinding("orders@B", "orders", "orders", "orders", ANY, None, origin="B", distance=1,
                            link=Link, consumer_count=0, consumer_selectors=[])
    office.add_remote_binding(binding)
    fill(office, "orders", 5)
    office.queues["orders"].remove_consumer(consumer)
    office.update_remote_consumers(binding.key, 1, [None])
    clock.advance(100)
    assert office.queues["orders"].message_count == 5 and office.messages_redistributed == 0
    office.delete_seq_cursor("orders", "spark")
    clock.advance(100)
    assert office.queues["orders"].message_count == 0 and office.messages_redistributed == 5


def test_deleting_a_queue_deletes_its_cursors(tmp_path):
    office, store = open_office(tmp_path)
    office.create_queue("q", "q", ANY)
    send_durable(office, store, "q", 3)
    office.ack_upto("q", "c", 1)
    office.delete_queue("q")
    office.create_queue("q", "q", ANY)
    assert office.seq_cursors("q") == []
    flush(store)
    store.close()
    office, store = open_office(tmp_path)
    assert office.seq_cursors("q") == []
    store.close()


def test_a_cursor_record_of_an_unknown_format_version_is_refused_clearly(tmp_path):
    from petrel.storage.file_store import RecordKind, pack

    office, store = open_office(tmp_path)
    office.create_queue("q", "q", ANY)
    store.messages.add(store.next_id(), RecordKind.SEQ_CURSOR, pack((9, office.queues["q"].id, "c", 1)))
    flush(store)
    store.close()
    store = FileStore(tmp_path, file_size=256 * 1024, datasync=False)
    with pytest.raises(ValueError, match="format version 9"):
        store.recover()


def test_an_auto_created_queue_read_by_a_cursor_is_not_deleted_when_it_empties():
    office, _ = make_office()
    office.send(msg(office, "auto"), ANY)  # auto-creates address and queue
    q = office.queues["auto"]
    assert q.auto_created
    office.ack_upto("auto", "spark", 1)
    consumer, sink = consume(office, "auto")
    office.send(msg(office, "auto"), ANY)
    q.acknowledge(sink.got[0])
    q.remove_consumer(consumer)
    assert "auto" in office.queues and office.seq_cursor("auto", "spark").acked == 2
    office.delete_seq_cursor("auto", "spark")
    consumer, _ = consume(office, "auto")
    q.remove_consumer(consumer)
    assert "auto" not in office.queues  # without its cursor it goes as before
