"""The decision core driven to convergence (petrel.orchestrator.converge) on a simulated backend:
brokers that start, stop and crash, data directories that hold messages, drainers that take time,
fail and succeed, on a simulated clock. The backend refuses what would lose or duplicate a
message (deleting a directory that still holds some, a broker on a half-drained directory, a
drain beside its running broker), so a wrong decision fails the test where it is taken."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from petrel.orchestrator.converge import ConvergeTimeout, converge
from petrel.orchestrator.reconcile import (BrokerObservation, BrokerPhase, DeleteData, DrainObservation, DrainPhase,
                                           Observed, Policy, Reclaim, Retire, Spec, StartBroker, StartDrain,
                                           StopBroker)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


@dataclass
class SimDrain:
    attempts: int
    ends_at: float
    fails: str | None  #: the reason this attempt will fail with, or None: it succeeds
    phase: DrainPhase = DrainPhase.RUNNING
    last_failure: float | None = None


@dataclass
class Sim:
    """The world: brokers by ordinal, directories holding messages, drains."""

    clock: Clock
    running: dict[int, str] = field(default_factory=dict)  # ordinal -> "starting" | "running"
    crashed: set[int] = field(default_factory=set)
    dirs: dict[int, list[str]] = field(default_factory=dict)  # ordinal -> messages it holds
    retired: set[int] = field(default_factory=set)
    drains: dict[int, SimDrain] = field(default_factory=dict)
    touched: set[int] = field(default_factory=set)  # directories some drain has opened
    failures: dict[int, list[str]] = field(default_factory=dict)  # ordinal -> reasons of the next attempts
    drain_time: float = 5.0
    log: list[object] = field(default_factory=list)

    # the backend protocol
    def observe(self) -> Observed:
        for o in list(self.running):
            self.running[o] = "running"  # a started broker serves by the next look
        for o, d in self.drains.items():
            if d.phase is DrainPhase.RUNNING and self.clock.now >= d.ends_at:
                if d.fails:
                    d.phase, d.last_failure = DrainPhase.FAILED, d.ends_at
                    # a failed attempt moved half the messages (the target deduplicates them)
                    moved = self.dirs[o][: len(self.dirs[o]) // 2]
                    self._deliver(moved)
                else:
                    self._deliver(self.dirs[o])
                    self.dirs[o] = []
                    d.phase = DrainPhase.SUCCEEDED
        brokers = {o: BrokerObservation(BrokerPhase.RUNNING if s == "running" else BrokerPhase.STARTING)
                   for o, s in self.running.items()}
        brokers |= {o: BrokerObservation(BrokerPhase.CRASHED, 1, -100.0) for o in self.crashed}
        return Observed(now=self.clock.now, brokers=brokers, data_dirs=frozenset(self.dirs),
                        retired=frozenset(self.retired),
                        drains={o: DrainObservation(d.phase, d.attempts, d.last_failure, d.fails)
                                for o, d in self.drains.items()})

    def apply(self, action, seen) -> None:
        self.log.append(action)
        if isinstance(action, StartBroker):
            assert action.ordinal not in self.running
            assert action.ordinal not in self.touched, "a broker on a directory a drain touched"
            assert action.ordinal not in self.retired, "a broker on a retired directory"
            assert action.fresh == (action.ordinal not in self.dirs)
            self.dirs.setdefault(action.ordinal, [])
            self.crashed.discard(action.ordinal)
            self.running[action.ordinal] = "starting"
        elif isinstance(action, StopBroker):
            del self.running[action.ordinal]
        elif isinstance(action, Retire):
            self.retired.add(action.ordinal)
        elif isinstance(action, Reclaim):
            assert action.ordinal not in self.touched
            self.retired.discard(action.ordinal)
        elif isinstance(action, StartDrain):
            assert action.ordinal not in self.running, "a drain beside its running broker"
            assert self.running.get(action.target) == "running", "a drain onto a broker that does not serve"
            reasons = self.failures.get(action.ordinal, [])
            self.touched.add(action.ordinal)
            self.drains[action.ordinal] = SimDrain(action.attempt, self.clock.now + self.drain_time,
                                                   reasons.pop(0) if reasons else None)
        elif isinstance(action, DeleteData):
            assert self.dirs[action.ordinal] == [], f"deleting {action.ordinal} would lose {self.dirs[action.ordinal]}"
            del self.dirs[action.ordinal]
            self.retired.discard(action.ordinal)
            self.drains.pop(action.ordinal, None)
            self.touched.discard(action.ordinal)

    def _deliver(self, messages: list[str]) -> None:
        target = self.dirs[0]
        target.extend(m for m in messages if m not in target)  # the duplicate IDs of a real drain

    def run(self, spec: Spec, policy: Policy = Policy(), timeout: float = 3600.0):
        return converge(spec, self, policy, timeout=timeout, clock=self.clock, sleep=self.clock.sleep)


def cluster(size: int, messages: int = 3) -> Sim:
    sim = Sim(Clock())
    for o in range(size):
        sim.running[o] = "running"
        sim.dirs[o] = [f"m{o}-{i}" for i in range(messages)]
    return sim


def every_message(sim: Sim) -> list[str]:
    return sorted(m for held in sim.dirs.values() for m in held)


def test_scale_3_to_1_drains_then_deletes_highest_first():
    sim = cluster(3)
    before = every_message(sim)
    outcome = sim.run(Spec(1))
    assert outcome.plan.converged
    assert every_message(sim) == before == sorted(sim.dirs[0])
    assert list(sim.dirs) == [0] and list(sim.running) == [0]
    order = [a for a in sim.log if isinstance(a, (StopBroker, StartDrain, DeleteData))]
    assert [type(a).__name__ + str(a.ordinal) for a in order] == [
        "StopBroker2", "StopBroker1", "StartDrain2", "DeleteData2", "StartDrain1", "DeleteData1"]


def test_failed_drains_are_retried_with_backoff_until_they_succeed():
    sim = cluster(2)
    sim.failures[1] = ["target unreachable", "target refuses: address full", "disk error"]
    before = every_message(sim)
    sim.run(Spec(1), Policy(backoff_base_s=2.0, backoff_cap_s=60.0))
    starts = [a for a in sim.log if isinstance(a, StartDrain)]
    assert [a.attempt for a in starts] == [1, 2, 3, 4]
    assert every_message(sim) == before  # half-moved attempts duplicated nothing
    # each retry waited its backoff after the failure: 5 s per attempt, then 2, 4, 8 s
    assert sim.clock.now >= 4 * 5.0 + 2 + 4 + 8


def test_a_drain_that_never_succeeds_keeps_its_directory_and_times_out_loudly():
    sim = cluster(2)
    sim.failures[1] = ["target refuses: address full (FAIL)"] * 1000
    with pytest.raises(ConvergeTimeout, match="address full"):
        sim.run(Spec(1), timeout=600)
    assert 1 in sim.dirs and sim.dirs[1], "the directory and what it still holds are kept"


def test_max_attempts_stops_with_the_directory_kept():
    sim = cluster(2)
    sim.failures[1] = ["disk error"] * 10
    outcome = sim.run(Spec(1), Policy(max_attempts=3))
    assert "failed 3 times" in outcome.plan.stuck[0]
    assert sum(isinstance(a, StartDrain) for a in sim.log) == 3
    assert sim.dirs[1]


def test_a_broker_crashed_beyond_the_size_is_drained():
    sim = cluster(3)
    del sim.running[2]
    sim.crashed.add(2)
    before = every_message(sim)
    sim.run(Spec(2))
    assert every_message(sim) == before
    assert 2 not in sim.dirs and sorted(sim.running) == [0, 1]


def test_scale_down_then_up_starts_empty_and_duplicates_nothing():
    sim = cluster(3)
    before = every_message(sim)
    sim.run(Spec(1))
    sim.run(Spec(3))
    assert sorted(sim.running) == [0, 1, 2]
    assert sim.dirs[1] == [] and sim.dirs[2] == []
    assert every_message(sim) == before


def test_scale_up_while_a_drain_failed_finishes_the_drain_first():
    sim = cluster(2)
    sim.failures[1] = ["target unreachable"]
    before = every_message(sim)
    with pytest.raises(ConvergeTimeout):
        sim.run(Spec(1), timeout=6)  # the first attempt fails, the scale-down is left half done
    assert 1 in sim.touched
    sim.run(Spec(2))  # the user scales back up
    assert every_message(sim) == before
    assert sim.dirs[1] == [] and 1 in sim.running
    kinds = [type(a).__name__ for a in sim.log if getattr(a, "ordinal", None) == 1]
    assert kinds[-3:] == ["StartDrain", "DeleteData", "StartBroker"]


def test_scale_up_before_any_drain_gives_the_broker_its_own_directory_back():
    sim = cluster(2)
    # stop and retire only: simulate an interrupted scale-down before its drain started
    sim.apply(Retire(1), None)
    sim.apply(StopBroker(1), None)
    before = every_message(sim)
    sim.run(Spec(2))
    assert [type(a).__name__ for a in sim.log[-2:]] == ["Reclaim", "StartBroker"]
    assert every_message(sim) == before and len(sim.dirs[1]) == 3


def test_migration_off_keeps_the_directory_for_the_next_scale_up():
    sim = cluster(2)
    sim.run(Spec(1, message_migration=False))
    assert sim.dirs[1] and 1 not in sim.running and not sim.drains
    sim.run(Spec(2, message_migration=False))
    assert 1 in sim.running and len(sim.dirs[1]) == 3
