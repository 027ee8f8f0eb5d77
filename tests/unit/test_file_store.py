"""The post office on a real FileStore: what a restart gives back."""

from __future__ import annotations

import threading

from petrel.core.message import DUPLICATE_ID, Message, RoutingType
from petrel.core.postoffice import PostOffice, SendOutcome
from petrel.core.queue import Consumer
from petrel.core.settings import AddressSettingsRepository
from petrel.core.transaction import Transaction
from petrel.storage.file_store import FileStore

from office_harness import ManualClock, Sink

ANY, MULTI = RoutingType.ANYCAST, RoutingType.MULTICAST


def open_office(path, settings=None):
    store = FileStore(path, file_size=256 * 1024)
    clock = ManualClock()
    office = PostOffice(store, AddressSettingsRepository(settings or {}), clock, clock=clock)
    office.recover(store.recover())
    office.ensure_defaults()
    return office, store


def flush(store):
    done = threading.Event()
    store.sync(done.set)
    assert done.wait(10)


def send(office, address, body, rt=ANY, **kw):
    m = Message(id=office.store.next_id(), address=address, body=body, durable=True, timestamp=office.now(), **kw)
    return office.send(m, rt)


def test_restart_rebuilds_queues_order_priorities_and_delivery_counts(tmp_path):
    office, store = open_office(tmp_path)
    for i, p in enumerate([4, 4, 9, 0, 4]):
        send(office, "q", f"m{i}".encode(), priority=p)
    send(office, "gone", b"x")
    sink = Sink()
    c = Consumer(office.queues["q"], sink, window=2)
    office.queues["q"].add_consumer(c)
    first, second = sink.got  # m2 (prio 9), then m0
    office.queues["q"].acknowledge(first)
    office.queues["q"].cancel(second)  # delivery count 1, back at head
    office.queues["q"].remove_consumer(c)
    office.delete_queue("gone")
    flush(store)
    store.close()

    office2, store2 = open_office(tmp_path)
    q = office2.queues["q"]
    assert "gone" not in office2.queues
    refs = list(q.iter_refs())
    assert [r.message.body for r in refs] == [b"m0", b"m1", b"m4", b"m3"]
    counts = {r.message.body: r.delivery_count for r in refs}
    assert counts[b"m0"] >= 1
    # sequence numbers keep growing after a restart
    before = max(r.seq for r in refs)
    send(office2, "q", b"new")
    assert max(r.seq for r in q.iter_refs()) > before
    store2.close()


def test_transactions_and_duplicate_ids_survive_restart(tmp_path):
    office, store = open_office(tmp_path)
    tx = Transaction()
    office.send(Message(id=store.next_id(), address="t", body=b"committed", durable=True), ANY, tx)
    office.commit(tx)
    tx2 = Transaction()
    office.send(Message(id=store.next_id(), address="t", body=b"rolled", durable=True), ANY, tx2)
    office.rollback(tx2)
    assert send(office, "d", b"1", properties={DUPLICATE_ID: "x"}).outcome == SendOutcome.ROUTED
    flush(store)
    store.close()
    office2, store2 = open_office(tmp_path)
    assert [r.message.body for r in office2.queues["t"].iter_refs()] == [b"committed"]
    assert send(office2, "d", b"2", properties={DUPLICATE_ID: "x"}).outcome == SendOutcome.DUPLICATE
    assert office2.queues["d"].message_count == 1
    store2.close()


def test_durable_subscription_and_ids_survive_restart(tmp_path):
    office, store = open_office(tmp_path)
    addr, _ = office.ensure_address_for("news", MULTI)
    office.subscribe_multicast(addr, filter="kind = 'a'", client_id="c", subscription="s")
    send(office, "news", b"a", MULTI, properties={"kind": "a"})
    send(office, "news", b"b", MULTI, properties={"kind": "b"})
    last_id = store.next_id()
    flush(store)
    store.close()
    office2, store2 = open_office(tmp_path)
    q = office2.queues["c.s"]
    assert q.selector.text == "kind = 'a'"
    assert [r.message.body for r in q.iter_refs()] == [b"a"]
    assert store2.next_id() > last_id
    store2.close()


