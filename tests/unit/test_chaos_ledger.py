"""The chaos harness's plan (a seed names a run) and its ledger (each defect is flagged)."""

from __future__ import annotations

from petrel.testing.chaos import FAULT_KINDS, Ledger, make_plan


def test_a_seed_gives_the_same_plan_every_time():
    for seed in range(50):
        assert make_plan(seed) == make_plan(seed)
    assert len({make_plan(seed) for seed in range(50)}) == 50


def test_plans_draw_every_fault_kind_and_only_those_their_topology_allows():
    kinds = set()
    for seed in range(300):
        plan = make_plan(seed)
        kinds |= plan.fault_kinds
        assert 1 <= len(plan.faults) <= 3
        assert [f.at for f in plan.faults] == sorted(f.at for f in plan.faults)
        assert all(0 < f.at < plan.duration for f in plan.faults)
        if plan.nodes == 1:
            assert not plan.fault_kinds & {"link_cut", "link_freeze"}
        assert all(f.node < plan.nodes for f in plan.faults if f.kind != "consumer_drop")
    assert kinds == set(FAULT_KINDS)


def test_replication_plans_cut_links_only_with_a_lock_manager_and_draw_both_restart_paths():
    kinds, variants = set(), set()
    for seed in range(300):
        plan = make_plan(seed, topology="replication")
        kinds |= plan.fault_kinds
        variants.add((plan.failback, plan.lock))
        assert plan.nodes == 1 and all(f.node == 0 for f in plan.faults if f.kind != "consumer_drop")
        if plan.lock == "none":  # lone_pair_failover: a cut link could make two lives
            assert not plan.fault_kinds & {"link_cut", "link_freeze"}
        assert "drain" not in plan.fault_kinds
    assert kinds == set(FAULT_KINDS) | {"backup_kill9"}
    assert variants == {(False, "none"), (True, "none"), (False, "zookeeper"), (True, "zookeeper")}


def test_drain_plans_drain_the_first_broker_once_and_hit_only_the_target_otherwise():
    for seed in range(300):
        plan = make_plan(seed, topology="drain")
        drains = [f for f in plan.faults if f.kind == "drain"]
        assert len(drains) == 1 and drains[0].node == 0 and 0 < drains[0].at < plan.duration
        assert plan.fault_kinds <= {"drain", "kill9", "sigterm", "consumer_drop"}
        assert all(f.node == 1 for f in plan.faults if f.kind in ("kill9", "sigterm"))
        assert 1 <= len(plan.drain_kills) <= 4 and not plan.ordered
        assert make_plan(seed, topology="drain") == plan


def history(ledger: Ledger, n: int = 5, *, stream: str = "q") -> list[str]:
    mids = [f"p0-{i}" for i in range(n)]
    for mid in mids:
        ledger.sent(mid, [stream])
    ledger.confirmed(mids)
    return mids


def test_a_clean_history_passes():
    ledger = Ledger()
    mids = history(ledger)
    for mid in mids:
        ledger.delivered("q", mid)
    ledger.ack_confirmed("q", mids)
    v = ledger.check(ordered=True)
    assert v.ok and (v.confirmed, v.lost, v.duplicated, v.redelivered, v.reordered) == (5, 0, 0, 0, 0)


def test_a_confirmed_message_never_seen_again_is_lost():
    ledger = Ledger()
    mids = history(ledger)
    for mid in mids[:4]:
        ledger.delivered("q", mid)
    ledger.ack_confirmed("q", mids[:4])
    v = ledger.check()
    assert not v.ok and v.lost == 1 and v.examples["lost"] == ["q:p0-4"]


def test_a_delivery_without_an_acknowledgement_is_owed_again():
    ledger = Ledger()
    mids = history(ledger, 2)
    ledger.delivered("q", mids[0])
    ledger.delivered("q", mids[1])
    ledger.ack_sent("q", [mids[0]])  # in doubt: settled; mids[1] was never acknowledged
    v = ledger.check()
    assert v.lost == 1 and v.examples["lost"] == ["q:p0-1"]


def test_the_drain_and_the_dead_letter_queue_account_for_messages():
    ledger = Ledger()
    mids = history(ledger, 3)
    ledger.drained("q", mids[0])
    ledger.drained(None, mids[1])  # found in DLQ
    ledger.drained("q", mids[2])
    assert ledger.check().ok


def test_an_unconfirmed_send_may_be_missing():
    ledger = Ledger()
    ledger.sent("p0-0", ["q"])
    v = ledger.check()
    assert v.ok and v.in_doubt == 1 and v.lost == 0


