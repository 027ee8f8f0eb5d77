"""The Kubernetes objects of one PetrelBroker, as pure functions of its `BrokerResource`.

* a headless Service ``<name>-hdls`` (each broker is ``<name>-<i>.<name>-hdls``),
* a ConfigMap ``<name>-config`` with ``broker.toml.in`` (the pod writes its own name into it),
* a Secret ``<name>-cluster`` with the cluster password (made once, never rewritten),
* a StatefulSet ``<name>`` with a PVC ``data-<name>-<i>`` per broker (volumeClaimTemplates,
  kept on scale-down and on delete: the operator deletes a PVC itself, after its drain),
* a drainer Job ``<name>-drain-<i>-<attempt>`` per attempt on a retired PVC.

Nothing here talks to an API server; the tests validate every object against the Kubernetes
OpenAPI schemas offline.
"""

from __future__ import annotations

import json
from typing import Any

from petrel.operator.crd import GROUP, KIND, VERSION, BrokerResource

__all__ = [
    "CLUSTER_USER", "CORE_PORT", "DATA_VOLUME", "ORDINAL_LABEL", "RETIRED_ANNOTATION", "broker_objects",
    "config_map", "drain_job", "drain_job_name", "headless_service", "labels", "pod_host", "pvc_name",
    "secret", "selector", "stateful_set",
]

CORE_PORT = 61616
HTTP_PORT = 8161
DATA_VOLUME = "data"
CLUSTER_USER = "petrel-cluster"
#: On a PVC: retired by a scale-down (the value is when). Never again a broker's until deleted.
RETIRED_ANNOTATION = f"{GROUP}/retired"
ORDINAL_LABEL = f"{GROUP}/ordinal"
ATTEMPT_LABEL = f"{GROUP}/drain-attempt"
COMPONENT_LABEL = "app.kubernetes.io/component"
PASSWORD_KEY = "cluster-password"
ADMIN_KEY = "admin-password"  # the user admin's, made with the Secret (read it with kubectl)


def labels(cr: BrokerResource, component: str = "broker") -> dict[str, str]:
    return {"app.kubernetes.io/name": "petrel", "app.kubernetes.io/instance": cr.name,
            "app.kubernetes.io/managed-by": "petrel-operator", COMPONENT_LABEL: component}


def selector(cr: BrokerResource, component: str = "broker") -> dict[str, str]:
    return {"app.kubernetes.io/instance": cr.name, COMPONENT_LABEL: component}


def selector_string(cr: BrokerResource, component: str = "broker") -> str:
    return ",".join(f"{k}={v}" for k, v in selector(cr, component).items())


def _owner(cr: BrokerResource) -> list[dict[str, Any]]:
    return [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": cr.name, "uid": cr.uid,
             "controller": True, "blockOwnerDeletion": True}]


def _meta(cr: BrokerResource, name: str, component: str = "broker") -> dict[str, Any]:
    return {"name": name, "namespace": cr.namespace, "labels": labels(cr, component), "ownerReferences": _owner(cr)}


def service_name(cr: BrokerResource) -> str:
    return f"{cr.name}-hdls"


def pvc_name(cr: BrokerResource, ordinal: int) -> str:
    return f"{DATA_VOLUME}-{cr.name}-{ordinal}"


def pod_host(cr: BrokerResource, ordinal: int) -> str:
    return f"{cr.name}-{ordinal}.{service_name(cr)}.{cr.namespace}.svc"


def drain_job_name(cr: BrokerResource, ordinal: int, attempt: int) -> str:
    return f"{cr.name}-drain-{ordinal}-{attempt}"


def headless_service(cr: BrokerResource) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(cr, service_name(cr)),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": selector(cr),
                     "ports": [{"name": "core", "port": CORE_PORT, "targetPort": CORE_PORT},
                               {"name": "http", "port": HTTP_PORT, "targetPort": HTTP_PORT}]}}


def broker_toml_template(cr: BrokerResource) -> str:
    """Every broker names every member as a static connector, one a line (the pod deletes its own
    line); ``@POD_NAME@`` is the pod's own name."""
    members = [f"tcp://{pod_host(cr, i)}:{CORE_PORT}" for i in range(max(cr.size, 1))]
    lines = [
        f"# written by the Petrel operator for PetrelBroker {cr.namespace}/{cr.name}",
        'name = "@POD_NAME@"',
        'data_dir = "/data"',
        'host = "0.0.0.0"',
        f"port = {CORE_PORT}",
        f"http_port = {HTTP_PORT}",
        'http_host = "0.0.0.0"  # the kubelet probes /health on the pod IP',
        f"cluster_user = {json.dumps(CLUSTER_USER)}",
        "# cluster_password: PETREL_CLUSTER_PASSWORD, from the Secret",
        f"persistence_enabled = {'true' if cr.persistence_enabled else 'false'}",
        "",
        "[[cluster_connections]]",
        f"name = {json.dumps(cr.name)}",
        f'connector = "tcp://@POD_NAME@.{service_name(cr)}.{cr.namespace}.svc:{CORE_PORT}"',
        "static_connectors = [",
        *(f"  {json.dumps(url)}," for url in members),
        "]",
        'message_load_balancing = "ON_DEMAND"',
        "max_hops = 1",
        "",
    ]
    return "\n".join(lines)


def config_map(cr: BrokerResource) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cr, f"{cr.name}-config"),
            "data": {"broker.toml.in": broker_toml_template(cr)}}


