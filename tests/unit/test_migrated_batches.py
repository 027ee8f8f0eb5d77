"""A migration's batch (`PostOffice.receive_migrated`) on the real FileStore: its origin IDs in one
journal record that outlives restarts until the cache has evicted every one of them, every
message routed as `receive_forwarded(strict=True)` would, and a refusal that stops the batch
where it happened."""

from __future__ import annotations

import pytest

from petrel.core import duplicates
from petrel.core.duplicates import MIGRATION_CACHE_PREFIX, MIGRATION_ID_CACHE, DuplicateIdCache
from petrel.core.errors import RoutingError
from petrel.core.limits import AddressFull
from petrel.core.message import DUPLICATE_ID, Message, RoutingType
from petrel.core.remote import INSTANCE
from petrel.storage.file_store import FileStore

from office_harness import flush, open_file_office

ANY, MULTI = RoutingType.ANYCAST, RoutingType.MULTICAST
ORIGIN = "node-a"


open_office = open_file_office


def batch_of(office, numbers, address="orders", queue_id=7):
    return [(Message(office.store.next_id(), address, b"m%d" % n, {}, True, timestamp=office.now()),
             f"{ORIGIN}:{n}@{queue_id}", 0) for n in numbers]


def migrate(office, numbers, **kw):
    tx = office.store.begin()
    result = office.receive_migrated(batch_of(office, numbers, **kw), ["orders"], tx)
    office.commit_store(tx)
    flush(office.store)
    return result


def bodies(office, name="orders"):
    """What the queue holds, in sequence order, paged messages included (not consumed)."""
    return [h.message.body for h in office.browse_range(name, 0, 1 << 40, 1 << 20).messages]



# -- the cache's shared records ----------------------------------------------------------------


def test_a_shared_record_is_given_up_only_with_its_last_entry():
    cache = DuplicateIdCache("a", 4)
    assert [cache.add(f"x{i}", 1) for i in range(3)] == [None, None, None]  # record 1 holds x0..x2
    assert cache.add("y0", 2) is None
    assert cache.add("y1", 2) is None  # evicts x0: record 1 still holds x1, x2
    assert cache.add("y2", 2) is None  # evicts x1
    assert cache.add("y3", 2) == 1  # evicts x2, the last of record 1
    assert "x2" not in cache and all(f"y{i}" in cache for i in range(4))


def test_a_batch_larger_than_the_cache_keeps_its_own_record():
    cache = DuplicateIdCache("a", 2)
    assert [cache.add(f"x{i}", 5) for i in range(5)] == [None] * 5  # it evicts only its own entries
    assert "x4" in cache and "x3" in cache and "x0" not in cache


# -- the post office on a real store ---------------------------------------------------------------


def test_a_batch_is_routed_in_order_with_its_ids_in_one_record(tmp_path):
    office, store = open_office(tmp_path)
    office.create_queue("orders", "orders", ANY)
    assert migrate(office, range(100)) == (100, None)
    assert bodies(office) == [b"m%d" % n for n in range(100)]
    store.close()

    office, store = open_office(tmp_path)  # restart: the messages and the IDs are back
    assert bodies(office) == [b"m%d" % n for n in range(100)]
    cache = office.dup_caches[MIGRATION_CACHE_PREFIX + ORIGIN]
    assert all(f"{ORIGIN}:{n}@7" in cache for n in range(100))
    # the same batch again (a migration killed after the confirmations, run again): nothing twice
    assert migrate(office, range(100)) == (100, None)
    assert len(bodies(office)) == 100
    store.close()


def test_a_rerun_that_overlaps_keeps_only_what_is_new(tmp_path):
    office, store = open_office(tmp_path)
    office.create_queue("orders", "orders", ANY)
    migrate(office, range(0, 60))
    assert migrate(office, range(40, 120)) == (80, None)
    assert bodies(office) == [b"m%d" % n for n in range(120)]
    store.close()


def test_a_migration_cache_is_never_smaller_than_its_floor(tmp_path):
    office, store = open_office(tmp_path, {"#": {"id_cache_size": 10}})
    assert office.migration_cache_size(ORIGIN) == MIGRATION_ID_CACHE
    assert office.bridge_cache_size(ORIGIN) == 10  # a bridge's copies: as configured
    office, store = open_office(tmp_path / "big", {"#": {"id_cache_size": 3 * MIGRATION_ID_CACHE}})
    assert office.migration_cache_size(ORIGIN) == 3 * MIGRATION_ID_CACHE
    store.close()


def test_evicted_batches_leave_the_journal_and_the_cache_after_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(duplicates, "MIGRATION_ID_CACHE", 250)
    small = {MIGRATION_CACHE_PREFIX + "#": {"id_cache_size": 250}}
    office, store = open_office(tmp_path, small)
    office.create_queue("orders", "orders", ANY)
    for start in range(0, 1000, 100):
        migrate(office, range(start, start + 100))
    store.close()
    office, store = open_office(tmp_path, small)
    cache = office.dup_caches[MIGRATION_CACHE_PREFIX + ORIGIN]
    assert len(cache) == 250
    assert f"{ORIGIN}:999@7" in cache and f"{ORIGIN}:750@7" in cache
    assert f"{ORIGIN}:749@7" not in cache and f"{ORIGIN}:0@7" not in cache
    # the records of the batches evicted whole were deleted: a recovery finds three (700.., 800.., 900..)
    recovered = FileStore(tmp_path, file_size=256 * 1024)
    office.store.close()
    assert len({record_id for record_id, _, _ in recovered.recover().duplicate_ids}) == 3
    recovered.close()


