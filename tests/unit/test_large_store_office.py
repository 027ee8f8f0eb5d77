"""The post office and large-message files: every way a message ends removes its file, and
only once the store has made the end durable."""

from __future__ import annotations

import pytest

from petrel.core import operations
from petrel.core.message import DUPLICATE_ID, ORIGINAL_ADDRESS, Message, RoutingType
from petrel.core.postoffice import PostOffice
from petrel.core.settings import AddressSettingsRepository
from petrel.core.transaction import Transaction
from petrel.storage.large import LargeMessageStore
from petrel.storage.store import NullStore, Recovered, RecoveredRef

from office_harness import ManualClock, consume

ANY, MULTI = RoutingType.ANYCAST, RoutingType.MULTICAST


class SlowDisk(NullStore):
    """A store whose syncs complete only when the test says so; it logs what was appended."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []
        self.waiting: list[tuple[int, object]] = []  # (ops appended before the sync, callback)

    def sync(self, done, *, transactional: bool = False) -> None:
        self.waiting.append((len(self.ops), done))

    def flush(self) -> list[tuple]:
        """Complete every sync; returns the ops each covered (the last one's)."""
        waiting, self.waiting = self.waiting, []
        covered = []
        for n, done in waiting:
            covered = self.ops[:n]
            done()
        return covered

    def add_message(self, tx_id, message, refs):
        self.ops.append(("add", tx_id, message.id))

    def delete_message(self, tx_id, message_id):
        self.ops.append(("delete", tx_id, message_id))

    def ack(self, tx_id, message_id, queue_id):
        self.ops.append(("ack", tx_id, message_id))

    def commit(self, tx_id):
        self.ops.append(("commit", tx_id))


@pytest.fixture
def env(tmp_path):
    store = SlowDisk()
    large = LargeMessageStore(tmp_path / "large-messages", sync=False)
    clock = ManualClock()

    def make(settings: dict | None = None) -> PostOffice:
        office = PostOffice(store, AddressSettingsRepository(settings or {}), clock, clock=clock, large=large)
        office.ensure_defaults()
        return office

    return make, store, large, clock


def big(office: PostOffice, large: LargeMessageStore, address: str, size: int = 200_000, **kw) -> Message:
    mid = office.store.next_id()
    body = large.write(mid, [bytes([mid % 256]) * size], durable=False)
    kw.setdefault("durable", True)
    return Message(id=mid, address=address, body=b"", large=body, timestamp=office.now(), **kw)


def files(large: LargeMessageStore) -> list[str]:
    return large.names()


def test_ack_deletes_the_file_only_after_the_delete_is_durable(env):
    make, store, large, _ = env
    office = make()
    m = big(office, large, "q")
    office.send(m, ANY)
    assert files(large) == [f"{m.id}.msg"]
    c, sink = consume(office, "q")
    office.queues["q"].acknowledge(sink.got[0])
    assert files(large) == [f"{m.id}.msg"]  # the journal delete is not on disk yet
    covered = store.flush()
    assert ("delete", 0, m.id) in covered
    assert files(large) == []


def test_multicast_file_stays_until_every_queue_acknowledged(env):
    make, store, large, _ = env
    office = make()
    office.create_queue("s1", "t", MULTI)
    office.create_queue("s2", "t", MULTI)
    office.send(big(office, large, "t"), MULTI)
    _, sink1 = consume(office, "s1")
    _, sink2 = consume(office, "s2")
    office.queues["s1"].acknowledge(sink1.got[0])
    store.flush()
    assert len(files(large)) == 1
    office.queues["s2"].acknowledge(sink2.got[0])
    store.flush()
    assert files(large) == []


def test_non_durable_message_file_goes_too(env):
    make, store, large, _ = env
    office = make()
    office.send(big(office, large, "q", durable=False), ANY)
    _, sink = consume(office, "q", auto_ack=True)
    assert len(sink.got) == 1
    store.flush()
    assert files(large) == []


def test_unrouted_message_file_goes(env):
    make, store, large, _ = env
    office = make()
    office.create_address("nowhere", {MULTI})
    office.send(big(office, large, "nowhere"), MULTI)
    store.flush()
    assert files(large) == []


def test_duplicate_message_file_goes(env):
    make, store, large, _ = env
    office = make()
    first = big(office, large, "q", properties={DUPLICATE_ID: "d1"})
    office.send(first, ANY)
    dup = big(office, large, "q", properties={DUPLICATE_ID: "d1"})
    office.send(dup, ANY)
    store.flush()
    assert files(large) == [first.large.name]


def test_expiry_moves_a_linked_copy_and_the_original_name_goes(env):
    make, store, large, clock = env
    office = make({"#": {"expiry_address": "ExpiryQueue"}})
    m = big(office, large, "q", expiration=clock.now + 100)
    office.send(m, ANY)
    clock.advance(200)
    assert office.expire_scan() == 1
    store.flush()
    names = files(large)
    assert len(names) == 1 and names != [f"{m.id}.msg"]  # the copy's own name
    _, sink = consume(office, "ExpiryQueue")
    copy = sink.got[0].message
    assert copy.large is not None and copy.large.size == 200_000
    assert copy.properties[ORIGINAL_ADDRESS] == "q"
    assert large.read(copy.large) == bytes([m.id % 256]) * 200_000
    office.queues["ExpiryQueue"].acknowledge(sink.got[0])
    store.flush()
    assert files(large) == []


def test_expiry_without_an_expiry_address_drops_the_file(env):
    make, store, large, clock = env
    office = make({"#": {"expiry_address": ""}})
    office.send(big(office, large, "q", expiration=clock.now + 10), ANY)
    clock.advance(20)
    office.expire_scan()
    store.flush()
    assert files(large) == []


def test_dead_letter_after_max_attempts_then_dlq_consumed(env):
    make, store, large, _ = env
    office = make({"#": {"max_delivery_attempts": 2, "dead_letter_address": "DLQ"}})
    office.send(big(office, large, "q"), ANY)
    _, sink = consume(office, "q")
    queue = office.queues["q"]
    queue.cancel(sink.got[0])
    queue.cancel(sink.got[1])
    store.flush()
    assert office.queues["DLQ"].message_count == 1
    assert len(files(large)) == 1
    # the move happened in one store transaction; the file went only after its commit
    assert any(op[0] == "commit" for op in store.ops)
    _, dsink = consume(office, "DLQ")
    office.queues["DLQ"].acknowledge(dsink.got[0])
    store.flush()
    assert files(large) == []


def test_transactional_ack_deletes_after_commit_is_durable(env):
    make, store, large, _ = env
    office = make()
    office.send(big(office, large, "q"), ANY)
    _, sink = consume(office, "q")
    tx = Transaction("t")
    tx.hold_ack(sink.got[0])
    office.commit(tx)
    assert len(files(large)) == 1
    covered = store.flush()
    assert covered[-1][0] == "commit"
    assert files(large) == []


def test_rolled_back_send_drops_its_file(env):
    make, store, large, _ = env
    office = make()
    tx = Transaction("t")
    office.send(big(office, large, "q"), ANY, tx)
    office.rollback(tx)
    store.flush()
    assert files(large) == []


def test_committed_send_keeps_its_file(env):
    make, store, large, _ = env
    office = make()
    tx = Transaction("t")
    office.send(big(office, large, "q"), ANY, tx)
    office.commit(tx)
    store.flush()
    assert len(files(large)) == 1
    assert office.queues["q"].message_count == 1


def test_purge_and_queue_deletion(env):
    make, store, large, _ = env
    office = make()
    for _ in range(3):
        office.send(big(office, large, "q", size=120_000), ANY)
    office.queues["q"].purge()
    office.create_queue("other", "other", ANY)
    office.send(big(office, large, "other"), ANY)
    consume(office, "other")  # one in delivery when the queue goes
    office.delete_queue("other")
    store.flush()
    assert files(large) == []


def test_ring_and_last_value_replacement_drop_the_old_file(env):
    make, store, large, _ = env
    office = make()
    office.create_queue("ring", "ring", ANY, attributes={"ring_size": 1})
    office.create_queue("lvq", "lvq", ANY, attributes={"last_value_key": "k"})
    office.send(big(office, large, "ring"), ANY)
    newest_ring = big(office, large, "ring")
    office.send(newest_ring, ANY)
    office.send(big(office, large, "lvq", properties={"k": "a"}), ANY)
    newest_lvq = big(office, large, "lvq", properties={"k": "a"})
    office.send(newest_lvq, ANY)
    store.flush()
    assert files(large) == sorted([newest_ring.large.name, newest_lvq.large.name])


def test_operations_remove_move_and_retry(env):
    make, store, large, _ = env
    office = make({"#": {"max_delivery_attempts": 1, "dead_letter_address": "DLQ"}})
    office.create_queue("a", "a", ANY)
    office.create_queue("b", "b", ANY)
    office.send(big(office, large, "a"), ANY)
    office.send(big(office, large, "a"), ANY)
    assert operations.remove(office, office.queues["a"], None) == 2
    store.flush()
    assert files(large) == []

    m = big(office, large, "a")
    office.send(m, ANY)
    assert operations.move(office, office.queues["a"], "b") == 1
    store.flush()
    names = files(large)
    assert len(names) == 1 and names != [m.large.name]
    _, sink = consume(office, "b")
    moved = sink.got[0].message
    assert large.read(moved.large) == bytes([m.id % 256]) * 200_000
    office.queues["b"].cancel(sink.got[0])  # one attempt allowed: to the DLQ
    store.flush()
    assert office.queues["DLQ"].message_count == 1
    assert operations.retry(office, office.queues["DLQ"]) == 1
    store.flush()
    assert len(files(large)) == 1
    assert office.queues["b"].message_count == 1


def test_divert_copy_gets_its_own_file(env):
    make, store, large, _ = env
    office = make()
    office.create_queue("src", "src", ANY)
    office.create_queue("dst", "dst", ANY)
    office.create_divert("d", "src", "dst", exclusive=False)
    office.send(big(office, large, "src"), ANY)
    store.flush()
    assert len(files(large)) == 2
    _, s1 = consume(office, "src", auto_ack=True)
    store.flush()
    assert len(files(large)) == 1
    _, s2 = consume(office, "dst", auto_ack=True)
    store.flush()
    assert files(large) == []


def test_exclusive_divert_keeps_only_the_copy(env):
    make, store, large, _ = env
    office = make()
    office.create_queue("dst", "dst", ANY)
    office.create_address("src", {ANY})
    office.create_divert("d", "src", "dst", exclusive=True)
    m = big(office, large, "src")
    office.send(m, ANY)
    store.flush()
    names = files(large)
    assert len(names) == 1 and names != [m.large.name]


def test_recovery_counts_holders_and_drops_dead_files(env):
    make, store, large, _ = env
    office = make()
    office.create_queue("s1", "t", MULTI)
    office.create_queue("s2", "t", MULTI)
    live = big(office, large, "t")
    dead = big(office, large, "t")
    q1, q2 = office.queues["s1"].id, office.queues["s2"].id
    store.flush()
    # a restarted broker: the same queues, the journal's messages
    fresh = PostOffice(store, AddressSettingsRepository({}), office.scheduler, clock=office.now, large=large)
    from petrel.storage.store import QueueRecord

    rec = Recovered(
        queues=[QueueRecord(q1, "s1", "t", int(MULTI)), QueueRecord(q2, "s2", "t", int(MULTI))],
        messages=[(live, [RecoveredRef(q1, 1), RecoveredRef(q2, 1)]), (dead, [RecoveredRef(999, 1)])],
    )
    fresh.recover(rec)
    store.flush()
    assert files(large) == [live.large.name]
    _, s1 = consume(fresh, "s1", auto_ack=True)
    store.flush()
    assert files(large) == [live.large.name]
    _, s2 = consume(fresh, "s2", auto_ack=True)
    store.flush()
    assert files(large) == []
