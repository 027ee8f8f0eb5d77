"""Producer flow control per queue (issue 9, bug 11): a subscriber that stops reading slows the
producer only for a while; then its queue pages and everyone else keeps flowing."""

from __future__ import annotations

import threading

from office_harness import ManualClock, Sink, make_office, msg

from petrel.core.flow import STALL_MS
from petrel.core.message import Message, RoutingType
from petrel.core.postoffice import PostOffice
from petrel.core.queue import Consumer
from petrel.core.settings import AddressSettingsRepository
from petrel.storage.file_store import FileStore

ANY, MULTI = RoutingType.ANYCAST, RoutingType.MULTICAST
LIMIT = 10_000


def file_office(path):
    store = FileStore(path, file_size=256 * 1024)
    clock = ManualClock()
    office = PostOffice(store, AddressSettingsRepository({}), clock, clock=clock)
    office.recover(store.recover())
    office.limits.flow_control_bytes = LIMIT
    return office, store, clock


def flush(store):
    done = threading.Event()
    store.sync(done.set)
    assert done.wait(10)


def publish(office, i):
    m = Message(id=office.store.next_id(), address="t", body=b"%06d" % i + b"x" * 994, timestamp=office.now())
    return office.send(m, MULTI)


def test_a_stalled_subscriber_pages_while_the_producer_and_a_healthy_one_keep_flowing(tmp_path):
    office, store, clock = file_office(tmp_path)
    address, _ = office.ensure_address_for("t", MULTI)
    healthy = office.subscribe_multicast(address, filter=None)
    stalled = office.subscribe_multicast(address, filter=None)
    got = []
    healthy.add_consumer(Consumer(healthy, lambda c, ref: got.append(int(ref.message.body[:6])), auto_ack=True))
    stuck = Consumer(stalled, Sink(), auto_ack=True)
    stuck.paused = True  # its socket is full: nothing more can be written to it
    stalled.add_consumer(stuck)

    i = 0
    while not publish(office, i).throttled:
        i += 1
        assert i < 1000
    woken = []
    office.limits.wait_for_space("t", lambda: woken.append(True))
    assert not woken and not office.space_for("t")
    clock.advance(STALL_MS)  # the stalled queue took nothing: it stops holding the producer back
    assert woken and office.space_for("t")
    assert stalled.stalled

    for j in range(i + 1, 5000):
        assert not publish(office, j).throttled
    assert got == list(range(5000))
    assert stalled.paging and stalled.memory_bytes <= 2 * LIMIT  # its backlog pages: memory bounded
    assert stalled.message_count == 5000

    # the stalled one reads again: everything, in order, from memory then pages
    flush(store)
    stuck.resume()
    seen = []
    for _ in range(1000):
        seen.extend(int(ref.message.body[:6]) for ref in stuck.sink.got)
        stuck.sink.got.clear()
        if stalled.message_count == 0:
            break
        flush(store)
        office.depage(stalled)
    assert seen == list(range(5000))
    assert not stalled.paging
    # caught up: it may throttle again
    assert not stalled.stalled or not office.limits.behind(address)
    store.close()


def test_a_slow_but_moving_consumer_of_a_queue_keeps_its_producer_throttled():
    office, clock = make_office()
    office.limits.flow_control_bytes = LIMIT
    office.create_queue("q", "q", ANY)
    sink = Sink()
    queue = office.queues["q"]
    queue.add_consumer(Consumer(queue, sink, window=5))
    n = 0
    while not office.send(msg(office, "q", b"x" * 1000), ANY).throttled:
        n += 1
        assert n < 100
    for _ in range(20):  # a producer that has not seen the pause yet
        office.send(msg(office, "q", b"x" * 1000), ANY)
    for _ in range(5):  # it takes a message in each period: still the producer's pace-setter
        queue.acknowledge(sink.got.pop(0))
        clock.advance(STALL_MS)
        assert not queue.stalled and not office.space_for("q")
    clock.advance(STALL_MS)  # then nothing at all for a while: stalled
    assert queue.stalled and office.space_for("q")
