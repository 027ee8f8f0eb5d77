"""The post office without an event loop: routing, credit, acks, redelivery, expiry, transactions."""

from __future__ import annotations

import pytest

from petrel.core.message import DUPLICATE_ID, ORIGINAL_ADDRESS, ORIGINAL_QUEUE, RoutingType
from petrel.core.postoffice import RoutingError, SendOutcome
from petrel.core.transaction import Transaction, TransactionRolledBack

from office_harness import consume, make_office, msg

ANY, MULTI = RoutingType.ANYCAST, RoutingType.MULTICAST


def test_anycast_round_robin_between_consumers():
    office, _ = make_office()
    office.send(msg(office, "orders"), ANY)
    c1, s1 = consume(office, "orders", auto_ack=True)
    c2, s2 = consume(office, "orders", auto_ack=True)
    for i in range(4):
        office.send(msg(office, "orders", str(i).encode()), ANY)
    assert s1.bodies == [b"x", b"1", b"3"]
    assert s2.bodies == [b"0", b"2"]
    assert office.queues["orders"].message_count == 0


def test_multicast_copies_to_every_subscription_and_drops_without_one():
    office, _ = make_office()
    addr, _ = office.ensure_address_for("news", MULTI)
    assert office.send(msg(office, "news"), MULTI).outcome == SendOutcome.UNROUTED
    q1 = office.subscribe_multicast(addr, filter=None)
    q2 = office.subscribe_multicast(addr, filter="region = 'eu'")
    office.send(msg(office, "news", properties={"region": "eu"}), MULTI)
    office.send(msg(office, "news", properties={"region": "us"}), MULTI)
    assert q1.message_count == 2
    assert q2.message_count == 1


def test_credit_window_limits_unacked_and_ack_releases():
    office, _ = make_office()
    for i in range(5):
        office.send(msg(office, "q", bytes([i])), ANY)
    consumer, sink = consume(office, "q", window=2)
    assert len(sink.got) == 2
    office.queues["q"].acknowledge(sink.got[0])
    assert len(sink.got) == 3
    assert office.queues["q"].message_count == 4


def test_selector_consumer_skips_non_matching():
    from petrel.core.selector import compile_selector

    office, _ = make_office()
    for color in ["red", "blue", "red", "green"]:
        office.send(msg(office, "q", color.encode(), properties={"color": color}), ANY)
    _, sink = consume(office, "q", selector=compile_selector("color <> 'red'"), auto_ack=True)
    assert sink.bodies == [b"blue", b"green"]
    _, sink2 = consume(office, "q", auto_ack=True)
    assert sink2.bodies == [b"red", b"red"]


def test_priorities_highest_first_fifo_within():
    office, _ = make_office()
    for i, p in enumerate([1, 9, 4, 9, 0]):
        office.send(msg(office, "q", str(i).encode(), priority=p), ANY)
    _, sink = consume(office, "q", auto_ack=True)
    assert sink.bodies == [b"1", b"3", b"2", b"0", b"4"]


def test_nack_redelivers_in_order_then_dead_letters():
    office, _ = make_office({"q": {"max_delivery_attempts": 2}})
    office.send(msg(office, "q", b"a"), ANY)
    office.send(msg(office, "q", b"b"), ANY)
    consumer, sink = consume(office, "q", window=10)
    queue = office.queues["q"]
    a, b = sink.got
    queue.cancel(a)
    queue.cancel(b)
    assert [r.message.body for r in sink.got[2:]] == [b"a", b"b"]
    assert sink.got[2].delivery_count == 1
    queue.cancel(sink.got[2])
    dlq = office.queues["DLQ"]
    assert dlq.message_count == 1
    dead = next(dlq.iter_refs()).message
    assert dead.body == b"a"
    assert dead.properties[ORIGINAL_ADDRESS] == "q"
    assert dead.properties[ORIGINAL_QUEUE] == "q"
    assert queue.messages_killed == 1


