"""A duplicate ID is never durable without its message (issue 9, bug 3), on the real FileStore.

A crash is simulated where two writes race: the page writer held back while the journal syncs
(a paged send), or the journal cut after any of a send's appends (a send whose only durable
target is a store-and-forward copy). After recovery from what was written, a known duplicate
ID must mean the message is there; otherwise the client's resend is dropped and it is lost.
"""

from __future__ import annotations

import shutil
import threading

from petrel.core.message import DUPLICATE_ID, Message, RoutingType
from petrel.core.postoffice import SendOutcome
from petrel.core.queue import Consumer
from petrel.core.remote import RemoteBinding

from office_harness import Sink, flush, open_file_office

ANY, MULTI = RoutingType.ANYCAST, RoutingType.MULTICAST
PAGED = {"big": {"max_size_bytes": 16 * 1024}}
SF = "$.petrel.sf.test.B"


open_office = open_file_office


def _copy_unless_gone(src, dst):
    try:
        return shutil.copy2(src, dst)
    except FileNotFoundError:  # a journal's spare file being made, renamed meanwhile
        return dst


def copy_disk(src, dst) -> None:
    """What the disk holds now: a copy of ``src`` that leaves out a file the journals' file pool
    renamed or removed while the copy ran (a spare, never a written record)."""
    shutil.copytree(src, dst, copy_function=_copy_unless_gone)


def send(office, address, body, rt=ANY, dup=None):
    props = {DUPLICATE_ID: dup} if dup is not None else {}
    m = Message(id=office.store.next_id(), address=address, body=body, properties=props, durable=True,
                timestamp=office.now())
    return office.send(m, rt)


def drain(office, name):
    """Every body the queue holds, depaging as it goes."""
    q = office.queues[name]
    sink = Sink()
    q.add_consumer(Consumer(q, sink, window=1_000_000))
    bodies = []
    for _ in range(1000):
        while sink.got:
            ref = sink.got.pop(0)
            bodies.append(ref.message.body)
            q.acknowledge(ref)
        if q.message_count == 0:
            break
        flush(office.store)
        office.depage(q)
    return bodies


def paging_office(path, settings=PAGED):
    office, store = open_office(path, settings)
    office.create_queue("big", "big", ANY)
    n = 0
    while not office.queues["big"].paging:
        send(office, "big", b"fill%04d" % n + b"x" * 1000)
        n += 1
    flush(store)
    return office, store, n


def test_a_crash_before_the_page_is_written_keeps_no_duplicate_id(tmp_path):
    office, store, filled = paging_office(tmp_path / "data")
    with store.pages._lock:  # the page writer cannot take the next record: it is never written
        assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.ROUTED
        journal = threading.Event()
        store.messages.sync(journal.set)  # the journal is as durable as it gets
        assert journal.wait(10)
        copy_disk(tmp_path / "data", tmp_path / "crash")  # the disk at the crash
    store.close()

    office, store = open_office(tmp_path / "crash", PAGED)
    # the send was never confirmed, so the client sends it again: it must be taken
    assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.ROUTED
    flush(store)
    bodies = drain(office, "big")
    assert bodies.count(b"the one") == 1
    assert len(bodies) == filled + 1
    store.close()


def test_a_crash_after_the_page_and_before_the_duplicate_id_record_keeps_the_id(tmp_path):
    office, store, filled = paging_office(tmp_path / "data")
    assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.ROUTED
    for journal in (store.pages, store.messages):  # both writers done, but no sync asked yet:
        written = threading.Event()  # the ID's record waits for one (`add_duplicate_id_after_pages`)
        journal.sync(written.set)
        assert written.wait(10)
    copy_disk(tmp_path / "data", tmp_path / "crash")  # the disk at the crash
    store.close()

    office, store = open_office(tmp_path / "crash", PAGED)
    # the page record was the send's only home: the ID comes back from it, the resend is dropped
    assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.DUPLICATE
    flush(store)
    bodies = drain(office, "big")
    assert bodies.count(b"the one") == 1
    assert len(bodies) == filled + 1
    store.close()
    office, store = open_office(tmp_path / "crash", PAGED)  # and the ID is journalled now
    assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.DUPLICATE
    store.close()


def test_a_message_read_back_from_its_page_before_its_id_is_journalled_takes_the_id_along(tmp_path):
    office, store, filled = paging_office(tmp_path / "data")
    assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.ROUTED
    written = threading.Event()
    store.pages.sync(written.set)  # the page is written; the sync that journals the ID not asked yet
    assert written.wait(10)
    q = office.queues["big"]
    sink = Sink()
    q.add_consumer(Consumer(q, sink, window=1_000_000))
    while not any(ref.message.body == b"the one" for ref in sink.got):  # read back into the journal
        assert sink.got, "the paged message never came back"
        q.acknowledge(sink.got.pop(0))
    journal = threading.Event()
    store.messages.sync(journal.set)
    assert journal.wait(10)
    copy_disk(tmp_path / "data", tmp_path / "crash")  # the disk at the crash
    store.close()

    office, store = open_office(tmp_path / "crash", PAGED)
    assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.DUPLICATE
    assert drain(office, "big").count(b"the one") == 1
    store.close()


def test_a_paged_sends_duplicate_id_is_journalled_once_its_page_is_durable(tmp_path):
    office, store, filled = paging_office(tmp_path / "data")
    assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.ROUTED
    flush(store)  # what a receipt waits for
    store.close()

    office, store = open_office(tmp_path / "data", PAGED)
    assert send(office, "big", b"the one", dup="d-1").outcome == SendOutcome.DUPLICATE
    bodies = drain(office, "big")
    assert bodies.count(b"the one") == 1
    store.close()