def test_diverts_queue_attributes_and_last_values_survive_restart(tmp_path):
    office, store = open_office(tmp_path)
    office.create_queue("lvq", "lvq", ANY, attributes={"last_value_key": "k", "exclusive": True})
    office.create_queue("copy", "copy", ANY)
    office.create_divert("d", "lvq", "copy", filter="k = 'a'")
    send(office, "lvq", b"a1", properties={"k": "a"})
    send(office, "lvq", b"b1", properties={"k": "b"})
    flush(store)
    store.close()
    office2, store2 = open_office(tmp_path)
    q = office2.queues["lvq"]
    assert q.last_value_key == "k" and q.exclusive
    assert office2.diverts["d"].forwarding_address == "copy"
    send(office2, "lvq", b"a2", properties={"k": "a"})
    assert sorted(r.message.body for r in q.iter_refs()) == [b"a2", b"b1"]
    assert [r.message.body for r in office2.queues["copy"].iter_refs()] == [b"a1", b"a2"]
    store2.close()


def test_paging_keeps_order_bounds_memory_and_survives_restart(tmp_path):
    settings = {"big": {"max_size_bytes": 64 * 1024}}
    office, store = open_office(tmp_path, settings)
    office.create_queue("big", "big", ANY)
    q = office.queues["big"]
    for i in range(2000):
        send(office, "big", f"{i:06d}".encode() + b"x" * 500)
    assert q.paging
    assert q.memory_bytes <= 64 * 1024 + 2048
    assert q.message_count == 2000
    flush(store)
    # consume a few hundred, then "crash" (close without acking the rest) and restart
    sink = Sink()
    c = Consumer(q, sink, window=10_000)
    q.add_consumer(c)
    taken = 0
    while taken < 300:
        ref = sink.got[taken]
        q.acknowledge(ref)
        taken += 1
    flush(store)
    store.close()
    office2, store2 = open_office(tmp_path, settings)
    q2 = office2.queues["big"]
    assert q2.message_count == 1700
    sink2 = Sink()
    c2 = Consumer(q2, sink2, window=100_000)
    q2.add_consumer(c2)
    n = 0
    deadline = 0
    while n < 1700 and deadline < 2000:
        while n < len(sink2.got):
            q2.acknowledge(sink2.got[n])
            n += 1
        deadline += 1
        if n < 1700 and n == len(sink2.got):
            flush(store2)
            office2.depage(q2)
    bodies = [int(r.message.body[:6]) for r in sink2.got]
    assert bodies == list(range(300, 2000))
    assert not q2.paging
    store2.close()
    assert not list((tmp_path / "paging").glob("*/*.page")) or all(
        p.stat().st_size == 0 for p in (tmp_path / "paging").glob("*/*.page"))


def test_a_slow_topic_subscriber_pages_while_a_fast_one_reads_from_memory(tmp_path):
    office, store = open_office(tmp_path, {"feed": {"max_size_bytes": 64 * 1024}})
    address, _ = office.ensure_address_for("feed", MULTI)
    fast = office.subscribe_multicast(address, filter=None, client_id="c", subscription="fast")
    slow = office.subscribe_multicast(address, filter=None, client_id="c", subscription="slow")
    sink = Sink()
    fast.add_consumer(Consumer(fast, lambda c, ref: None, auto_ack=True))
    for i in range(1000):
        send(office, "feed", f"{i:04d}".encode() + b"y" * 500, MULTI)
    assert slow.paging and not fast.paging
    assert fast.message_count == 0 and fast.messages_added == 1000
    assert slow.message_count == 1000
    flush(store)
    # the slow one catches up later, in order, from memory and pages
    slow.add_consumer(Consumer(slow, sink, window=100_000))
    seen = []
    for _ in range(200):
        while sink.got:
            ref = sink.got.pop(0)
            seen.append(int(ref.message.body[:4]))
            slow.acknowledge(ref)
        if slow.message_count == 0:
            break
        flush(store)
        office.depage(slow)
    assert seen == list(range(1000))
    assert slow.message_count == 0 and not slow.paging
    store.close()
