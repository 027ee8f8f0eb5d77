"""The decision core of orchestrated scale-down, shared by the local orchestrator (``petrel cluster
scale|apply``) and the Kubernetes operator (:mod:`petrel.operator`).

`decide` is a pure function: the desired `Spec` and what a backend `Observed` (brokers by ordinal,
data directories, drains) in, a `Plan` (the actions to take now, and why the cluster is not
converged yet) out. A backend turns the actions into processes and directories
(:mod:`petrel.orchestrator.scaling`) or into Kubernetes objects (:mod:`petrel.operator.backend`),
observes again and asks again, until the plan is converged.

Ordinals are 0-based (Kubernetes pod ``<sts>-0`` is ordinal 0; local ``node-1`` too). The
members are the ordinals below ``size``. The rules:

* A member that does not run is started (a crashed one again after a backoff). It starts on its
  own data directory, unless that directory was *retired* by a scale-down (below).
* A broker at or above ``size`` is stopped, highest ordinal first, and its data directory is
  *retired* (a mark the backend keeps: ``cluster.json`` locally, a PVC annotation on Kubernetes)
  so that nobody takes it for a member's again. A broker beyond the size that crashed is
  treated alike: its directory is drained too (the Artemis operator ignores those).
* A retired directory is drained (with persistence and message migration on) onto a live
  member, the lowest ready ordinal: one drain per directory at a time, at most
  ``Policy.max_parallel_drains`` at once, highest ordinal first. A failed drain is retried after
  ``Policy.backoff(attempts)`` (exponential, capped); with ``Policy.max_attempts`` it stops
  retrying, says so, and keeps the directory.
* A retired directory is deleted only after its drain exited 0; never otherwise while message
  migration is on.
* **Scaling up onto a retired ordinal (stale data).** Artemis users lose messages when a volume
  is deleted undrained, and get duplicates when a drained (or half-drained) volume comes back
  with its broker. Petrel never starts a broker on a directory that a drain has touched: the
  drain is finished (retried if need be), the directory deleted, and the broker starts empty.
  A retired directory that no drain has touched yet holds exactly its broker's messages, moved
  nowhere: it is given back to its broker (``Reclaim``), which loses and duplicates nothing.
* ``message_migration`` off (persistence on): nothing is drained or deleted; a retired directory
  waits for its ordinal to come back, as a StatefulSet's PVC does. ``persistence_enabled`` off:
  a broker holds nothing durable, so a retired directory is deleted at once.
* ``size`` 0 stops every broker and drains nothing: there is no target (Artemis protects the data
  the same way).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "Action",
    "BrokerPhase",
    "DeleteData",
    "DrainObservation",
    "DrainPhase",
    "Observed",
    "Plan",
    "Policy",
    "Reclaim",
    "Retire",
    "Spec",
    "StartBroker",
    "StartDrain",
    "StopBroker",
    "decide",
]


@dataclass(frozen=True)
class Spec:
    """What the user asks for: the operator's ``deploymentPlan`` or a local spec file."""

    size: int
    persistence_enabled: bool = True
    message_migration: bool = True

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"size must be 0 or more, not {self.size}")

    @property
    def drains(self) -> bool:
        return self.persistence_enabled and self.message_migration


