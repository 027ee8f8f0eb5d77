"""The Kubernetes backend of the decision core: what the objects say (`observe`), what to do to them
(`operations`), and what the PetrelBroker's status says (`status`). All pure: the handlers
(:mod:`petrel.operator.handlers`) list the objects, call these, and send the operations.

Mapping to :mod:`petrel.orchestrator.reconcile`:

* broker ``i`` is pod ``<name>-i``: Ready is RUNNING; a pod that exists but is not Ready (or is
  terminating: it still holds its volume) is STARTING; a failed pod or one in CrashLoopBackOff is
  CRASHED; no pod is STOPPED (or STARTING while the StatefulSet's replicas cover it);
* data directory ``i`` is PVC ``data-<name>-i``; retired means annotated ``petrel.io/retired``;
* a drain is the Jobs ``<name>-drain-i-<attempt>`` (one per attempt, backoffLimit 0): the latest
  attempt's state, and when it failed;
* StartBroker/StopBroker become the StatefulSet's replicas: the longest run of ordinals from 0 that
  run or may start, so a PVC being drained is never mounted by a new pod (a StatefulSet cannot
  skip an ordinal); Retire/Reclaim patch the PVC's annotation (before the replicas change);
  StartDrain creates a Job; DeleteData deletes the PVC and then the ordinal's Jobs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from petrel.operator.crd import BrokerResource
from petrel.operator.manifests import (ATTEMPT_LABEL, DATA_VOLUME, ORDINAL_LABEL, RETIRED_ANNOTATION, drain_job,
                                       pvc_name, selector_string, stateful_set)
from petrel.orchestrator.reconcile import (BrokerObservation, BrokerPhase, DeleteData, DrainObservation, DrainPhase,
                                           Observed, Plan, Reclaim, Retire, StartBroker, StartDrain, StopBroker)

__all__ = ["Operation", "World", "observe", "operations", "replicas_for", "status"]

CRASH_REASONS = frozenset({"CrashLoopBackOff", "Error", "OOMKilled", "ImagePullBackOff", "ErrImagePull"})


@dataclass(frozen=True)
class World:
    """The objects of one PetrelBroker, as listed from the API (plain dicts)."""

    stateful_set: dict[str, Any] | None
    pods: Sequence[dict[str, Any]] = ()
    pvcs: Sequence[dict[str, Any]] = ()
    jobs: Sequence[dict[str, Any]] = ()


@dataclass(frozen=True)
class Operation:
    """One call to the API: create, patch (a JSON merge patch) or delete."""

    verb: str
    kind: str
    name: str
    body: dict[str, Any] = field(default_factory=dict)
    event: tuple[str, str, str] | None = None  #: (type Normal|Warning, reason, message) to record on the CR


def _time(value: str | None) -> float | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _ordinal(name: str, prefix: str) -> int | None:
    if not name.startswith(prefix):
        return None
    tail = name[len(prefix):]
    return int(tail) if tail.isdigit() else None


def _pod_phase(pod: dict[str, Any]) -> BrokerPhase:
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return BrokerPhase.STARTING  # terminating: it still holds its volume
    if status.get("phase") == "Failed":
        return BrokerPhase.CRASHED
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in CRASH_REASONS:
            return BrokerPhase.CRASHED
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    return BrokerPhase.RUNNING if status.get("phase") == "Running" and ready else BrokerPhase.STARTING


def _job_drain(jobs: list[dict[str, Any]], now: float) -> DrainObservation:
    """The latest attempt of one ordinal's Jobs."""
    def attempt(job: dict[str, Any]) -> int:
        return int(((job.get("metadata") or {}).get("labels") or {}).get(ATTEMPT_LABEL, "0"))

    latest = max(jobs, key=attempt)
    status = latest.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or () if c.get("status") == "True"}
    if "Complete" in conditions or status.get("succeeded"):
        return DrainObservation(DrainPhase.SUCCEEDED, attempt(latest))
    if "Failed" in conditions or status.get("failed"):
        failed = conditions.get("Failed") or {}
        when = _time(failed.get("lastTransitionTime")) or _time(status.get("completionTime")) or now
        reason = failed.get("message") or failed.get("reason") or "the drainer exited non-zero"
        return DrainObservation(DrainPhase.FAILED, attempt(latest), when,
                                f"{reason}; see `kubectl logs job/{latest['metadata']['name']}`")
    return DrainObservation(DrainPhase.RUNNING, attempt(latest))