def test_redelivery_delay_with_multiplier():
    office, clock = make_office({"q": {"redelivery_delay": 100, "redelivery_multiplier": 2.0}})
    office.send(msg(office, "q"), ANY)
    consumer, sink = consume(office, "q", window=10)
    office.queues["q"].cancel(sink.got[0])
    clock.advance(99)
    assert len(sink.got) == 1
    clock.advance(1)
    assert len(sink.got) == 2
    office.queues["q"].cancel(sink.got[1])
    clock.advance(199)
    assert len(sink.got) == 2
    clock.advance(1)
    assert len(sink.got) == 3


def test_scheduled_delivery_waits():
    office, clock = make_office()
    m = msg(office, "q", b"later")
    m.scheduled = clock.now + 500
    office.send(m, ANY)
    office.send(msg(office, "q", b"now"), ANY)
    _, sink = consume(office, "q", auto_ack=True)
    assert sink.bodies == [b"now"]
    assert office.queues["q"].scheduled_count == 1
    clock.advance(500)
    assert sink.bodies == [b"now", b"later"]


def test_expiry_moves_to_expiry_queue_or_drops():
    office, clock = make_office({"drop.#": {"expiry_address": ""}})
    office.send(msg(office, "q", b"old", expiration=clock.now + 10), ANY)
    office.send(msg(office, "drop.me", b"old", expiration=clock.now + 10), ANY)
    queue = office.queues["q"]
    clock.advance(10)
    assert office.expire_scan() == 2
    assert office.queues["ExpiryQueue"].message_count == 1
    assert queue.messages_expired == 1
    # expired at dispatch too
    office.send(msg(office, "q", b"old2", expiration=clock.now + 5), ANY)
    clock.advance(5)
    _, sink = consume(office, "q", auto_ack=True)
    assert sink.got == []
    assert office.queues["ExpiryQueue"].message_count == 2


def test_duplicate_detection_drops_and_counts():
    office, _ = make_office()
    r1 = office.send(msg(office, "q", properties={DUPLICATE_ID: "abc"}), ANY)
    r2 = office.send(msg(office, "q", properties={DUPLICATE_ID: "abc"}), ANY)
    assert (r1.outcome, r2.outcome) == (SendOutcome.ROUTED, SendOutcome.DUPLICATE)
    assert office.duplicates == 1
    assert office.queues["q"].message_count == 1


def test_duplicate_cache_is_circular():
    office, _ = make_office({"q": {"id_cache_size": 2}})
    for d in ["a", "b", "c"]:
        office.send(msg(office, "q", properties={DUPLICATE_ID: d}), ANY)
    assert office.send(msg(office, "q", properties={DUPLICATE_ID: "a"}), ANY).outcome == SendOutcome.ROUTED
    assert office.send(msg(office, "q", properties={DUPLICATE_ID: "c"}), ANY).outcome == SendOutcome.DUPLICATE


def test_transaction_commit_and_rollback():
    office, _ = make_office()
    tx = Transaction()
    office.send(msg(office, "q", b"1"), ANY, tx)
    assert office.queues["q"].message_count == 0
    office.commit(tx)
    assert office.queues["q"].message_count == 1
    consumer, sink = consume(office, "q", window=10)
    tx2 = Transaction()
    tx2.hold_ack(sink.got[0])
    office.rollback(tx2)
    assert len(sink.got) == 2 and sink.got[1].delivery_count == 1
    tx3 = Transaction()
    tx3.hold_ack(sink.got[1])
    office.commit(tx3)
    assert office.queues["q"].message_count == 0


def test_duplicate_in_transaction_makes_it_rollback_only():
    office, _ = make_office()
    office.send(msg(office, "q", properties={DUPLICATE_ID: "d"}), ANY)
    tx = Transaction()
    office.send(msg(office, "q", b"fresh"), ANY, tx)
    office.send(msg(office, "q", properties={DUPLICATE_ID: "d"}), ANY, tx)
    with pytest.raises(TransactionRolledBack):
        office.commit(tx)
    assert office.queues["q"].message_count == 1