def test_a_delivery_after_a_confirmed_acknowledgement_is_a_duplicate():
    ledger = Ledger()
    mids = history(ledger, 2)
    ledger.delivered("q", mids[0])
    ledger.ack_confirmed("q", [mids[0]])
    ledger.delivered("q", mids[1])
    ledger.ack_confirmed("q", [mids[1]])
    ledger.drained("q", mids[0])  # back after its ack was confirmed
    v = ledger.check()
    assert not v.ok and v.duplicated == 1 and v.examples["duplicated"] == ["q:p0-0"]


def test_a_redelivery_before_the_acknowledgement_is_allowed_and_counted():
    ledger = Ledger()
    mids = history(ledger, 1)
    ledger.delivered("q", mids[0])
    ledger.ack_sent("q", mids)  # never confirmed (the connection dropped)
    ledger.delivered("q", mids[0], redelivered=True)
    ledger.ack_confirmed("q", mids)
    v = ledger.check(ordered=True)
    assert v.ok and v.redelivered == 1 and v.duplicated == 0


def test_a_reorder_is_flagged_where_order_is_promised():
    ledger = Ledger()
    mids = history(ledger, 3)
    for mid in (mids[0], mids[2], mids[1]):
        ledger.delivered("q", mid)
    ledger.ack_confirmed("q", mids)
    v = ledger.check(ordered=True)
    assert not v.ok and v.reordered == 1 and "q:p0-1 after p0-2" in v.examples["reordered"]
    assert ledger.check(ordered=False).ok


def test_order_is_not_promised_after_a_redelivery_or_across_producers():
    ledger = Ledger()
    for mid in ("p0-0", "p0-1", "p1-0", "p1-1"):
        ledger.sent(mid, ["q"])
    ledger.confirmed(["p0-0", "p0-1", "p1-0", "p1-1"])
    for mid, again in (("p1-0", False), ("p0-0", False), ("p0-1", False), ("p0-0", True), ("p1-1", False)):
        ledger.delivered("q", mid, redelivered=again)
    ledger.ack_confirmed("q", ["p0-0", "p0-1", "p1-0", "p1-1"])
    assert ledger.check(ordered=True).reordered == 0


def test_each_durable_subscription_owes_its_own_copy():
    ledger = Ledger()
    ledger.sent("p0-0", ["c.s1", "c.s2"])
    ledger.confirmed(["p0-0"])
    ledger.delivered("c.s1", "p0-0")
    ledger.ack_confirmed("c.s1", ["p0-0"])
    v = ledger.check()
    assert v.lost == 1 and v.examples["lost"] == ["c.s2:p0-0"]


def test_a_message_nobody_sent_is_flagged():
    ledger = Ledger()
    ledger.drained("q", "p9-9")
    assert ledger.check().unknown == 1


def test_non_durable_messages_may_go_with_a_restart_only():
    ledger = Ledger()
    ledger.sent("p0-0", ["q"], durable=False)
    ledger.confirmed(["p0-0"])
    assert ledger.check(restarted=True).ok
    assert ledger.check(restarted=False).lost == 1


def test_a_dropped_auto_ack_stomp_consumer_may_lose_what_was_on_the_wire():
    ledger = Ledger()
    history(ledger, 1)
    assert ledger.check().lost == 1
    ledger.at_most_once("q")
    v = ledger.check()
    assert v.ok and v.in_flight == 1


def test_a_send_that_may_be_stored_twice_has_one_allowed_copy_and_no_more():
    """An OpenWire failover client's send replayed on another node (`Ledger.may_repeat`): one
    copy after the acknowledgement is counted as repeated; a second is a DUPLICATE, and so is any
    copy of a send not so marked."""
    ledger = Ledger()
    for mid in ("p0-0", "p0-1", "p0-2"):
        ledger.sent(mid, ("q",))
    ledger.confirmed(["p0-0", "p0-1", "p0-2"])
    ledger.may_repeat(["p0-0", "p0-1"])
    for mid in ("p0-0", "p0-1", "p0-2"):
        ledger.delivered("q", mid)
    ledger.ack_confirmed("q", ["p0-0", "p0-1", "p0-2"])
    ledger.drained("q", "p0-0")  # the allowed copy
    ledger.drained("q", "p0-1")
    ledger.drained("q", "p0-1")  # one too many
    ledger.drained("q", "p0-2")  # never marked
    v = ledger.check()
    assert (v.repeated, v.duplicated) == (1, 3)
    assert v.examples["duplicated"] == ["q:p0-1", "q:p0-2"]
