"""The ``PetrelBroker`` custom resource: its CustomResourceDefinition (with the openAPIV3Schema the
API server validates against) and the parsed spec the operator works from.

::

    apiVersion: petrel.io/v1alpha1
    kind: PetrelBroker
    metadata: {name: brokers}
    spec:
      deploymentPlan:
        size: 3                      # brokers (StatefulSet replicas)
        persistenceEnabled: true     # a PVC per broker
        messageMigration: true       # drain a leaving broker's PVC onto ordinal 0, then delete it
        image: petrel:0.1.0
        resources: {requests: {cpu: 500m, memory: 512Mi}}
        storage: {size: 2Gi, storageClassName: standard}
      drainPolicy: {backoffBaseSeconds: 10, backoffCapSeconds: 300, maxAttempts: 0, parallelDrains: 1}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from petrel.orchestrator.reconcile import Policy, Spec

__all__ = ["GROUP", "KIND", "PLURAL", "VERSION", "BrokerResource", "crd", "parse"]

GROUP = "petrel.io"
VERSION = "v1alpha1"
KIND = "PetrelBroker"
PLURAL = "petrelbrokers"
DEFAULT_IMAGE = "petrel:0.1.0"
DEFAULT_STORAGE = "2Gi"


class SpecError(ValueError):
    """A PetrelBroker whose spec the operator cannot act on (the API server's schema should have
    refused it): the message says which field and what it must be."""


@dataclass(frozen=True)
class BrokerResource:
    """One PetrelBroker, as the operator reads it."""

    name: str
    namespace: str
    uid: str
    size: int
    persistence_enabled: bool = True
    message_migration: bool = True
    image: str = DEFAULT_IMAGE
    resources: dict[str, Any] = field(default_factory=dict)
    storage_size: str = DEFAULT_STORAGE
    storage_class: str | None = None
    policy: Policy = Policy(backoff_base_s=10.0, backoff_cap_s=300.0)

    @property
    def spec(self) -> Spec:
        return Spec(self.size, self.persistence_enabled, self.message_migration)


def _int(value: Any, path: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{path} must be an integer of at least {minimum}, not {value!r}")
    return value


def parse(body: dict[str, Any]) -> BrokerResource:
    """The PetrelBroker ``body`` (a dict as the API returns it) as a `BrokerResource`."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    plan = spec.get("deploymentPlan") or {}
    if "size" not in plan:
        raise SpecError("spec.deploymentPlan.size is required")
    storage = plan.get("storage") or {}
    drain = spec.get("drainPolicy") or {}
    max_attempts = _int(drain.get("maxAttempts", 0), "spec.drainPolicy.maxAttempts")
    policy = Policy(backoff_base_s=float(_int(drain.get("backoffBaseSeconds", 10), "spec.drainPolicy.backoffBaseSeconds", 1)),
                    backoff_cap_s=float(_int(drain.get("backoffCapSeconds", 300), "spec.drainPolicy.backoffCapSeconds", 1)),
                    max_attempts=max_attempts or None,
                    max_parallel_drains=_int(drain.get("parallelDrains", 1), "spec.drainPolicy.parallelDrains", 1))
    return BrokerResource(
        name=meta.get("name", ""), namespace=meta.get("namespace", "default"), uid=meta.get("uid", ""),
        size=_int(plan["size"], "spec.deploymentPlan.size"),
        persistence_enabled=bool(plan.get("persistenceEnabled", True)),
        message_migration=bool(plan.get("messageMigration", True)),
        image=plan.get("image") or DEFAULT_IMAGE, resources=dict(plan.get("resources") or {}),
        storage_size=storage.get("size") or DEFAULT_STORAGE, storage_class=storage.get("storageClassName"),
        policy=policy)


def _quantity() -> dict[str, Any]:
    return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}


def _resources() -> dict[str, Any]:
    quantities = {"type": "object", "additionalProperties": _quantity()}
    return {"type": "object", "description": "The broker container's resources (requests, limits).",
            "properties": {"requests": quantities, "limits": quantities}}


def _spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["deploymentPlan"],
        "properties": {
            "deploymentPlan": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 0, "maximum": 100,
                             "description": "Brokers (StatefulSet replicas). 0 stops them all and drains nothing."},
                    "persistenceEnabled": {"type": "boolean", "default": True,
                                           "description": "A PersistentVolumeClaim per broker for its journal. "
                                                          "Fixed at creation (a StatefulSet's volume claims are).",
                                           "x-kubernetes-validations": [{
                                               "rule": "self == oldSelf",
                                               "message": "persistenceEnabled cannot change after creation: "
                                                          "create another PetrelBroker and move the messages"}]},
                    "messageMigration": {"type": "boolean", "default": True,
                                         "description": "On a scale-down, drain each leaving broker's volume onto a "
                                                        "live broker, and delete the volume only after the drain "
                                                        "succeeded. Needs persistenceEnabled."},
                    "image": {"type": "string", "default": DEFAULT_IMAGE},
                    "resources": _resources(),
                    "storage": {"type": "object", "properties": {
                        "size": {"type": "string", "default": DEFAULT_STORAGE},
                        "storageClassName": {"type": "string"}}},
                },
            },
            "drainPolicy": {
                "type": "object",
                "description": "How failed drainer Jobs are retried: after backoffBaseSeconds, doubling up to "
                               "backoffCapSeconds; maxAttempts 0 retries for ever.",
                "properties": {
                    "backoffBaseSeconds": {"type": "integer", "minimum": 1, "default": 10},
                    "backoffCapSeconds": {"type": "integer", "minimum": 1, "default": 300},
                    "maxAttempts": {"type": "integer", "minimum": 0, "default": 0},
                    "parallelDrains": {"type": "integer", "minimum": 1, "default": 1},
                },
            },
        },
    }


def _status_schema() -> dict[str, Any]:
    condition = {"type": "object", "required": ["type", "status"], "properties": {
        "type": {"type": "string"}, "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "reason": {"type": "string"}, "message": {"type": "string"},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "observedGeneration": {"type": "integer"}}}
    drain = {"type": "object", "properties": {
        "ordinal": {"type": "integer"}, "volume": {"type": "string"}, "phase": {"type": "string"},
        "attempts": {"type": "integer"}, "job": {"type": "string"}, "reason": {"type": "string"}}}
    return {"type": "object", "properties": {
        "size": {"type": "integer"}, "readyReplicas": {"type": "integer"}, "selector": {"type": "string"},
        "conditions": {"type": "array", "items": condition,
                       "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        "drains": {"type": "array", "items": drain},
        "waiting": {"type": "array", "items": {"type": "string"}},
        "kopf": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition (deploy/crd.yaml is this, as YAML)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": KIND.lower(), "listKind": f"{KIND}List",
                      "shortNames": ["pb"]},
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A cluster of Petrel brokers: a StatefulSet with a PVC per broker, drained "
                                   "on scale-down.",
                    "required": ["spec"],
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                   "metadata": {"type": "object"}, "spec": _spec_schema(),
                                   "status": _status_schema()}}},
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.deploymentPlan.size", "statusReplicasPath": ".status.readyReplicas",
                    "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.deploymentPlan.size"},
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
                    {"name": "Converged", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
                    {"name": "Draining", "type": "string",
                     "jsonPath": ".status.conditions[?(@.type=='Draining')].status"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
            }],
        },
    }