def observe(cr: BrokerResource, world: World, now: float) -> Observed:
    replicas = ((world.stateful_set or {}).get("spec") or {}).get("replicas", 0)
    brokers: dict[int, BrokerObservation] = {}
    for pod in world.pods:
        o = _ordinal(pod["metadata"]["name"], f"{cr.name}-")
        if o is not None:
            brokers[o] = BrokerObservation(_pod_phase(pod))
    for o in range(replicas):
        brokers.setdefault(o, BrokerObservation(BrokerPhase.STARTING))  # the StatefulSet will make it
    dirs, retired = set(), set()
    for pvc in world.pvcs:
        meta = pvc.get("metadata") or {}
        o = _ordinal(meta.get("name", ""), f"{DATA_VOLUME}-{cr.name}-")
        if o is None or meta.get("deletionTimestamp"):
            continue
        dirs.add(o)
        if RETIRED_ANNOTATION in (meta.get("annotations") or {}):
            retired.add(o)
    by_ordinal: dict[int, list[dict[str, Any]]] = {}
    for job in world.jobs:
        meta = job.get("metadata") or {}
        label = (meta.get("labels") or {}).get(ORDINAL_LABEL)
        if label is not None and label.isdigit() and not meta.get("deletionTimestamp"):
            by_ordinal.setdefault(int(label), []).append(job)
    drains = {o: _job_drain(jobs, now) for o, jobs in by_ordinal.items()}
    return Observed(now=now, brokers=brokers, data_dirs=frozenset(dirs), retired=frozenset(retired), drains=drains)


def replicas_for(cr: BrokerResource, seen: Observed, plan: Plan) -> int:
    """The StatefulSet's replicas: ordinals 0.. that run, start, or may start now, up to the size."""
    allowed = {o for o, b in seen.brokers.items() if b.phase is not BrokerPhase.STOPPED}
    allowed |= {a.ordinal for a in plan.actions if isinstance(a, StartBroker)}
    allowed -= {a.ordinal for a in plan.actions if isinstance(a, StopBroker)}
    replicas = 0
    while replicas < cr.size and replicas in allowed:
        replicas += 1
    return replicas


def operations(cr: BrokerResource, world: World, seen: Observed, plan: Plan, now: float) -> list[Operation]:
    """The plan's actions as API calls, in the order to send them."""
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ops: list[Operation] = []
    for action in plan.actions:  # marks first: a PVC is retired before its pod goes
        if isinstance(action, Retire):
            ops.append(Operation("patch", "PersistentVolumeClaim", pvc_name(cr, action.ordinal),
                                 {"metadata": {"annotations": {RETIRED_ANNOTATION: stamp}}},
                                 ("Normal", "VolumeRetired", f"broker {action.ordinal} leaves: its volume "
                                  f"{pvc_name(cr, action.ordinal)} is retired (drained, then deleted)")))
        elif isinstance(action, Reclaim):
            ops.append(Operation("patch", "PersistentVolumeClaim", pvc_name(cr, action.ordinal),
                                 {"metadata": {"annotations": {RETIRED_ANNOTATION: None}}},
                                 ("Normal", "VolumeReclaimed", f"broker {action.ordinal} comes back before any "
                                  "drain touched its volume: it keeps it")))
    replicas = replicas_for(cr, seen, plan)
    current = ((world.stateful_set or {}).get("spec") or {}).get("replicas")
    if world.stateful_set is None:
        ops.append(Operation("create", "StatefulSet", cr.name, stateful_set(cr, replicas)))
    elif current != replicas:
        ops.append(Operation("patch", "StatefulSet", cr.name, {"spec": {"replicas": replicas}},
                             ("Normal", "Scaling", f"StatefulSet replicas {current} -> {replicas} (size {cr.size})")))
    for action in plan.actions:
        if isinstance(action, StartDrain):
            job = drain_job(cr, action.ordinal, action.target, action.attempt)
            previous = seen.drains.get(action.ordinal)
            why = f" (attempt {previous.attempts} failed: {previous.reason})" if previous else ""
            ops.append(Operation("create", "Job", job["metadata"]["name"], job,
                                 ("Normal" if action.attempt == 1 else "Warning",
                                  "DrainStarted" if action.attempt == 1 else "DrainRetried",
                                  f"draining {pvc_name(cr, action.ordinal)} onto broker {action.target}, attempt "
                                  f"{action.attempt}{why}")))
        elif isinstance(action, DeleteData):
            ops.append(Operation("delete", "PersistentVolumeClaim", pvc_name(cr, action.ordinal), {},
                                 ("Normal", "VolumeDeleted", f"deleted {pvc_name(cr, action.ordinal)}: "
                                  f"{action.reason}")))
            for job in _jobs_of(world.jobs, action.ordinal):
                ops.append(Operation("delete", "Job", job["metadata"]["name"], {"propagationPolicy": "Background"}))
    return ops