def secret(cr: BrokerResource, password: str, admin_password: str) -> dict[str, Any]:
    """The cluster password, and the password of the user ``admin`` every broker starts with."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(cr, f"{cr.name}-cluster"), "type": "Opaque",
            "stringData": {PASSWORD_KEY: password, ADMIN_KEY: admin_password}}


def _password_env(cr: BrokerResource) -> dict[str, Any]:
    return {"name": "PETREL_CLUSTER_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": f"{cr.name}-cluster", "key": PASSWORD_KEY}}}


#: A broker's first start makes its users file (in its data directory) with the user admin, whose
#: password is the Secret's (env ADMIN_PASSWORD, not a PETREL_ setting): every broker of the
#: resource has the same admin.
ADMIN_USER = ('[ -f /data/users.toml ] || petrel user add admin --role admin --password "$ADMIN_PASSWORD" '
              "--user-file /data/users.toml || exit 1")


def _broker_container(cr: BrokerResource) -> dict[str, Any]:
    start = (f'{ADMIN_USER}; sed -e "/^  \\"tcp:\\/\\/$POD_NAME\\./d" -e "s/@POD_NAME@/$POD_NAME/g" '
             "/etc/petrel/broker.toml.in > /tmp/broker.toml && exec petrel run --config /tmp/broker.toml")
    container: dict[str, Any] = {
        "name": "broker", "image": cr.image, "command": ["sh", "-c", start],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, _password_env(cr),
                {"name": "ADMIN_PASSWORD",  # for ADMIN_USER
                 "valueFrom": {"secretKeyRef": {"name": f"{cr.name}-cluster", "key": ADMIN_KEY}}}],
        "ports": [{"name": "core", "containerPort": CORE_PORT}, {"name": "http", "containerPort": HTTP_PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": "core"}, "periodSeconds": 10, "failureThreshold": 6,
                          "initialDelaySeconds": 10},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/petrel", "readOnly": True}],
    }
    if cr.persistence_enabled:
        container["volumeMounts"].append({"name": DATA_VOLUME, "mountPath": "/data"})
    if cr.resources:
        container["resources"] = cr.resources
    return container


def stateful_set(cr: BrokerResource, replicas: int) -> dict[str, Any]:
    """The brokers. ``replicas`` is what the decision core allows to run (at most the size: never a
    broker on a PVC being drained)."""
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": f"{cr.name}-config"}}]
    spec: dict[str, Any] = {
        "serviceName": service_name(cr),
        "replicas": replicas,
        "podManagementPolicy": "OrderedReady",
        "selector": {"matchLabels": selector(cr)},
        "template": {
            "metadata": {"labels": labels(cr)},
            "spec": {"terminationGracePeriodSeconds": 60, "containers": [_broker_container(cr)], "volumes": volumes,
                     "securityContext": {"runAsNonRoot": True, "fsGroup": 1000, "runAsUser": 1000}},
        },
    }
    if cr.persistence_enabled:
        claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                                 "resources": {"requests": {"storage": cr.storage_size}}}
        if cr.storage_class:
            claim["storageClassName"] = cr.storage_class
        spec["volumeClaimTemplates"] = [{"metadata": {"name": DATA_VOLUME, "labels": labels(cr, "broker-data")},
                                         "spec": claim}]
        # a scaled-down broker's PVC stays for its drain; the operator deletes it after success
        spec["persistentVolumeClaimRetentionPolicy"] = {"whenScaled": "Retain", "whenDeleted": "Retain"}
    else:
        volumes.append({"name": DATA_VOLUME, "emptyDir": {}})
        spec["template"]["spec"]["containers"][0]["volumeMounts"].append({"name": DATA_VOLUME, "mountPath": "/data"})
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta(cr, cr.name), "spec": spec}


def drain_job(cr: BrokerResource, ordinal: int, target: int, attempt: int) -> dict[str, Any]:
    """One attempt at draining ``data-<name>-<ordinal>`` onto broker ``target``. The Job itself
    never retries (backoffLimit 0): the operator does, with its backoff, counting attempts."""
    job_labels = labels(cr, "drainer") | {ORDINAL_LABEL: str(ordinal), ATTEMPT_LABEL: str(attempt)}
    target_url = f"tcp://{pod_host(cr, target)}:{CORE_PORT}"
    container = {
        "name": "drainer", "image": cr.image,
        "command": ["petrel", "drain", "--data-dir", "/data", "--target", target_url, "--user", CLUSTER_USER,
                    "--progress", "json"],
        "env": [_password_env(cr)],  # the drainer reads PETREL_CLUSTER_PASSWORD: never on a command line
        "volumeMounts": [{"name": DATA_VOLUME, "mountPath": "/data"}],
    }
    if cr.resources:
        container["resources"] = cr.resources
    meta = _meta(cr, drain_job_name(cr, ordinal, attempt), "drainer")
    meta["labels"] = job_labels
    meta["annotations"] = {f"{GROUP}/volume": pvc_name(cr, ordinal), f"{GROUP}/target": target_url}
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": job_labels},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "containers": [container],
                         "securityContext": {"runAsNonRoot": True, "fsGroup": 1000, "runAsUser": 1000},
                         "volumes": [{"name": DATA_VOLUME,
                                      "persistentVolumeClaim": {"claimName": pvc_name(cr, ordinal)}}]},
            },
        },
    }


def broker_objects(cr: BrokerResource, replicas: int) -> list[dict[str, Any]]:
    """What must exist for the brokers (the Secret apart: made once, see `secret`)."""
    return [headless_service(cr), config_map(cr), stateful_set(cr, replicas)]
