"""Every object the operator makes, validated offline against the Kubernetes OpenAPI schemas (the
kubernetes-validate package ships them), the PetrelBroker examples against the CRD's own
openAPIV3Schema, and deploy/*.yaml equal to what the code generates."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from petrel.config import load_config
from petrel.operator import manifests
from petrel.operator.crd import SpecError, crd, parse
from petrel.operator.deploy import operator_deployment, rbac
from petrel.operator.manifests import broker_toml_template, config_map, drain_job, headless_service, secret, stateful_set
from petrel.security.users import UserStore

kubernetes_validate = pytest.importorskip("kubernetes_validate")
yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: the oldest Kubernetes the manifests must suit (StatefulSet PVC retention is GA in 1.32)
VERSIONS = ["1.32.0", kubernetes_validate.latest_version()]


def resource(**plan):
    body = {"apiVersion": "petrel.io/v1alpha1", "kind": "PetrelBroker",
            "metadata": {"name": "brokers", "namespace": "mq", "uid": "0f2c-uid"},
            "spec": {"deploymentPlan": {"size": 3, **plan}}}
    return parse(body)


def every_object():
    crs = {"default": resource(), "no-persistence": resource(persistenceEnabled=False),
           "resources": resource(resources={"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": 2}},
                                 storage={"size": "10Gi", "storageClassName": "fast"}, image="registry/petrel:1")}
    for label, cr in crs.items():
        yield f"{label}-service", headless_service(cr)
        yield f"{label}-configmap", config_map(cr)
        yield f"{label}-secret", secret(cr, "s3cret", "admin-s3cret")
        for replicas in (0, 1, 3):
            yield f"{label}-statefulset-{replicas}", stateful_set(cr, replicas)
        yield f"{label}-drain-job", drain_job(cr, 2, 0, 3)
    yield "crd", crd()
    for obj in rbac():
        yield f"rbac-{obj['kind']}", obj
    yield "operator", operator_deployment()


OBJECTS = list(every_object())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("label", "obj"), OBJECTS, ids=[o[0] for o in OBJECTS])
def test_every_object_is_valid_kubernetes(label, obj, version):
    kubernetes_validate.validate(copy.deepcopy(obj), version, strict=True)


def test_the_validator_does_refuse_a_bad_object():
    bad = stateful_set(resource(), 3)
    bad["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)
    typo = stateful_set(resource(), 3)
    typo["spec"]["volumeClaimTemplate"] = typo["spec"].pop("volumeClaimTemplates")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, VERSIONS[-1], strict=True)


def _cr_schema() -> dict:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_example_resource_matches_the_crd_schema():
    (example,) = list(yaml.safe_load_all((DEPLOY / "example.yaml").read_text()))
    jsonschema.validate(example, _cr_schema())
    cr = parse(example)
    assert (cr.size, cr.persistence_enabled, cr.message_migration) == (3, True, True)
    assert cr.policy.max_attempts is None and cr.policy.backoff_cap_s == 300


@pytest.mark.parametrize("plan", [{"size": -1}, {"size": "3"}, {"persistenceEnabled": True},
                                  {"size": 1, "messageMigration": "yes"}, {"size": 1, "storage": {"size": 5}}])
def test_the_crd_schema_refuses_bad_specs(plan):
    body = {"apiVersion": "petrel.io/v1alpha1", "kind": "PetrelBroker", "metadata": {"name": "x"},
            "spec": {"deploymentPlan": plan}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, _cr_schema())


def test_parse_says_which_field_is_wrong():
    with pytest.raises(SpecError, match="spec.deploymentPlan.size is required"):
        parse({"metadata": {"name": "x"}, "spec": {"deploymentPlan": {}}})
    with pytest.raises(SpecError, match="spec.drainPolicy.parallelDrains"):
        parse({"metadata": {"name": "x"}, "spec": {"deploymentPlan": {"size": 1}, "drainPolicy": {"parallelDrains": 0}}})


@pytest.mark.parametrize(("name", "which"), [("crd.yaml", "crd"), ("rbac.yaml", "rbac"), ("operator.yaml", "operator")])
def test_deploy_files_are_what_the_code_generates(name, which):
    shipped = list(yaml.safe_load_all((DEPLOY / name).read_text()))
    generated = {"crd": [crd()], "rbac": rbac(), "operator": [operator_deployment()]}[which]
    assert shipped == generated, f"deploy/{name} is stale: python -m petrel.operator manifests {which} > deploy/{name}"


def test_the_statefulset_keeps_volumes_and_never_retries_a_drain_itself():
    cr = resource()
    sts = stateful_set(cr, 2)["spec"]
    assert sts["replicas"] == 2 and sts["serviceName"] == "brokers-hdls"
    assert sts["persistentVolumeClaimRetentionPolicy"] == {"whenScaled": "Retain", "whenDeleted": "Retain"}
    assert sts["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    job = drain_job(cr, 2, 0, 3)
    assert job["metadata"]["name"] == "brokers-drain-2-3"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "data-brokers-2"
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:5] == ["petrel", "drain", "--data-dir", "/data", "--target"]
    assert command[5] == "tcp://brokers-0.brokers-hdls.mq.svc:61616"
    assert command[-2:] == ["--progress", "json"]


@pytest.mark.parametrize("pod", ["brokers-0", "brokers-2"])
def test_the_pod_start_script_writes_a_config_the_broker_accepts(tmp_path, pod):
    """Run the broker container's shell command here, on the ConfigMap's template."""
    cr = resource()
    template = tmp_path / "broker.toml.in"
    template.write_text(broker_toml_template(cr))
    script = stateful_set(cr, 3)["spec"]["template"]["spec"]["containers"][0]["command"][2]
    script = script.replace("/etc/petrel/broker.toml.in", str(template)).replace("/tmp/broker.toml", str(tmp_path / "out.toml"))
    script = script.replace("/data/users.toml", str(tmp_path / "users.toml")).split(" && exec ")[0]
    env = {**os.environ, "POD_NAME": pod, "ADMIN_PASSWORD": "admin-s3cret",  # admin's, from the Secret
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for _ in range(2):  # a restarted pod keeps the users file it made
        subprocess.run(["sh", "-c", script], check=True, env=env)
        users = UserStore.load(tmp_path / "users.toml")
        assert list(users.users) == ["admin"] and users.authenticate("admin", "admin-s3cret") is not None
        env["ADMIN_PASSWORD"] = "another"
    config = load_config(tmp_path / "out.toml", env={"PETREL_CLUSTER_PASSWORD": "s3cret"})
    assert config.name == pod and config.cluster_password == "s3cret"
    (cc,) = config.cluster_connections
    assert cc.connector == f"tcp://{pod}.brokers-hdls.mq.svc:61616"
    others = sorted({"brokers-0", "brokers-1", "brokers-2"} - {pod})
    assert cc.static_connectors == [f"tcp://{o}.brokers-hdls.mq.svc:61616" for o in others]


def test_objects_are_owned_by_the_resource_but_volumes_are_not():
    cr = resource()
    for obj in (headless_service(cr), config_map(cr), stateful_set(cr, 1), drain_job(cr, 1, 0, 1)):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("PetrelBroker", "0f2c-uid", True)
    claim = stateful_set(cr, 1)["spec"]["volumeClaimTemplates"][0]["metadata"]
    assert "ownerReferences" not in claim  # a PVC goes only after its drain, never with the resource
    assert manifests.pvc_name(cr, 4) == "data-brokers-4"