@dataclass(frozen=True)
class Policy:
    """How hard the orchestrator retries."""

    backoff_base_s: float = 2.0  #: the wait after the first failure ...
    backoff_cap_s: float = 60.0  #: ... doubling per failure, up to this
    max_attempts: int | None = None  #: None: retry for ever (the wait stays capped)
    max_parallel_drains: int = 1  #: drains running at once (Artemis: one, under OrderedReady)
    restart_backoff_base_s: float = 1.0  #: the same for restarting a crashed member
    restart_backoff_cap_s: float = 30.0

    def backoff(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based)."""
        return _exponential(failures, self.backoff_base_s, self.backoff_cap_s)

    def restart_backoff(self, crashes: int) -> float:
        return _exponential(crashes, self.restart_backoff_base_s, self.restart_backoff_cap_s)


def _exponential(failures: int, base: float, cap: float) -> float:
    if failures <= 0:
        return 0.0
    return min(cap, base * 2.0 ** min(failures - 1, 32))


class BrokerPhase(enum.StrEnum):
    STARTING = "starting"  #: its process or pod exists but does not serve yet
    RUNNING = "running"  #: serves (health 200 / pod Ready): may be a drain target
    CRASHED = "crashed"  #: exited without being asked to (or a pod in a failed state)
    STOPPED = "stopped"  #: not running, stopped on purpose or never started


class DrainPhase(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"  #: the drainer exited 0: the directory is empty
    FAILED = "failed"  #: the last attempt exited non-zero (or was killed)


@dataclass(frozen=True)
class BrokerObservation:
    phase: BrokerPhase
    crashes: int = 0  #: consecutive crashes (reset once it runs)
    last_exit: float | None = None  #: when it last crashed (the backend's clock)


@dataclass(frozen=True)
class DrainObservation:
    phase: DrainPhase
    attempts: int  #: attempts started so far (1 for the first)
    last_failure: float | None = None  #: when the last failed attempt ended
    reason: str | None = None  #: why the last attempt failed


@dataclass(frozen=True)
class Observed:
    """What a backend sees, by ordinal. A broker missing from ``brokers`` is STOPPED."""

    now: float
    brokers: Mapping[int, BrokerObservation] = field(default_factory=dict)
    data_dirs: frozenset[int] = frozenset()  #: ordinals whose data directory (PVC) exists
    retired: frozenset[int] = frozenset()  #: directories marked retired by a scale-down
    drains: Mapping[int, DrainObservation] = field(default_factory=dict)

    def phase(self, ordinal: int) -> BrokerPhase:
        seen = self.brokers.get(ordinal)
        return seen.phase if seen else BrokerPhase.STOPPED


# -- actions ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StartBroker:
    ordinal: int
    fresh: bool  #: True: on an empty data directory (none exists); False: on its own


@dataclass(frozen=True)
class StopBroker:
    ordinal: int


@dataclass(frozen=True)
class Retire:
    """Mark the ordinal's data directory retired (persisted before anything else happens to it)."""

    ordinal: int


@dataclass(frozen=True)
class Reclaim:
    """Clear the retired mark: the directory is its broker's again (no drain ever touched it)."""

    ordinal: int


@dataclass(frozen=True)
class StartDrain:
    ordinal: int
    target: int  #: the live member to move the messages to
    attempt: int  #: 1 for the first


@dataclass(frozen=True)
class DeleteData:
    """Delete the directory; the backend then forgets its retired mark and its drains."""

    ordinal: int
    reason: str


Action = StartBroker | StopBroker | Retire | Reclaim | StartDrain | DeleteData


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    waiting: tuple[str, ...]  #: why it is not converged, beyond the actions (one line each)
    stuck: tuple[str, ...] = ()  #: what no retry will fix without the operator (kept data)
    wake_at: float | None = None  #: the earliest time a backoff ends (observe again then)

    @property
    def converged(self) -> bool:
        return not self.actions and not self.waiting and not self.stuck


# -- the decision -----------------------------------------------------------------------------------

