"""The post office on a real FileStore: depaging follows consumers' credit, not their acknowledgements."""

from __future__ import annotations

import threading

from petrel.core.message import Message, RoutingType
from petrel.core.postoffice import PostOffice
from petrel.core.queue import Consumer
from petrel.core.settings import AddressSettingsRepository
from petrel.storage.file_store import FileStore

from office_harness import ManualClock, Sink

ANY = RoutingType.ANYCAST


def open_office(path, settings):
    store = FileStore(path, file_size=256 * 1024, datasync=False)
    clock = ManualClock()
    office = PostOffice(store, AddressSettingsRepository(settings), clock, clock=clock)
    office.recover(store.recover())
    office.ensure_defaults()
    return office, store


def flush(store):
    done = threading.Event()
    store.sync(done.set)
    assert done.wait(10)


def test_a_client_acknowledging_consumer_gets_its_whole_window_from_the_pages_before_acking(tmp_path):
    """Issue 9, bug 12: depaging waited for acknowledgements, so a consumer acknowledging after
    every N deliveries got one page batch per round trip, or none at all once N exceeded it."""
    office, store = open_office(tmp_path, {"big": {"max_size_bytes": 64 * 1024}})
    office.create_queue("big", "big", ANY)
    q = office.queues["big"]
    for i in range(2000):
        m = Message(id=store.next_id(), address="big", body=b"%06d" % i + b"x" * 1000, durable=True,
                    timestamp=office.now())
        office.send(m, ANY)
    assert q.paging
    flush(store)
    sink = Sink()
    q.add_consumer(Consumer(q, sink, window=500))
    assert len(sink.got) == 500  # the window, although only ~16 KiB is read from the pages at a time
    assert q.memory_bytes - q.delivering_bytes <= 64 * 1024  # what waits in memory stays bounded
    for ref in sink.got[:250]:  # acknowledging half the window lets the next half through
        q.acknowledge(ref)
    assert len(sink.got) == 750
    taken = 250
    while taken < len(sink.got):
        q.acknowledge(sink.got[taken])
        taken += 1
        if taken == len(sink.got) and taken < 2000:
            flush(store)
            office.depage(q)
    assert [int(r.message.body[:6]) for r in sink.got] == list(range(2000))
    assert not q.paging and q.delivering_bytes == 0
    store.close()


def test_paging_does_not_end_on_records_written_between_the_read_and_the_check(tmp_path, monkeypatch):
    """Depaging read nothing (the record was not yet written), then asked whether records were
    still on their way to disk: the writer had finished in between, so it said no, paging ended
    and the record, confirmed by then, was never read."""
    office, store = open_office(tmp_path, {"big": {"max_size_bytes": 4096}})
    office.create_queue("big", "big", ANY)
    q = office.queues["big"]
    for i in range(8):
        m = Message(id=store.next_id(), address="big", body=b"%06d" % i + b"x" * 1000, durable=True,
                    timestamp=office.now())
        office.send(m, ANY)
    assert q.paging
    flush(store)
    sink = Sink()
    q.add_consumer(Consumer(q, sink, window=1000))
    assert len(sink.got) == 8
    gate = threading.Event()
    write = store.pages._write

    def held_write(batch, dirs):  # the page writer thread takes its batch, then waits here
        assert gate.wait(10)
        return write(batch, dirs)

    monkeypatch.setattr(store.pages, "_write", held_write)
    read = store.read_pages

    def read_then_written(queue_id, cursor, max_bytes):
        got = read(queue_id, cursor, max_bytes)  # nothing: the record is not written yet
        gate.set()
        flush(store)  # ... and now it is
        return got

    m = Message(id=store.next_id(), address="big", body=b"%06d" % 8, durable=True, timestamp=office.now())
    office.send(m, ANY)
    monkeypatch.setattr(store, "read_pages", read_then_written)
    office.depage(q)
    monkeypatch.setattr(store, "read_pages", read)
    office.scheduler.advance(100)  # depaging looks again shortly
    assert [int(r.message.body[:6]) for r in sink.got] == list(range(9))
    assert not q.paging
    store.close()