def test_two_open_transactions_with_one_duplicate_id_never_both_commit():
    office, _ = make_office()
    first, second = Transaction(), Transaction()
    office.send(msg(office, "q", b"1", properties={DUPLICATE_ID: "d"}), ANY, first)
    office.send(msg(office, "q", b"2", properties={DUPLICATE_ID: "d"}), ANY, second)  # not known yet
    office.commit(first)
    with pytest.raises(TransactionRolledBack, match="duplicate message 'd'"):
        office.commit(second)
    assert office.queues["q"].message_count == 1


def test_consumer_close_redelivers_unacked():
    office, _ = make_office()
    office.send(msg(office, "q", b"a"), ANY)
    c1, s1 = consume(office, "q", window=10)
    office.queues["q"].remove_consumer(c1)
    _, s2 = consume(office, "q", window=10)
    assert s2.got[0].message.body == b"a" and s2.got[0].delivery_count == 1


def test_auto_create_off_is_a_clear_error():
    office, _ = make_office({"strict.#": {"auto_create_addresses": False}})
    with pytest.raises(RoutingError, match="does not exist"):
        office.send(msg(office, "strict.x"), ANY)


def test_auto_delete_of_auto_created_queue_when_drained_and_idle():
    office, _ = make_office()
    office.send(msg(office, "tmp"), ANY)
    consumer, sink = consume(office, "tmp", window=10)
    office.queues["tmp"].acknowledge(sink.got[0])
    office.queues["tmp"].remove_consumer(consumer)
    assert "tmp" not in office.queues
    assert "tmp" not in office.addresses


def test_durable_subscription_needs_client_id_and_is_reused():
    office, _ = make_office()
    addr, _ = office.ensure_address_for("t", MULTI)
    with pytest.raises(RoutingError, match="client-id"):
        office.subscribe_multicast(addr, filter=None, subscription="s")
    q = office.subscribe_multicast(addr, filter=None, client_id="c", subscription="s")
    assert q.name == "c.s" and q.durable
    assert office.subscribe_multicast(addr, filter=None, client_id="c", subscription="s") is q


# -- queue attributes and diverts -----------------------------------------------------------


def test_message_groups_stick_to_one_consumer_and_move_in_order_on_close():
    office, _ = make_office()
    office.create_queue("g", "g", ANY)
    c1, s1 = consume(office, "g", window=100)
    c2, s2 = consume(office, "g", window=100)
    for i in range(6):
        office.send(msg(office, "g", f"{'AB'[i % 2]}{i}".encode(), properties={"JMSXGroupID": "AB"[i % 2]}), ANY)
    assert [b[:1] for b in s1.bodies] == [b"A"] * 3
    assert [b[:1] for b in s2.bodies] == [b"B"] * 3
    office.queues["g"].remove_consumer(c1)  # group A moves to c2, in order
    assert s2.bodies[3:] == [b"A0", b"A2", b"A4"]
    office.send(msg(office, "g", b"A6", properties={"JMSXGroupID": "A"}), ANY)
    assert s2.bodies[-1] == b"A6"


def test_group_seq_minus_one_closes_the_group():
    office, _ = make_office()
    office.create_queue("g", "g", ANY)
    c1, s1 = consume(office, "g", window=100)
    office.send(msg(office, "g", b"1", properties={"JMSXGroupID": "x", "JMSXGroupSeq": "-1"}), ANY)
    assert office.queues["g"].groups == {}
    c2, s2 = consume(office, "g", window=100)
    office.send(msg(office, "g", b"2", properties={"JMSXGroupID": "x"}), ANY)
    office.send(msg(office, "g", b"3", properties={"JMSXGroupID": "x"}), ANY)
    assert len(s1.got) + len(s2.got) == 3
    owner = office.queues["g"].groups["x"]
    assert [r.message.body for r in (s1 if owner is c1 else s2).got][-2:] == [b"2", b"3"]