def decide(spec: Spec, seen: Observed, policy: Policy = Policy()) -> Plan:
    """The actions that move ``seen`` towards ``spec`` now (see the module's rules)."""
    actions: list[Action] = []
    waiting: list[str] = []
    stuck: list[str] = []
    wakes: list[float] = []
    ordinals = set(seen.brokers) | set(seen.data_dirs) | set(seen.drains) | set(seen.retired)
    retired = seen.retired | frozenset(seen.drains)  # a directory a drain touched is retired, marked or not

    # 1. leaving brokers: stop (highest first) and retire their directories
    leaving = sorted((o for o in ordinals if o >= spec.size), reverse=True)
    for o in leaving:
        phase = seen.phase(o)
        if o in seen.data_dirs and o not in retired:
            actions.append(Retire(o))  # before the stop: a crash in between leaves it marked
        if phase in (BrokerPhase.RUNNING, BrokerPhase.STARTING):
            actions.append(StopBroker(o))

    # 2. members: start those not running, unless their directory is retired
    for o in range(spec.size):
        phase = seen.phase(o)
        if phase in (BrokerPhase.RUNNING, BrokerPhase.STARTING):
            if o in retired:  # started by hand on a retired directory: let the drain rules decide
                waiting.append(f"broker {o} runs on a retired data directory; stop it or let it be drained")
            continue
        if o in retired and o in seen.data_dirs:
            drain = seen.drains.get(o)
            if drain is None or not spec.drains:
                actions.append(Reclaim(o))  # untouched by any drain: its broker's own messages
                actions.append(StartBroker(o, fresh=False))
            else:
                waiting.append(f"broker {o} waits for the drain of its retired data directory "
                               f"(a drained directory is never reused)")
            continue
        crash = seen.brokers.get(o)
        if phase is BrokerPhase.CRASHED and crash is not None and crash.last_exit is not None:
            ready_at = crash.last_exit + policy.restart_backoff(crash.crashes)
            if seen.now < ready_at:
                waiting.append(f"broker {o} crashed {crash.crashes} time(s); restarting in "
                               f"{ready_at - seen.now:.1f} s")
                wakes.append(ready_at)
                continue
        actions.append(StartBroker(o, fresh=o not in seen.data_dirs))
    for o in range(spec.size):
        if seen.phase(o) is BrokerPhase.STARTING:
            waiting.append(f"broker {o} starting")

    # 3. retired directories: drain, retry, delete
    target = next((o for o in range(spec.size) if seen.phase(o) is BrokerPhase.RUNNING
                   and o not in retired), None)
    running = sum(1 for o, d in seen.drains.items() if d.phase is DrainPhase.RUNNING)
    for o in sorted((o for o in ordinals if o in seen.data_dirs and (o >= spec.size or o in retired)),
                    reverse=True):
        if seen.phase(o) in (BrokerPhase.RUNNING, BrokerPhase.STARTING):
            if o >= spec.size:
                waiting.append(f"broker {o} stopping")
            continue  # a broker holds the directory (its lock): nothing may open it
        if o < spec.size and seen.drains.get(o) is None:
            continue  # reclaimed above
        if not spec.persistence_enabled:
            actions.append(DeleteData(o, "persistence is off: the directory holds no durable message"))
            continue
        if not spec.message_migration:
            continue  # kept on purpose, converged: it comes back with its broker, as a StatefulSet's PVC
        if spec.size == 0:
            stuck.append(f"data directory {o} kept: size 0 leaves no broker to drain it onto")
            continue
        drain = seen.drains.get(o)
        if drain is not None and drain.phase is DrainPhase.SUCCEEDED:
            actions.append(DeleteData(o, f"drained after {drain.attempts} attempt(s)"))
            continue
        if drain is not None and drain.phase is DrainPhase.RUNNING:
            waiting.append(f"draining data directory {o} (attempt {drain.attempts})")
            continue
        attempt = 1 if drain is None else drain.attempts + 1
        if drain is not None:  # failed
            if policy.max_attempts is not None and drain.attempts >= policy.max_attempts:
                stuck.append(f"drain of data directory {o} failed {drain.attempts} times, the limit "
                             f"(last: {drain.reason or 'no reason given'}); the directory is kept; fix the "
                             f"cause, then allow more attempts to retry")
                continue
            ready_at = (drain.last_failure or seen.now) + policy.backoff(drain.attempts)
            if seen.now < ready_at:
                waiting.append(f"drain of data directory {o} failed (attempt {drain.attempts}: "
                               f"{drain.reason or 'no reason given'}); retrying in {ready_at - seen.now:.1f} s")
                wakes.append(ready_at)
                continue
        if target is None:
            waiting.append(f"data directory {o} waits for a running member to drain onto")
            continue
        if running >= policy.max_parallel_drains:
            waiting.append(f"data directory {o} waits for a drain slot ({running} running)")
            continue
        running += 1
        actions.append(StartDrain(o, target=target, attempt=attempt))

    return Plan(tuple(actions), tuple(dict.fromkeys(waiting)), tuple(stuck), min(wakes) if wakes else None)