def test_a_paged_duplicate_id_evicted_before_it_is_journalled_is_never_written(tmp_path):
    small = {"big": {**PAGED["big"], "id_cache_size": 2}}
    office, store, _ = paging_office(tmp_path / "data", small)
    for i in range(5):  # each evicts an older one, some still waiting for their pages
        assert send(office, "big", b"m%d" % i, dup=f"d-{i}").outcome == SendOutcome.ROUTED
    flush(store)
    store.close()

    office, store = open_office(tmp_path / "data", small)
    assert send(office, "big", b"again", dup="d-4").outcome == SendOutcome.DUPLICATE
    assert send(office, "big", b"again", dup="d-0").outcome == SendOutcome.ROUTED
    store.close()


class FakeLink:
    def __init__(self, office) -> None:
        self.node_id = "B"
        self.connected = True
        self.sf_queue = office.queues.get(SF) or office.create_queue(SF, SF, ANY)


class Crash(Exception):
    pass


def every_crash(tmp_path, setup, send_it, holders):
    """Run `send_it` once per prefix of its journal appends (a crash leaves a prefix: the k-th
    append and every later one never happen), recover, and return [(duplicate ID known,
    bodies `holders(office)` finds)] per prefix, the whole send last."""
    outcomes = []
    k = 1
    while True:
        path = tmp_path / f"run{k}"
        office, store = open_office(path)
        setup(office)
        flush(store)
        journal = store.messages
        calls = [0]
        originals = {}

        def crashing(name):
            original = originals[name] = getattr(journal, name)

            def append(*args, **kw):
                calls[0] += 1
                if calls[0] == k:
                    raise Crash
                return original(*args, **kw)

            return append

        for name in ("add", "add_tx", "update", "update_tx", "delete", "delete_tx", "commit"):
            setattr(journal, name, crashing(name))
        try:
            send_it(office)
            crashed = False
        except Crash:
            crashed = True
        for name, original in originals.items():
            setattr(journal, name, original)
        flush(store)
        store.close()
        office, store = open_office(path)
        known = any("d-1" in cache for cache in office.dup_caches.values())
        outcomes.append((known, holders(office)))
        store.close()
        if not crashed:
            return outcomes
        k += 1


def test_a_crash_between_the_appends_of_a_send_to_a_remote_subscriber_keeps_both_or_neither(tmp_path):
    """The only durable target is the store-and-forward copy: the duplicate ID and the copy
    are one journal transaction."""

    def setup(office):
        link = FakeLink(office)
        office.create_address("feed", {MULTI})
        office.add_remote_binding(RemoteBinding("sub@B", "sub", "sub", "feed", MULTI, None, origin="B",
                                                distance=1, link=link, consumer_count=1))

    outcomes = every_crash(tmp_path, setup, lambda office: send(office, "feed", b"the one", MULTI, dup="d-1"),
                           lambda office: [r.message.body for r in office.queues[SF].iter_refs()])
    assert len(outcomes) >= 3  # the copy and the duplicate ID at least
    for k, (known, copies) in enumerate(outcomes):
        assert copies in ([], [b"the one"])
        assert known == bool(copies), f"crash after {k} appends: duplicate ID {known}, copies {copies}"
    assert outcomes[-1] == (True, [b"the one"])


def test_a_crash_between_the_appends_of_a_diverted_send_keeps_both_or_neither(tmp_path):
    def setup(office):
        office.create_queue("archive", "archive", ANY)
        office.create_queue("orders", "orders", ANY)
        office.create_divert("keep", "orders", "archive", exclusive=True)

    outcomes = every_crash(tmp_path, setup, lambda office: send(office, "orders", b"the one", dup="d-1"),
                           lambda office: [r.message.body for r in office.queues["archive"].iter_refs()])
    for k, (known, copies) in enumerate(outcomes):
        assert copies in ([], [b"the one"])
        assert known == bool(copies), f"crash after {k} appends: duplicate ID {known}, copies {copies}"
    assert outcomes[-1] == (True, [b"the one"])


def test_a_crash_before_an_auto_created_queue_is_written_keeps_no_duplicate_id(tmp_path):
    """The two journals have a writer each: a send that auto-creates its queue can have its
    message and duplicate ID written (not confirmed: that waits for both) when the queue's record
    is not yet. Recovery then has a message for no queue; its duplicate ID must go with it, or the
    client's resend is dropped (seen once in a full run: test_10k_durable_sends_survive_kill9_and_restart)."""
    office, store = open_office(tmp_path / "data")
    flush(store)
    copy_disk(tmp_path / "data" / "bindings", tmp_path / "bindings-before")
    assert send(office, "orders", b"the one", dup="d-1").outcome == SendOutcome.ROUTED  # auto-creates orders
    assert send(office, "orders", b"without an ID").outcome == SendOutcome.ROUTED
    flush(store)
    store.close()
    copy_disk(tmp_path / "data", tmp_path / "crash")  # the disk at the crash:
    shutil.rmtree(tmp_path / "crash" / "bindings")  # the journal written, the queue's record not
    copy_disk(tmp_path / "bindings-before", tmp_path / "crash" / "bindings")

    office, store = open_office(tmp_path / "crash")
    assert "orders" not in office.queues
    assert send(office, "orders", b"the one", dup="d-1").outcome == SendOutcome.ROUTED  # the resend is taken
    flush(store)
    store.close()
    office, store = open_office(tmp_path / "crash")  # and the forgotten ID stays forgotten
    assert drain(office, "orders") == [b"the one"]
    assert send(office, "orders", b"the one", dup="d-1").outcome == SendOutcome.DUPLICATE
    store.close()
