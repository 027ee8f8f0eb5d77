"""A migration's batch routed in one pass (core/migrated.py) on the real FileStore: what a message
of it needs beyond the common case (a producer's duplicate ID, a delivery count, a priority, a
scheduled time, a full address) comes out as `receive_forwarded(strict=True)` would make it, in
order with the rest, and a restart finds the same."""

from __future__ import annotations

from petrel.core.duplicates import MIGRATION_CACHE_PREFIX
from petrel.core.limits import AddressFull
from petrel.core.message import DUPLICATE_ID, Message, RoutingType

from office_harness import consume, flush, open_file_office

ANY = RoutingType.ANYCAST
ORIGIN = "node-a"


def item(office, n, props=None, *, priority=4, scheduled=0, delivery_count=0, queue_id=7):
    message = Message(office.store.next_id(), "orders", b"m%d" % n, dict(props or {}), True, priority,
                      timestamp=office.now(), scheduled=scheduled)
    return message, f"{ORIGIN}:{n}@{queue_id}", delivery_count


def migrate(office, batch, keys=("orders",)):
    tx = office.store.begin()
    result = office.receive_migrated(batch, list(keys), tx, {})
    office.commit_store(tx)
    flush(office.store)
    return result


def held(office, name="orders"):
    """(body, seq, delivery count) of what the queue holds, in sequence order (not consumed)."""
    refs = office.browse_range(name, 0, 1 << 40, 1 << 20).messages
    return [(h.message.body, h.seq, h.delivery_count) for h in refs]


def test_messages_with_a_producers_duplicate_id_keep_their_place_among_the_others(tmp_path):
    office, store = open_file_office(tmp_path)
    office.create_queue("orders", "orders", ANY)
    batch = [item(office, n, {DUPLICATE_ID: f"p-{n}"} if n % 3 == 1 else None) for n in range(12)]
    assert migrate(office, batch) == (12, None)
    got = held(office)
    assert [body for body, _, _ in got] == [b"m%d" % n for n in range(12)]
    assert [seq for _, seq, _ in got] == sorted(seq for _, seq, _ in got)
    store.close()

    office, store = open_file_office(tmp_path)  # the same after a restart, and nothing twice on a rerun
    assert [body for body, _, _ in held(office)] == [b"m%d" % n for n in range(12)]
    again = [item(office, n, {DUPLICATE_ID: f"p-{n}"} if n % 3 == 1 else None) for n in range(12)]
    assert migrate(office, again) == (12, None)
    assert len(held(office)) == 12
    store.close()


def test_delivery_counts_priorities_and_scheduled_times_are_kept(tmp_path):
    office, store = open_file_office(tmp_path)
    office.create_queue("orders", "orders", ANY)
    later = office.now() + 60_000
    batch = [item(office, 0, delivery_count=3), item(office, 1, priority=9), item(office, 2, scheduled=later),
             item(office, 3)]
    assert migrate(office, batch) == (4, None)
    queue = office.queues["orders"]
    assert queue.scheduled_count == 1 and queue.message_count == 4
    assert [(body, count) for body, _, count in held(office)] == [(b"m0", 3), (b"m1", 0), (b"m2", 0), (b"m3", 0)]
    store.close()

    office, store = open_file_office(tmp_path)
    queue = office.queues["orders"]
    assert queue.scheduled_count == 1 and queue.message_count == 4
    assert [(body, count) for body, _, count in held(office)] == [(b"m0", 3), (b"m1", 0), (b"m2", 0), (b"m3", 0)]
    _, sink = consume(office, "orders")
    assert sink.bodies == [b"m1", b"m0", b"m3"]  # priority 9 first, then in order; m2 waits for its time
    assert [ref.delivery_count for ref in sink.got] == [0, 3, 0]  # m0 was delivered three times at its origin
    store.close()


def test_a_drop_address_that_is_full_drops_the_batch_and_keeps_its_ids(tmp_path):
    office, store = open_file_office(tmp_path, {"orders": {"max_size_messages": 2, "address_full_policy": "DROP"}})
    office.create_queue("orders", "orders", ANY)
    assert migrate(office, [item(office, n) for n in range(3)]) == (3, None)  # not full yet: all three
    assert migrate(office, [item(office, n) for n in range(3, 6)]) == (3, None)  # full: dropped, taken
    assert office.limits.dropped["orders"] == 3
    assert [body for body, _, _ in held(office)] == [b"m0", b"m1", b"m2"]
    cache = office.dup_caches[MIGRATION_CACHE_PREFIX + ORIGIN]
    assert all(f"{ORIGIN}:{n}@7" in cache for n in range(6))  # a rerun sends none of them again
    store.close()


def test_a_fail_address_full_before_the_batch_refuses_its_first_message(tmp_path):
    office, store = open_file_office(tmp_path, {"orders": {"max_size_messages": 2, "address_full_policy": "FAIL"}})
    office.create_queue("orders", "orders", ANY)
    assert migrate(office, [item(office, n) for n in range(2)]) == (2, None)
    taken, refusal = migrate(office, [item(office, n) for n in range(2, 5)])
    assert taken == 0 and isinstance(refusal, AddressFull)
    assert [body for body, _, _ in held(office)] == [b"m0", b"m1"]
    store.close()


def test_a_batch_for_two_queues_goes_to_both(tmp_path):
    office, store = open_file_office(tmp_path)
    office.create_queue("a", "orders", RoutingType.MULTICAST)
    office.create_queue("b", "orders", RoutingType.MULTICAST)
    assert migrate(office, [item(office, n) for n in range(4)], keys=("a", "b")) == (4, None)
    assert [body for body, _, _ in held(office, "a")] == [b"m%d" % n for n in range(4)]
    assert [body for body, _, _ in held(office, "b")] == [b"m%d" % n for n in range(4)]
    store.close()