def test_exclusive_queue_uses_one_consumer_then_fails_over():
    office, _ = make_office()
    office.create_queue("ex", "ex", ANY, attributes={"exclusive": True})
    c1, s1 = consume(office, "ex", window=100)
    c2, s2 = consume(office, "ex", window=100)
    for i in range(3):
        office.send(msg(office, "ex", str(i).encode()), ANY)
    assert len(s1.got) == 3 and s2.got == []
    office.queues["ex"].remove_consumer(c1)
    assert s2.bodies == [b"0", b"1", b"2"]


def test_last_value_queue_replaces_undelivered_only():
    office, _ = make_office()
    office.create_queue("lvq", "lvq", ANY, attributes={"last_value_key": "sym"})
    office.send(msg(office, "lvq", b"a1", properties={"sym": "A"}), ANY)
    office.send(msg(office, "lvq", b"b1", properties={"sym": "B"}), ANY)
    office.send(msg(office, "lvq", b"a2", properties={"sym": "A"}), ANY)
    office.send(msg(office, "lvq", b"nokey"), ANY)
    office.send(msg(office, "lvq", b"nokey"), ANY)
    assert sorted(r.message.body for r in office.queues["lvq"].iter_refs()) == [b"a2", b"b1", b"nokey", b"nokey"]


def test_ring_queue_drops_oldest():
    office, _ = make_office()
    office.create_queue("ring", "ring", ANY, attributes={"ring_size": 2})
    for i in range(4):
        office.send(msg(office, "ring", str(i).encode()), ANY)
    assert [r.message.body for r in office.queues["ring"].iter_refs()] == [b"2", b"3"]


def test_non_destructive_queue_keeps_messages_for_every_consumer():
    office, _ = make_office()
    office.create_queue("nd", "nd", ANY, attributes={"non_destructive": True})
    office.send(msg(office, "nd", b"1"), ANY)
    c1, s1 = consume(office, "nd", window=10)
    office.queues["nd"].acknowledge(s1.got[0], consumer=c1)
    c2, s2 = consume(office, "nd", window=10)
    office.send(msg(office, "nd", b"2"), ANY)
    assert s1.bodies == [b"1", b"2"]
    assert s2.bodies == [b"1", b"2"]
    assert office.queues["nd"].message_count == 2


def test_diverts_exclusive_non_exclusive_and_filtered():
    office, _ = make_office()
    office.create_queue("orders", "orders", ANY)
    office.create_queue("audit", "audit", ANY)
    office.create_queue("priority", "priority", ANY)
    office.create_divert("copy", "orders", "audit")
    office.create_divert("vip", "orders", "priority", exclusive=True, filter="vip = 'yes'")
    office.send(msg(office, "orders", b"plain"), ANY)
    office.send(msg(office, "orders", b"vip", properties={"vip": "yes"}), ANY)
    body = lambda q: [r.message.body for r in office.queues[q].iter_refs()]  # noqa: E731
    assert body("orders") == [b"plain"]
    assert body("audit") == [b"plain", b"vip"]
    assert body("priority") == [b"vip"]
    assert next(office.queues["audit"].iter_refs()).message.properties["_AMQ_ORIG_ADDRESS"] == "orders"


def test_producer_flow_control_throttles_only_behind_consumers_and_releases():
    office, _ = make_office()
    office.limits.flow_control_bytes = 10_000
    office.create_queue("fc", "fc", ANY)
    # no consumer: a backlog builds, nobody is throttled (the messages are stored)
    results = [office.send(msg(office, "fc", b"x" * 1000), ANY) for _ in range(20)]
    assert not any(r.throttled for r in results)
    consumer, sink = consume(office, "fc", window=5)
    result = office.send(msg(office, "fc", b"x" * 1000), ANY)
    assert result.throttled
    woken = []
    office.limits.wait_for_space("fc", lambda: woken.append(True))
    queue = office.queues["fc"]
    while not woken and sink.got:
        queue.acknowledge(sink.got.pop(0))
    assert woken and office.space_for("fc")
