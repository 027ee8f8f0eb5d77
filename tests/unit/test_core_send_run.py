"""`PostOffice.send_run`: a run of sends to one address routed in one pass, as separate sends
would route it, or not at all (None) when one of them could go differently."""

from __future__ import annotations

import pytest

from petrel.core.message import DUPLICATE_ID, RoutingType
from petrel.core.postoffice import SendOutcome
from petrel.core.queue import Consumer
from petrel.storage.store import NullStore

from office_harness import make_office, msg

MULTI = RoutingType.MULTICAST


class Journal(NullStore):
    """A NullStore that remembers the message records it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.added = []

    def add_message(self, tx_id, message, refs) -> None:
        self.added.append((tx_id, message.body, list(refs)))


def _two_subscribers(office, *, durable: bool = False):
    """Two subscriptions of ``news`` whose consumers write what they get, in order, to one log."""
    address, _ = office.ensure_address_for("news", MULTI)
    log = []
    queues = []
    for name in ("a", "b"):
        queue = office.create_queue(f"news.{name}", "news", MULTI, durable=durable)
        queue.add_consumer(Consumer(queue, lambda c, ref, name=name: log.append((name, ref.message.body)),
                                    auto_ack=True))
        queues.append(queue)
    return queues, log


def _bodies(n: int) -> list[bytes]:
    return [str(i).encode() for i in range(n)]


def test_a_run_delivers_as_separate_sends_do():
    one, _ = make_office()
    queues1, log1 = _two_subscribers(one)
    for body in _bodies(5):
        assert one.send(msg(one, "news", body), MULTI).outcome == SendOutcome.ROUTED
    run, _ = make_office()
    queues2, log2 = _two_subscribers(run)
    result = run.send_run([msg(run, "news", body) for body in _bodies(5)], MULTI)
    assert result is not None and result.outcome == SendOutcome.ROUTED and result.queues == 2
    assert log2 == log1  # the same deliveries in the same order (message by message over both)
    assert run.messages_routed == one.messages_routed == 5
    for q1, q2 in zip(queues1, queues2):
        assert (q2.messages_added, q2.messages_acked, q2.next_seq) == (q1.messages_added, q1.messages_acked, q1.next_seq)


def test_a_run_to_one_queue_keeps_its_order_and_waits_for_credit():
    office, _ = make_office()
    address, _ = office.ensure_address_for("t", MULTI)
    queue = office.create_queue("t.sub", "t", MULTI)
    got = []
    queue.add_consumer(Consumer(queue, lambda c, ref: got.append(ref), window=3))
    assert office.send_run([msg(office, "t", body) for body in _bodies(10)], MULTI).outcome == SendOutcome.ROUTED
    assert [r.message.body for r in got] == _bodies(3)
    assert queue.message_count == 10
    for ref in list(got):
        queue.acknowledge(ref)
    assert [r.message.body for r in got] == _bodies(6)


def test_durable_messages_are_journalled_one_record_each_in_order():
    office, _ = make_office()
    office.store = store = Journal()
    queues, _ = _two_subscribers(office, durable=True)
    messages = [msg(office, "news", body, durable=True) for body in _bodies(3)]
    office.send_run(messages, MULTI)
    assert [(tx, body) for tx, body, _ in store.added] == [(0, b) for b in _bodies(3)]
    assert all(len(refs) == 2 for _, _, refs in store.added)


def test_a_run_nobody_subscribes_to_is_unrouted():
    office, _ = make_office()
    office.ensure_address_for("nobody", MULTI)
    result = office.send_run([msg(office, "nobody") for _ in range(4)], MULTI)
    assert result.outcome == SendOutcome.UNROUTED
    assert office.unrouted == 4


def test_expiry_delay_applies_to_each_message():
    office, clock = make_office({"news": {"expiry_delay": 5000}})
    _two_subscribers(office)
    messages = [msg(office, "news") for _ in range(3)]
    office.send_run(messages, MULTI)
    assert [m.expiration for m in messages] == [clock.now + 5000] * 3


@pytest.mark.parametrize("policy", ["FAIL", "BLOCK", "DROP", "PAGE"])
def test_no_room_for_the_whole_run_sends_nothing(policy):
    office, _ = make_office({"news": {"max_size_bytes": 2000, "address_full_policy": policy}})
    address, _ = office.ensure_address_for("news", MULTI)
    queue = office.create_queue("news.idle", "news", MULTI)  # nobody consumes: the run would stay
    messages = [msg(office, "news", b"x" * 100) for _ in range(10)]  # over 2,000 bytes with overheads
    assert office.send_run(messages, MULTI) is None
    assert queue.message_count == 0 and queue.next_seq == 1 and office.messages_routed == 0
    assert office.send_run(messages[:2], MULTI) is not None  # room for these
    assert queue.message_count == 2


def test_what_could_go_differently_is_left_to_separate_sends():
    office, _ = make_office()
    _two_subscribers(office)
    assert office.send_run([msg(office, "news"), msg(office, "other")], MULTI) is None
    assert office.send_run([msg(office, "news"), msg(office, "news", properties={DUPLICATE_ID: "d"})],
                           MULTI) is None
    filtered, _ = make_office()
    filtered.ensure_address_for("news", MULTI)
    filtered.create_queue("news.eu", "news", MULTI, filter="region = 'eu'")
    assert filtered.send_run([msg(filtered, "news"), msg(filtered, "news", properties={"region": "eu"})],
                             MULTI) is None
    pattern, _ = make_office()
    pattern.ensure_address_for("news", MULTI)
    with pattern.names_from_elsewhere():  # (as MQTT makes a pattern address)
        pattern.ensure_address_for("news.#", MULTI)
        pattern.create_queue("all.eu", "news.#", MULTI, filter="region = 'eu'")
    assert pattern.send_run([msg(pattern, "news"), msg(pattern, "news", properties={"region": "eu"})],
                            MULTI) is None
    assert office.messages_routed == filtered.messages_routed == pattern.messages_routed == 0


def test_sequence_numbers_of_a_durable_queue_stay_reserved_ahead_of_a_run():
    from petrel.core.recovery import SEQ_RESERVATION

    office, _ = make_office()
    office.store = store = Journal()
    reserved = []
    store.reserve_queue_seq = lambda queue_id, upto: reserved.append(upto)
    office.ensure_address_for("d", MULTI)
    queue = office.create_queue("d.sub", "d", MULTI, durable=True)
    for size in (3, SEQ_RESERVATION, 5):  # the second run crosses the reservation
        office.send_run([msg(office, "d", durable=True) for _ in range(size)], MULTI)
    seqs = [refs[0][1] for _, _, refs in store.added]
    assert seqs == list(range(seqs[0], seqs[0] + SEQ_RESERVATION + 8))
    assert reserved and queue.seq_reserved == reserved[-1] >= seqs[-1]
