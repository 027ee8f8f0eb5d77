"""What installs the operator on a cluster: its ServiceAccount and RBAC (``deploy/rbac.yaml``) and
its Deployment (``deploy/operator.yaml``), as pure functions; ``python -m petrel.operator
manifests`` prints them and the CRD (``deploy/crd.yaml``)."""

from __future__ import annotations

from typing import Any

from petrel.operator.crd import GROUP, PLURAL

__all__ = ["DEFAULT_NAMESPACE", "OPERATOR_NAME", "operator_deployment", "rbac"]

DEFAULT_NAMESPACE = "petrel-system"
OPERATOR_NAME = "petrel-operator"
DEFAULT_OPERATOR_IMAGE = "petrel:0.1.0"


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": OPERATOR_NAME, "app.kubernetes.io/part-of": "petrel"}


def rbac(namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
    """A ServiceAccount and a ClusterRole bound to it: what the operator reads and writes in the
    namespaces it watches (PetrelBrokers and their StatefulSets, Services, ConfigMaps, Secrets,
    PVCs, drainer Jobs, pods to read, events to write), plus what kopf needs to watch."""
    rw = ["get", "list", "watch", "create", "update", "patch", "delete"]
    rules = [
        {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": rw},
        {"apiGroups": [""], "resources": ["services", "configmaps", "secrets", "persistentvolumeclaims"],
         "verbs": rw},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": rw},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["list", "watch"]},
    ]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": _labels()}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": OPERATOR_NAME, "namespace": namespace, "labels": _labels()}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": OPERATOR_NAME, "labels": _labels()}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": OPERATOR_NAME, "labels": _labels()},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OPERATOR_NAME},
         "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_NAME, "namespace": namespace}]},
    ]


def operator_deployment(namespace: str = DEFAULT_NAMESPACE, image: str = DEFAULT_OPERATOR_IMAGE) -> dict[str, Any]:
    """One replica (kopf runs standalone: no peering objects), watching every namespace."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": OPERATOR_NAME, "namespace": namespace, "labels": _labels()},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": _labels()},
            "template": {
                "metadata": {"labels": _labels()},
                "spec": {
                    "serviceAccountName": OPERATOR_NAME,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                    "containers": [{
                        "name": "operator", "image": image,
                        "command": ["python", "-m", "petrel.operator", "run", "--all-namespaces"],
                        "ports": [{"name": "health", "containerPort": 8080}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "health"},
                                          "periodSeconds": 20, "failureThreshold": 3},
                        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                                      "limits": {"memory": "256Mi"}},
                    }],
                },
            },
        },
    }
