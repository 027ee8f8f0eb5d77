"""The operator's runtime: kopf handlers on PetrelBroker, and the Kubernetes API calls.

One reconcile (`reconcile`) lists the resource's objects, runs the decision core once
(:func:`petrel.orchestrator.reconcile.decide` through :mod:`petrel.operator.backend`), sends
the operations, records an event for each, and returns the status. kopf calls it on create,
update and resume, and every ``interval`` seconds (a timer): the objects are the operator's
memory, so a restarted operator carries on where the last one stopped.

kopf and kubernetes are imported only here, and only when the operator runs
(``pip install 'petrel[k8s]'``); the rest of Petrel runs without them.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any, Protocol

from petrel.operator.backend import Operation, World, observe, operations, status
from petrel.operator.crd import GROUP, PLURAL, VERSION, BrokerResource, parse
from petrel.operator.manifests import broker_objects, secret
from petrel.orchestrator.reconcile import decide

__all__ = ["Api", "KubernetesApi", "reconcile", "register"]

log = logging.getLogger(__name__)

INTERVAL_S = 10.0
#: Operations patch with JSON merge patches (RFC 7386: a None removes a key, as an annotation);
#: the client would otherwise send a dict as a JSON patch, which the API server refuses.
MERGE_PATCH = "application/merge-patch+json"


class Api(Protocol):
    """What a reconcile needs from the API server (`KubernetesApi`; a fake in the tests)."""

    def world(self, cr: BrokerResource) -> World: ...

    def ensure(self, cr: BrokerResource, obj: dict[str, Any], *, update: bool) -> None: ...

    def send(self, cr: BrokerResource, op: Operation) -> None: ...

    def event(self, body: dict[str, Any], kind: str, reason: str, message: str) -> None: ...


def reconcile(body: dict[str, Any], api: Api, now: float | None = None) -> dict[str, Any]:
    """One round for the PetrelBroker ``body``; returns its new ``status``."""
    now = time.time() if now is None else now
    cr = parse(body)
    world = api.world(cr)
    seen = observe(cr, world, now)
    plan = decide(cr.spec, seen, cr.policy)
    ops = operations(cr, world, seen, plan, now)
    replicas = next((o.body["spec"]["replicas"] for o in ops if o.kind == "StatefulSet"),
                    ((world.stateful_set or {}).get("spec") or {}).get("replicas", 0))
    api.ensure(cr, secret(cr, secrets.token_urlsafe(24), secrets.token_urlsafe(16)), update=False)
    for obj in broker_objects(cr, replicas):
        if obj["kind"] != "StatefulSet" or world.stateful_set is not None:
            api.ensure(cr, obj, update=True)
    for op in ops:
        api.send(cr, op)
        if op.event is not None:
            api.event(body, *op.event)
    for line in plan.stuck:
        api.event(body, "Warning", "DrainGaveUp", line)
    return status(cr, world, seen, plan, now, previous=body.get("status"),
                  generation=(body.get("metadata") or {}).get("generation"))


class KubernetesApi:
    """`Api` on the kubernetes client (in-cluster config, or the kubeconfig outside)."""

    def __init__(self, api_client: Any = None) -> None:
        """``api_client``: a configured ``kubernetes.client.ApiClient``; None: the in-cluster config,
        or else the kubeconfig."""
        import kubernetes

        if api_client is None:
            try:
                kubernetes.config.load_incluster_config()
            except kubernetes.config.ConfigException:
                kubernetes.config.load_kube_config()
            api_client = kubernetes.client.ApiClient()
        self.k8s = kubernetes
        self.api_client = api_client
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.batch = kubernetes.client.BatchV1Api(api_client)

    def _dict(self, obj: Any) -> dict[str, Any]:
        return self.api_client.sanitize_for_serialization(obj)

    def _missing(self, exc: Exception) -> bool:
        return isinstance(exc, self.k8s.client.ApiException) and exc.status == 404

    def world(self, cr: BrokerResource) -> World:
        ns, instance = cr.namespace, f"app.kubernetes.io/instance={cr.name}"
        try:
            sts = self._dict(self.apps.read_namespaced_stateful_set(cr.name, ns))
        except self.k8s.client.ApiException as exc:
            if not self._missing(exc):
                raise
            sts = None
        pods = self._dict(self.core.list_namespaced_pod(ns, label_selector=f"{instance},"
                                                        "app.kubernetes.io/component=broker")).get("items", [])
        pvcs = self._dict(self.core.list_namespaced_persistent_volume_claim(
            ns, label_selector=f"{instance},app.kubernetes.io/component=broker-data")).get("items", [])
        jobs = self._dict(self.batch.list_namespaced_job(
            ns, label_selector=f"{instance},app.kubernetes.io/component=drainer")).get("items", [])
        return World(sts, pods, pvcs, jobs)

    def _calls(self, kind: str) -> tuple[Any, Any, Any, Any]:
        """(read, create, patch, delete) of ``kind``."""
        core, apps, batch = self.core, self.apps, self.batch
        return {
            "Service": (core.read_namespaced_service, core.create_namespaced_service, core.patch_namespaced_service,
                        core.delete_namespaced_service),
            "ConfigMap": (core.read_namespaced_config_map, core.create_namespaced_config_map,
                          core.patch_namespaced_config_map, core.delete_namespaced_config_map),
            "Secret": (core.read_namespaced_secret, core.create_namespaced_secret, core.patch_namespaced_secret,
                       core.delete_namespaced_secret),
            "StatefulSet": (apps.read_namespaced_stateful_set, apps.create_namespaced_stateful_set,
                            apps.patch_namespaced_stateful_set, apps.delete_namespaced_stateful_set),
            "PersistentVolumeClaim": (core.read_namespaced_persistent_volume_claim,
                                      core.create_namespaced_persistent_volume_claim,
                                      core.patch_namespaced_persistent_volume_claim,
                                      core.delete_namespaced_persistent_volume_claim),
            "Job": (batch.read_namespaced_job, batch.create_namespaced_job, batch.patch_namespaced_job,
                    batch.delete_namespaced_job),
        }[kind]

    def ensure(self, cr: BrokerResource, obj: dict[str, Any], *, update: bool) -> None:
        read, create, patch, _ = self._calls(obj["kind"])
        name = obj["metadata"]["name"]
        try:
            read(name, cr.namespace)
        except self.k8s.client.ApiException as exc:
            if not self._missing(exc):
                raise
            create(cr.namespace, obj)
            return
        if update:
            body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
            if obj["kind"] == "StatefulSet":  # replicas are the operations' business; the template ours
                body = {"spec": {"template": obj["spec"]["template"]}}
            patch(name, cr.namespace, body, _content_type=MERGE_PATCH)

    def send(self, cr: BrokerResource, op: Operation) -> None:
        _, create, patch, delete = self._calls(op.kind)
        try:
            if op.verb == "create":
                create(cr.namespace, op.body)
            elif op.verb == "patch":
                patch(op.name, cr.namespace, op.body, _content_type=MERGE_PATCH)
            elif op.verb == "delete":
                delete(op.name, cr.namespace, propagation_policy=op.body.get("propagationPolicy", "Background"))
        except self.k8s.client.ApiException as exc:
            if op.verb == "create" and exc.status == 409:
                return  # made by the previous round: idempotent
            if op.verb == "delete" and exc.status == 404:
                return
            raise

    def event(self, body: dict[str, Any], kind: str, reason: str, message: str) -> None:
        import kopf

        kopf.event(body, type=kind, reason=reason, message=message)


def register(api_factory=KubernetesApi, interval: float = INTERVAL_S) -> None:
    """Register the handlers on kopf's default registry (``python -m petrel.operator run``)."""
    import kopf

    state: dict[str, Api] = {}

    def api() -> Api:
        if "api" not in state:
            state["api"] = api_factory()
        return state["api"]

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = f"{GROUP}/operator"
        settings.posting.level = logging.INFO

    def handle(body: Any, patch: Any, **_: Any) -> None:
        try:
            result = reconcile(dict(body), api())
        except ValueError as exc:  # a spec the schema let through but the operator cannot act on
            raise kopf.PermanentError(str(exc)) from None
        patch.status.update(result)

    kopf.on.resume(GROUP, VERSION, PLURAL)(handle)
    kopf.on.create(GROUP, VERSION, PLURAL)(handle)
    kopf.on.update(GROUP, VERSION, PLURAL, field="spec")(handle)
    kopf.timer(GROUP, VERSION, PLURAL, interval=interval, idle=0)(handle)
    log.debug("handlers registered for %s/%s %s (every %g s)", GROUP, VERSION, PLURAL, interval)
