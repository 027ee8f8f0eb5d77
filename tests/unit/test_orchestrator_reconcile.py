"""The decision core of orchestrated scale-down (petrel.orchestrator.reconcile), table by table:
every transition, the backoff, crashes beyond the size, deletion only after a drain exited 0,
scaling up after a scale-down."""

from __future__ import annotations

import pytest

from petrel.orchestrator.reconcile import (BrokerObservation, BrokerPhase, DeleteData, DrainObservation, DrainPhase,
                                           Observed, Policy, Reclaim, Retire, Spec, StartBroker, StartDrain,
                                           StopBroker, decide)

R, S, C, ST = BrokerPhase.RUNNING, BrokerPhase.STOPPED, BrokerPhase.CRASHED, BrokerPhase.STARTING
NOW = 1000.0


def seen(brokers=None, dirs=(), retired=(), drains=None, now=NOW) -> Observed:
    return Observed(now=now, brokers={o: p if isinstance(p, BrokerObservation) else BrokerObservation(p)
                                      for o, p in (brokers or {}).items()},
                    data_dirs=frozenset(dirs), retired=frozenset(retired), drains=drains or {})


def drain(phase, attempts=1, last_failure=None, reason=None) -> DrainObservation:
    return DrainObservation(phase, attempts, last_failure, reason)


CASES = [
    # (name, spec, observed, expected actions)
    ("steady 3", Spec(3), seen({0: R, 1: R, 2: R}, dirs=(0, 1, 2)), []),
    ("first start: empty dirs", Spec(2), seen(), [StartBroker(0, fresh=True), StartBroker(1, fresh=True)]),
    ("a stopped member restarts on its own data", Spec(2), seen({0: R, 1: S}, dirs=(0, 1)),
     [StartBroker(1, fresh=False)]),
    ("3 -> 1: retire and stop the highest first", Spec(1), seen({0: R, 1: R, 2: R}, dirs=(0, 1, 2)),
     [Retire(2), StopBroker(2), Retire(1), StopBroker(1)]),
    ("stopping: no drain while the broker holds its directory", Spec(1),
     seen({0: R, 1: ST}, dirs=(0, 1), retired=(1,)), [StopBroker(1)]),
    ("stopped and retired: drain the highest first, one at a time", Spec(1),
     seen({0: R, 1: S, 2: S}, dirs=(0, 1, 2), retired=(1, 2)), [StartDrain(2, target=0, attempt=1)]),
    ("a drain runs: wait, start no other", Spec(1),
     seen({0: R}, dirs=(0, 1, 2), retired=(1, 2), drains={2: drain(DrainPhase.RUNNING)}), []),
    ("a drain succeeded: delete its directory, start the next", Spec(1),
     seen({0: R}, dirs=(0, 1, 2), retired=(1, 2), drains={2: drain(DrainPhase.SUCCEEDED)}),
     [DeleteData(2, "drained after 1 attempt(s)"), StartDrain(1, target=0, attempt=1)]),
    ("a failed drain within its backoff: nothing (the directory is kept)", Spec(1),
     seen({0: R}, dirs=(0, 1), retired=(1,), drains={1: drain(DrainPhase.FAILED, 1, NOW - 1.0, "refused")}), []),
    ("a failed drain after its backoff: retried", Spec(1),
     seen({0: R}, dirs=(0, 1), retired=(1,), drains={1: drain(DrainPhase.FAILED, 1, NOW - 2.0, "refused")}),
     [StartDrain(1, target=0, attempt=2)]),
    ("a crash beyond the size is drained too", Spec(1), seen({0: R, 1: C}, dirs=(0, 1)),
     [Retire(1), StartDrain(1, target=0, attempt=1)]),
    ("no running member: no target, wait", Spec(1), seen({0: ST, 1: S}, dirs=(0, 1), retired=(1,)), []),
    ("the target is the lowest running member", Spec(2), seen({0: C, 1: R, 2: S}, dirs=(0, 1, 2), retired=(2,)),
     [StartBroker(0, fresh=False), StartDrain(2, target=1, attempt=1)]),
    ("scale up onto an untouched retired directory: reclaimed", Spec(2),
     seen({0: R, 1: S}, dirs=(0, 1), retired=(1,)), [Reclaim(1), StartBroker(1, fresh=False)]),
    ("scale up onto a directory being drained: wait for the drain", Spec(2),
     seen({0: R, 1: S}, dirs=(0, 1), retired=(1,), drains={1: drain(DrainPhase.RUNNING)}), []),
    ("scale up onto a failed drain: retry it, do not start on half-moved data", Spec(2),
     seen({0: R}, dirs=(0, 1), retired=(1,), drains={1: drain(DrainPhase.FAILED, 2, NOW - 100, "x")}),
     [StartDrain(1, target=0, attempt=3)]),
    ("scale up onto a drained directory: delete it first", Spec(2),
     seen({0: R}, dirs=(0, 1), retired=(1,), drains={1: drain(DrainPhase.SUCCEEDED)}),
     [DeleteData(1, "drained after 1 attempt(s)")]),
    ("scale up after the delete: start empty", Spec(2), seen({0: R}, dirs=(0,)), [StartBroker(1, fresh=True)]),
    ("migration off: retire and stop, never drain nor delete", Spec(1, message_migration=False),
     seen({0: R, 1: S}, dirs=(0, 1), retired=(1,)), []),
    ("migration off, scale up: its broker gets its directory back", Spec(2, message_migration=False),
     seen({0: R, 1: S}, dirs=(0, 1), retired=(1,)), [Reclaim(1), StartBroker(1, fresh=False)]),
    ("persistence off: a leaving directory is deleted at once", Spec(1, persistence_enabled=False),
     seen({0: R, 1: S}, dirs=(0, 1), retired=(1,)), [DeleteData(1, "persistence is off: the directory holds no "
                                                                  "durable message")]),
    ("size 0: stop everything, drain nothing", Spec(0), seen({0: R}, dirs=(0,)), [Retire(0), StopBroker(0)]),
    ("leaving broker without a directory: only stopped", Spec(1, persistence_enabled=False),
     seen({0: R, 1: R}), [StopBroker(1)]),
    ("started by hand on a retired directory: left alone, not converged", Spec(1),
     seen({0: R, 1: R}, dirs=(0, 1), retired=(1,)), [StopBroker(1)]),
]