def _jobs_of(jobs: Iterable[dict[str, Any]], ordinal: int) -> list[dict[str, Any]]:
    return [j for j in jobs if ((j.get("metadata") or {}).get("labels") or {}).get(ORDINAL_LABEL) == str(ordinal)]


def _condition(kind: str, on: bool, reason: str, message: str, previous: dict[str, dict], stamp: str,
               generation: int | None) -> dict[str, Any]:
    value = "True" if on else "False"
    old = previous.get(kind) or {}
    since = old.get("lastTransitionTime") if old.get("status") == value else stamp
    cond = {"type": kind, "status": value, "reason": reason, "message": message[:1024], "lastTransitionTime": since}
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def status(cr: BrokerResource, world: World, seen: Observed, plan: Plan, now: float,
           previous: dict[str, Any] | None = None, generation: int | None = None) -> dict[str, Any]:
    """The PetrelBroker's ``status``: Ready (converged), Scaling, Draining and DrainFailed conditions
    (a transition time changes only when the status does), the drains, what it waits for."""
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    old = {c.get("type"): c for c in (previous or {}).get("conditions") or ()}
    ready = sum(1 for o, b in seen.brokers.items() if o < cr.size and b.phase is BrokerPhase.RUNNING)
    draining = [o for o, d in seen.drains.items() if d.phase is DrainPhase.RUNNING]
    pending = sorted(o for o in seen.data_dirs if o >= cr.size or o in seen.retired)
    failed = {o: d for o, d in seen.drains.items() if d.phase is DrainPhase.FAILED}
    scaling = any(isinstance(a, (StartBroker, StopBroker)) for a in plan.actions) or ready != cr.size
    conditions = [
        _condition("Ready", plan.converged, "Converged" if plan.converged else "Reconciling",
                   "every broker runs and no volume waits for a drain" if plan.converged else
                   "; ".join(plan.waiting + plan.stuck) or "acting", old, stamp, generation),
        _condition("Scaling", scaling, "Scaling" if scaling else "AtSize", f"{ready} of {cr.size} brokers ready",
                   old, stamp, generation),
        _condition("Draining", bool(pending) and cr.spec.drains, "Draining" if draining else
                   ("VolumesPending" if pending else "NoDrain"),
                   f"volumes to drain: {', '.join(pvc_name(cr, o) for o in pending)}" if pending else "none",
                   old, stamp, generation),
        _condition("DrainFailed", bool(failed) or bool(plan.stuck), "GaveUp" if plan.stuck else
                   ("Retrying" if failed else "None"),
                   "; ".join(plan.stuck) or "; ".join(f"{pvc_name(cr, o)}: attempt {d.attempts}: {d.reason}"
                                                      for o, d in sorted(failed.items())) or "none",
                   old, stamp, generation),
    ]
    drains = [{"ordinal": o, "volume": pvc_name(cr, o), "phase": d.phase.value, "attempts": d.attempts,
               "job": f"{cr.name}-drain-{o}-{d.attempts}", **({"reason": d.reason} if d.reason else {})}
              for o, d in sorted(seen.drains.items())]
    return {"size": cr.size, "readyReplicas": ready, "selector": selector_string(cr), "conditions": conditions,
            "drains": drains, "waiting": list(plan.waiting + plan.stuck)}