def test_a_full_address_refuses_the_batch_and_keeps_none_of_its_ids(tmp_path):
    office, store = open_office(tmp_path, settings={"orders": {"max_size_bytes": 100,
                                                               "address_full_policy": "FAIL"}})
    office.create_queue("orders", "orders", ANY)
    assert migrate(office, range(10)) == (10, None)  # one store transaction: counted when it commits
    taken, refusal = migrate(office, range(10, 20))
    assert taken == 0 and isinstance(refusal, AddressFull)
    assert bodies(office) == [b"m%d" % n for n in range(10)]
    cache = office.dup_caches[MIGRATION_CACHE_PREFIX + ORIGIN]
    assert f"{ORIGIN}:9@7" in cache and f"{ORIGIN}:10@7" not in cache  # to be sent again later
    store.close()


def test_the_batches_of_one_read_count_against_a_full_address_before_they_commit(tmp_path):
    # each message counts about 202 bytes (Message.size): five fill 1,000
    office, store = open_office(tmp_path, settings={"orders": {"max_size_bytes": 1000,
                                                               "address_full_policy": "FAIL"}})
    office.create_queue("orders", "orders", ANY)
    tx = office.store.begin()
    pending: dict = {}
    taken, refusal = office.receive_migrated(batch_of(office, range(10)), ["orders"], tx, pending)
    assert taken == 5 and isinstance(refusal, AddressFull), (taken, refusal)
    assert pending == {"orders": (5 * batch_of(office, [0])[0][0].size, 5)}
    taken, refusal = office.receive_migrated(batch_of(office, range(5, 10)), ["orders"], tx, pending)
    assert taken == 0 and isinstance(refusal, AddressFull)  # a later batch of the same read too
    office.commit_store(tx)
    flush(office.store)
    assert bodies(office) == [b"m%d" % n for n in range(5)]
    store.close()


def test_a_batch_for_a_queue_that_is_gone_is_refused_whole(tmp_path):
    office, store = open_office(tmp_path)
    taken, refusal = migrate(office, range(5))
    assert taken == 0 and isinstance(refusal, RoutingError)
    assert MIGRATION_CACHE_PREFIX + ORIGIN not in office.dup_caches or \
        not len(office.dup_caches[MIGRATION_CACHE_PREFIX + ORIGIN])
    store.close()


@pytest.mark.parametrize("paged", [False, True])
def test_ids_of_a_paged_batch_wait_for_their_pages(tmp_path, paged):
    settings = {"orders": {"max_size_bytes": 2048, "address_full_policy": "PAGE"}} if paged else {}
    office, store = open_office(tmp_path, settings=settings)
    office.create_queue("orders", "orders", ANY)
    assert migrate(office, range(50)) == (50, None)
    assert migrate(office, range(50, 100)) == (50, None)  # after the first, committed: paged or not
    assert office.queues["orders"].paging is paged
    store.close()
    office, store = open_office(tmp_path, settings=settings)
    cache = office.dup_caches[MIGRATION_CACHE_PREFIX + ORIGIN]
    assert all(f"{ORIGIN}:{n}@7" in cache for n in range(100))
    assert migrate(office, range(100)) == (100, None)  # nothing twice, paged or not
    assert bodies(office) == [b"m%d" % n for n in range(100)]
    store.close()


# -- a producer's duplicate ID on migrated copies ------------------------------------------------------


def migrated_copy(office, n, queue_id, user_dup, address="news"):
    props = {DUPLICATE_ID: user_dup, INSTANCE: f"{ORIGIN}:{n}"}  # one send: one instance, a copy per queue
    return (Message(office.store.next_id(), address, b"m%d" % n, props, True, timestamp=office.now()),
            f"{ORIGIN}:{n}@{queue_id}", 0)


def test_the_copies_of_one_send_all_arrive_but_a_resend_accepted_first_makes_them_duplicates(tmp_path):
    """Seed 7005 of the chaos harness (drain): a producer's send to the node that died was in
    doubt; it resent it to the target, which accepted it; the drain then brought the original."""
    office, store = open_office(tmp_path)
    office.create_queue("sub1", "news", MULTI, durable=True)
    office.create_queue("sub2", "news", MULTI, durable=True)
    # two copies (two subscriptions) of send 1 move: both arrive
    for queue_id, name in ((11, "sub1"), (12, "sub2")):
        tx = office.store.begin()
        assert office.receive_migrated([migrated_copy(office, 1, queue_id, "p-1")], [name], tx) == (1, None)
        office.commit_store(tx)
    # the producer resent send 2 to this node first (both subscriptions got it) ...
    resend = Message(office.store.next_id(), "news", b"resend", {DUPLICATE_ID: "p-2"}, True, timestamp=office.now())
    office.send(resend, MULTI)
    # ... then the drain brings the original's copies: duplicates, taken (confirmed) but not kept
    for queue_id, name in ((11, "sub1"), (12, "sub2")):
        tx = office.store.begin()
        assert office.receive_migrated([migrated_copy(office, 2, queue_id, "p-2")], [name], tx) == (1, None)
        office.commit_store(tx)
    flush(store)
    assert bodies(office, "sub1") == [b"m1", b"resend"]
    assert bodies(office, "sub2") == [b"m1", b"resend"]
    # and a resend after the move is dropped too
    again = Message(office.store.next_id(), "news", b"again", {DUPLICATE_ID: "p-1"}, True, timestamp=office.now())
    assert office.send(again, MULTI).outcome.name == "DUPLICATE"
    store.close()
