"""The drainer's recovery in stages (core/staged.py): messages built while earlier ones are taken.

A directory recovered with `FileStore.recover(defer=True)` and admitted a few references at a
time, while a consumer takes (and acknowledges) the queue's head between admissions, must hand
out exactly what a full recovery hands out: per queue the same messages in the same order
(priorities first, scheduled ones released with their time), the same delivery counts.
"""

from __future__ import annotations

import shutil
import threading

from petrel.core.message import Message, RoutingType
from petrel.core.postoffice import PostOffice
from petrel.core.queue import Consumer
from petrel.core.settings import AddressSettingsRepository
from petrel.storage.file_store import FileStore

from office_harness import ManualClock, Sink

ANY, MULTI = RoutingType.ANYCAST, RoutingType.MULTICAST
PRIORITIES = [4, 4, 9, 0, 4, 7, 9, 4, 1, 4, 12, -3]  # out of range ones count as 9 and 0


def open_office(path, *, defer=False):
    store = FileStore(path, file_size=256 * 1024)
    clock = ManualClock()
    office = PostOffice(store, AddressSettingsRepository({}), clock, clock=clock)
    office.recover(store.recover(defer=defer))
    office.ensure_defaults()
    return office, store, clock


def send(office, address, body, rt=ANY, **kw):
    m = Message(id=office.store.next_id(), address=address, body=body, durable=True, timestamp=office.now(), **kw)
    return office.send(m, rt)


def flush(store):
    done = threading.Event()
    store.sync(done.set)
    assert done.wait(10)


def fill(path):
    """Queues of every kind the staging meets: a plain one (priorities, scheduled messages, a
    delivery count), two subscriptions sharing messages (one acknowledged on one of them), a
    last-value queue (not staged), and an empty one."""
    office, store, clock = open_office(path)
    office.create_queue("lvq", "lvq", ANY, attributes={"last_value_key": "k"})
    office.create_queue("empty", "empty", ANY)
    addr, _ = office.ensure_address_for("news", MULTI)
    office.subscribe_multicast(addr, filter=None, client_id="c", subscription="a")
    office.subscribe_multicast(addr, filter=None, client_id="c", subscription="b")
    for i in range(60):
        p = PRIORITIES[i % len(PRIORITIES)]
        later = clock.now + 600_000 + i if i % 7 == 3 else 0  # scheduled ten minutes on
        send(office, "q", f"q{i}".encode(), priority=p, scheduled=later)
        send(office, "news", f"n{i}".encode(), MULTI, priority=p)
        send(office, "lvq", f"l{i}".encode(), properties={"k": f"v{i % 5}"})
    q = office.queues["q"]
    sink = Sink()
    c = Consumer(q, sink, window=3)
    q.add_consumer(c)
    q.cancel(sink.got[0])  # a delivery count: its record is built at once, and merged in order
    q.cancel(sink.got[2])
    q.remove_consumer(c)
    b = office.queues["c.b"]
    sink = Sink()
    c = Consumer(b, sink, window=2)
    b.add_consumer(c)
    b.acknowledge(sink.got[0])  # an acknowledged copy: the message is built at once for c.a
    b.remove_consumer(c)
    flush(store)
    store.close()


def drain_all(office, queue, admit=None):
    """What a migration takes from `queue`: scheduled ones released, everything acknowledged as
    it comes, a window of 2; `admit()` between deliveries. (body, delivery count, scheduled)."""
    staged = office.staged
    if staged is not None:
        staged.moving(queue.id)
    queue.unschedule_all()
    sink = Sink()
    consumer = Consumer(queue, sink, window=2)
    queue.add_consumer(consumer)
    taken = 0
    for _ in range(10_000):
        if queue.message_count == 0:
            break
        while taken < len(sink.got):  # (an acknowledgement may deliver the next one)
            queue.acknowledge(sink.got[taken], consumer=consumer)
            taken += 1
        if admit is not None:
            admit()
        queue.deliver()
    queue.remove_consumer(consumer)
    return [(r.message.body, r.delivery_count, r.message.scheduled) for r in sink.got]


def test_staged_admission_hands_out_what_a_full_recovery_does(tmp_path):
    fill(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    full, store, _ = open_office(tmp_path / "a")
    assert full.staged is None
    expected = {name: drain_all(full, full.queues[name]) for name in ("q", "c.a", "c.b", "lvq", "empty")}
    store.close()

    office, store, _ = open_office(tmp_path / "b", defer=True)
    staged = office.staged
    assert staged is not None and staged.pending > 0
    # counted before they are built: what the migration's total and its "queue empty" rely on
    assert {n: office.queues[n].message_count for n in expected} == {n: len(v) for n, v in expected.items()}
    assert office.queues["lvq"].recovering == 0  # a last-value queue is recovered whole
    # three at a time, and no more while the queue holds four available: the consumer always
    # takes from a queue whose later references are not built yet
    got = {name: drain_all(office, office.queues[name], admit=lambda: staged.admit(3, ahead=4))
           for name in ("q", "c.a", "c.b", "lvq", "empty")}
    assert staged.pending == 0 and staged.admit(3) == 0
    store.close()
    assert got == expected
    q = expected["q"]
    assert len(q) == 60 and len(expected["c.a"]) == 60 and len(expected["c.b"]) == 59
    # priority 9 (and 12) first, by seq, then the scheduled ones of that priority; then 7, ...
    top = [i for i in range(60) if PRIORITIES[i % len(PRIORITIES)] >= 9]
    assert [b for b, _, _ in q[:len(top)]] == [f"q{i}".encode() for i in top if i % 7 != 3] + \
        [f"q{i}".encode() for i in top if i % 7 == 3]
    assert any(count for _, count, _ in q) and any(when for _, _, when in q)


def test_a_restart_after_a_partly_staged_drain_loses_nothing(tmp_path):
    """Killed with references still unbuilt: they were never removed, the next recovery has them."""
    fill(tmp_path)
    office, store, _ = open_office(tmp_path, defer=True)
    q = office.queues["q"]
    office.staged.moving(q.id)
    assert office.staged.admit(5) == 5
    assert office.staged.admit(100, ahead=5) == 0  # the queue holds what it may hold ahead
    sink = Sink()
    consumer = Consumer(q, sink, window=100)
    q.add_consumer(consumer)
    for ref in list(sink.got):
        q.acknowledge(ref, consumer=consumer)
    assert len(sink.got) == 5 and q.message_count == 55
    flush(store)
    store.close()
    office2, store2, _ = open_office(tmp_path)
    assert office2.queues["q"].message_count == 55
    store2.close()
