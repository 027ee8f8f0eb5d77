"""The operator's reconcile (petrel.operator.handlers.reconcile on petrel.operator.backend) against a
simulated API server: the StatefulSet controller makes and removes pods as its replicas say, the
Job controller runs drainer pods that fail or succeed, PVCs hold messages. The simulation refuses
what would lose or duplicate messages (deleting a PVC that still holds some, a pod and a drainer
on one PVC), so a wrong decision fails where it is taken."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from petrel.operator.backend import World, observe
from petrel.operator.crd import parse
from petrel.operator.handlers import reconcile
from petrel.orchestrator.reconcile import BrokerPhase, DrainPhase

T0 = 1_800_000_000.0


def body(size: int, **plan) -> dict:
    return {"apiVersion": "petrel.io/v1alpha1", "kind": "PetrelBroker",
            "metadata": {"name": "b", "namespace": "mq", "uid": "u-1", "generation": 1},
            "spec": {"deploymentPlan": {"size": size, **plan},
                     "drainPolicy": {"backoffBaseSeconds": 10, "backoffCapSeconds": 40}}}


def stamp(t: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeCluster:
    """Objects by (kind, name), plus the messages each PVC holds and what the drainers will do."""

    now: float = T0
    objects: dict[tuple[str, str], dict] = field(default_factory=dict)
    messages: dict[str, list[str]] = field(default_factory=dict)  # pvc -> messages
    job_outcomes: list[str | None] = field(default_factory=list)  # per Job created: None succeeds, else the reason
    events: list[tuple[str, str, str]] = field(default_factory=list)
    deleted_pvcs: list[str] = field(default_factory=list)

    # -- the Api protocol ------------------------------------------------------------------------
    def world(self, cr) -> World:
        kind = lambda k: [copy.deepcopy(o) for (kk, _), o in sorted(self.objects.items()) if kk == k]  # noqa: E731
        return World(copy.deepcopy(self.objects.get(("StatefulSet", cr.name))), kind("Pod"),
                     kind("PersistentVolumeClaim"), kind("Job"))

    def ensure(self, cr, obj, *, update) -> None:
        key = (obj["kind"], obj["metadata"]["name"])
        if key not in self.objects or (update and obj["kind"] != "StatefulSet"):
            self.objects[key] = copy.deepcopy(obj)

    def send(self, cr, op) -> None:
        key = (op.kind, op.name)
        if op.verb == "create":
            assert key not in self.objects, f"{key} created twice"
            self.objects[key] = copy.deepcopy(op.body)
            if op.kind == "Job":
                pvc = op.body["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
                ordinal = pvc.rsplit("-", 1)[1]
                assert ("Pod", f"b-{ordinal}") not in self.objects, "a drainer beside its broker on one PVC"
                outcome = self.job_outcomes.pop(0) if self.job_outcomes else None
                self.objects[key]["_sim"] = {"pvc": pvc, "outcome": outcome, "ends": self.now + 30}
        elif op.verb == "patch":
            _merge(self.objects[key], op.body)
        elif op.verb == "delete":
            if op.kind == "PersistentVolumeClaim":
                assert self.messages.get(op.name) == [], f"deleting {op.name} loses {self.messages.get(op.name)}"
                self.deleted_pvcs.append(op.name)
            self.objects.pop(key, None)

    def event(self, body, kind, reason, message) -> None:
        self.events.append((kind, reason, message))

    # -- the controllers -------------------------------------------------------------------------
    def tick(self, seconds: float = 10.0) -> None:
        self.now += seconds
        sts = self.objects.get(("StatefulSet", "b"))
        replicas = sts["spec"]["replicas"] if sts else 0
        for (kind, name) in list(self.objects):
            if kind == "Pod" and int(name.rsplit("-", 1)[1]) >= replicas:
                del self.objects[(kind, name)]  # scaled down (gracefully, within a tick)
        for o in range(replicas):
            pvc = f"data-b-{o}"
            if ("PersistentVolumeClaim", pvc) not in self.objects:
                self.objects[("PersistentVolumeClaim", pvc)] = {
                    "metadata": {"name": pvc, "labels": {"app.kubernetes.io/instance": "b"}}}
                self.messages[pvc] = []
            assert not any(j.get("_sim", {}).get("pvc") == pvc and "status" not in j
                           for (k, _), j in self.objects.items() if k == "Job"), "a broker on a PVC being drained"
            self.objects.setdefault(("Pod", f"b-{o}"), {"metadata": {"name": f"b-{o}"}, "status": {
                "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
        for (kind, name), job in self.objects.items():
            sim = job.get("_sim")
            if kind != "Job" or "status" in job or self.now < sim["ends"]:
                continue
            if sim["outcome"] is None:
                self.messages["data-b-0"] += [m for m in self.messages[sim["pvc"]] if m not in self.messages["data-b-0"]]
                self.messages[sim["pvc"]] = []
                job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
            else:
                job["status"] = {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                                              "message": sim["outcome"], "lastTransitionTime": stamp(self.now)}]}

    def run(self, b: dict, rounds: int = 60) -> dict:
        status = {}
        for _ in range(rounds):
            status = reconcile({**b, "status": status}, self, now=self.now)
            if status["conditions"][0]["status"] == "True":
                return status
            self.tick()
        return status

    def all_messages(self) -> list[str]:
        return sorted(m for held in self.messages.values() for m in held)


def _merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            _merge(target.setdefault(key, {}), value)
        else:
            target[key] = value


def started(size: int) -> FakeCluster:
    sim = FakeCluster()
    status = sim.run(body(size))
    assert status["readyReplicas"] == size
    for o in range(size):
        sim.messages[f"data-b-{o}"] = [f"m{o}-{i}" for i in range(5)]
    return sim


def test_create_makes_the_statefulset_and_reaches_ready():
    sim = FakeCluster()
    status = sim.run(body(3))
    kinds = sorted({k for k, _ in sim.objects})
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "Pod", "Secret", "Service", "StatefulSet"]
    assert sim.objects[("StatefulSet", "b")]["spec"]["replicas"] == 3
    cond = {c["type"]: c for c in status["conditions"]}
    assert cond["Ready"]["status"] == "True" and cond["Draining"]["status"] == "False"
    assert status["selector"] == "app.kubernetes.io/instance=b,app.kubernetes.io/component=broker"


def test_scale_3_to_1_drains_each_pvc_then_deletes_it():
    sim = started(3)
    before = sim.all_messages()
    status = sim.run(body(1))
    assert status["conditions"][0]["status"] == "True", status["waiting"]
    assert sim.all_messages() == before == sorted(sim.messages["data-b-0"])
    assert sim.deleted_pvcs == ["data-b-2", "data-b-1"]
    assert not [k for k in sim.objects if k[0] == "Job"], "jobs go with their PVC"
    reasons = [r for _, r, _ in sim.events]
    assert reasons.count("VolumeRetired") == 2 and reasons.count("DrainStarted") == 2
    assert reasons.count("VolumeDeleted") == 2 and "Scaling" in reasons


def test_a_failing_drain_is_retried_with_new_jobs_and_events_then_succeeds():
    sim = started(2)
    sim.job_outcomes = ["target refuses: address full (FAIL)", "target unreachable"]
    before = sim.all_messages()
    statuses = []
    b = body(1)
    status = {}
    for _ in range(80):
        status = reconcile({**b, "status": status}, sim, now=sim.now)
        statuses.append(status)
        if status["conditions"][0]["status"] == "True":
            break
        sim.tick()
    assert sim.all_messages() == before and sim.deleted_pvcs == ["data-b-1"]
    retried = [m for _, r, m in sim.events if r == "DrainRetried"]
    assert len(retried) == 2 and "address full" in retried[0] and "unreachable" in retried[1]
    failed = [s for s in statuses if any(c["type"] == "DrainFailed" and c["status"] == "True" for c in s["conditions"])]
    assert failed and "address full" in next(c for c in failed[0]["conditions"] if c["type"] == "DrainFailed")["message"]
    assert any(d["phase"] == "failed" and d["attempts"] == 1 for s in statuses for d in s["drains"])


def test_max_attempts_gives_up_with_a_warning_and_keeps_the_pvc():
    sim = started(2)
    sim.job_outcomes = ["disk error"] * 10
    b = body(1)
    b["spec"]["drainPolicy"]["maxAttempts"] = 2
    status = sim.run(b, rounds=40)
    assert ("PersistentVolumeClaim", "data-b-1") in sim.objects and sim.messages["data-b-1"]
    assert any(r == "DrainGaveUp" for _, r, _ in sim.events)
    gave_up = next(c for c in status["conditions"] if c["type"] == "DrainFailed")
    assert gave_up["reason"] == "GaveUp" and "failed 2 times" in gave_up["message"]


def test_scale_up_while_a_drain_runs_waits_for_it_and_starts_empty():
    """b-2's PVC is being drained: drained, deleted, and b-2 starts empty; b-1's was retired but no
    drain had touched it yet: b-1 gets it back with its own messages."""
    sim = started(3)
    before = sim.all_messages()
    b1 = body(1)
    status = {}
    for _ in range(4):  # until a drain is under way
        status = reconcile({**b1, "status": status}, sim, now=sim.now)
        sim.tick()
    assert any(k[0] == "Job" for k in sim.objects)
    status = sim.run(body(3))
    assert status["readyReplicas"] == 3
    assert sim.all_messages() == before
    assert sim.messages["data-b-2"] == [] and "data-b-2" in sim.deleted_pvcs
    assert len(sim.messages["data-b-1"]) == 5 and "data-b-1" not in sim.deleted_pvcs
    assert any(r == "VolumeReclaimed" and "broker 1" in m for _, r, m in sim.events)


def test_transition_times_move_only_when_a_condition_changes():
    sim = started(1)
    first = reconcile({**body(1), "status": {}}, sim, now=sim.now)
    later = reconcile({**body(1), "status": first}, sim, now=sim.now + 100)
    assert [c["lastTransitionTime"] for c in first["conditions"]] == [c["lastTransitionTime"] for c in later["conditions"]]


@pytest.mark.parametrize(("pod_status", "deleting", "phase"), [
    ({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}, False, BrokerPhase.RUNNING),
    ({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}, False, BrokerPhase.STARTING),
    ({"phase": "Pending"}, False, BrokerPhase.STARTING),
    ({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}, True, BrokerPhase.STARTING),
    ({"phase": "Failed"}, False, BrokerPhase.CRASHED),
    ({"phase": "Running", "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}, False,
     BrokerPhase.CRASHED),
])
def test_pods_as_broker_phases(pod_status, deleting, phase):
    meta = {"name": "b-1", **({"deletionTimestamp": stamp(T0)} if deleting else {})}
    seen = observe(parse(body(2)), World({"spec": {"replicas": 2}}, pods=[{"metadata": meta, "status": pod_status}]), T0)
    assert seen.phase(1) is phase
    assert seen.phase(0) is BrokerPhase.STARTING  # no pod yet, but within the replicas


def test_jobs_as_drains_latest_attempt_wins():
    def job(attempt, st):
        return {"metadata": {"name": f"b-drain-1-{attempt}", "labels": {"petrel.io/ordinal": "1",
                                                                      "petrel.io/drain-attempt": str(attempt)}},
                "status": st}
    failed = {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "message": "boom",
                                           "lastTransitionTime": stamp(T0 - 5)}]}
    seen = observe(parse(body(1)), World(None, jobs=[job(1, failed), job(2, {"active": 1})]), T0)
    assert seen.drains[1].phase is DrainPhase.RUNNING and seen.drains[1].attempts == 2
    seen = observe(parse(body(1)), World(None, jobs=[job(1, failed)]), T0)
    d = seen.drains[1]
    assert (d.phase, d.attempts, d.last_failure) == (DrainPhase.FAILED, 1, T0 - 5) and "boom" in d.reason