@pytest.mark.parametrize(("spec", "observed", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(spec, observed, expected):
    assert list(decide(spec, observed).actions) == expected


@pytest.mark.parametrize(("observed", "converged", "words"), [
    (seen({0: R}, dirs=(0,)), True, None),
    (seen({0: R}, dirs=(0, 1), retired=(1,), drains={1: drain(DrainPhase.RUNNING)}), False, "draining data directory 1"),
    (seen({0: R}, dirs=(0, 1), retired=(1,), drains={1: drain(DrainPhase.FAILED, 1, NOW, "target refuses")}),
     False, "target refuses"),
    (seen({0: ST, 1: S}, dirs=(0, 1), retired=(1,)), False, "waits for a running member"),
    (seen({0: R, 1: ST}, dirs=(0, 1), retired=(1,)), False, "broker 1 stopping"),
])
def test_converged_or_why_not(observed, converged, words):
    plan = decide(Spec(1), observed)
    assert plan.converged is converged
    if words:
        assert any(words in line for line in plan.waiting), plan.waiting


def test_migration_off_converges_with_the_directory_kept():
    plan = decide(Spec(1, message_migration=False), seen({0: R, 1: S}, dirs=(0, 1), retired=(1,)))
    assert plan.converged


@pytest.mark.parametrize(("failures", "wait"), [(0, 0.0), (1, 2.0), (2, 4.0), (3, 8.0), (5, 32.0), (6, 60.0),
                                                (50, 60.0), (10_000, 60.0)])
def test_backoff_doubles_and_is_capped(failures, wait):
    assert Policy(backoff_base_s=2.0, backoff_cap_s=60.0).backoff(failures) == wait


@pytest.mark.parametrize(("attempts", "since", "retried"), [(1, 1.9, False), (1, 2.0, True), (3, 7.9, False),
                                                           (3, 8.0, True), (9, 59.0, False), (9, 60.0, True)])
def test_a_failed_drain_is_retried_after_its_backoff(attempts, since, retried):
    observed = seen({0: R}, dirs=(0, 1), retired=(1,),
                    drains={1: drain(DrainPhase.FAILED, attempts, NOW - since, "target unreachable")})
    plan = decide(Spec(1), observed, Policy(backoff_base_s=2.0, backoff_cap_s=60.0))
    assert (plan.actions == (StartDrain(1, 0, attempts + 1),)) is retried
    if not retried:
        assert plan.wake_at == pytest.approx(NOW - since + Policy().backoff(attempts))


def test_max_attempts_gives_up_loudly_and_keeps_the_directory():
    observed = seen({0: R}, dirs=(0, 1), retired=(1,),
                    drains={1: drain(DrainPhase.FAILED, 3, NOW - 1000, "target refuses: address full (FAIL)")})
    plan = decide(Spec(1), observed, Policy(max_attempts=3))
    assert plan.actions == ()
    assert not plan.converged
    (line,) = plan.stuck
    assert "failed 3 times" in line and "address full" in line and "kept" in line


def test_parallel_drains_are_bounded():
    observed = seen({0: R}, dirs=(0, 1, 2, 3, 4), retired=(1, 2, 3, 4), drains={4: drain(DrainPhase.RUNNING)})
    assert decide(Spec(1), observed, Policy(max_parallel_drains=3)).actions == (
        StartDrain(3, 0, 1), StartDrain(2, 0, 1))


def test_a_crashed_member_restarts_after_its_backoff():
    crashed = BrokerObservation(C, crashes=3, last_exit=NOW - 1.0)
    plan = decide(Spec(2), seen({0: R, 1: crashed}, dirs=(0, 1)), Policy(restart_backoff_base_s=1.0))
    assert plan.actions == () and plan.wake_at == NOW + 3.0
    later = decide(Spec(2), seen({0: R, 1: crashed}, dirs=(0, 1), now=NOW + 3.0), Policy(restart_backoff_base_s=1.0))
    assert later.actions == (StartBroker(1, fresh=False),)


def test_nothing_is_ever_deleted_without_a_successful_drain():
    """Every observation the core may see: a DeleteData with migration on needs a SUCCEEDED drain."""
    phases = [None, R, S, C, ST]
    drains = [None, drain(DrainPhase.RUNNING), drain(DrainPhase.FAILED, 1, NOW - 500, "x"),
              drain(DrainPhase.SUCCEEDED)]
    for size in (0, 1, 2):
        for phase in phases:
            for d in drains:
                for is_retired in (False, True):
                    observed = seen({0: R} | ({1: phase} if phase else {}), dirs=(0, 1),
                                    retired=(1,) if is_retired else (), drains={1: d} if d else {})
                    for action in decide(Spec(size), observed).actions:
                        if isinstance(action, DeleteData):
                            assert d is not None and d.phase is DrainPhase.SUCCEEDED, (size, phase, d, is_retired)
                        if isinstance(action, StartBroker) and action.ordinal == 1:
                            assert d is None, "never a broker on a directory a drain touched"
                        if isinstance(action, StartDrain):
                            assert phase not in (R, ST), "never a drain beside its running broker"


def test_spec_refuses_a_negative_size():
    with pytest.raises(ValueError, match="size"):
        Spec(-1)
