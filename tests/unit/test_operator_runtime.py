"""The operator's runtime seams: Petrel and the operator's pure modules import without kopf and
kubernetes; with kopf, the handlers register on PetrelBroker; the CLI prints the manifests."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_petrel_and_the_pure_operator_modules_need_neither_kopf_nor_kubernetes():
    code = ("import sys; sys.modules['kopf'] = None; sys.modules['kubernetes'] = None\n"
            "import petrel.operator.handlers, petrel.operator.backend, petrel.operator.deploy\n"
            "import petrel.cli.cluster, petrel.orchestrator.scaling\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_run_without_kopf_says_what_to_install():
    code = ("import sys; sys.modules['kopf'] = None\n"
            "sys.argv = ['petrel.operator', 'run', '--all-namespaces']\n"
            "from petrel.operator.__main__ import main; main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "pip install 'petrel[k8s]'" in out.stderr


def test_run_needs_a_namespace_choice():
    out = subprocess.run([sys.executable, "-m", "petrel.operator", "run"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--all-namespaces" in out.stderr


def test_the_handlers_register_on_petrelbroker():
    kopf = pytest.importorskip("kopf")
    from petrel.operator.handlers import register

    registry = kopf.OperatorRegistry()
    previous = kopf.get_default_registry()
    kopf.set_default_registry(registry)
    try:
        register(api_factory=lambda: None, interval=5)
    finally:
        kopf.set_default_registry(previous)
    resources = {h.selector.any_name for h in registry._spawning.get_all_handlers()} | \
        {h.selector.any_name for h in registry._changing.get_all_handlers()}
    assert resources == {"petrelbrokers"}
    assert len(registry._changing.get_all_handlers()) == 3  # resume, create, update
    assert len(registry._spawning.get_all_handlers()) == 1  # the timer


def test_manifests_command_prints_every_deploy_document():
    yaml = pytest.importorskip("yaml")
    out = subprocess.run([sys.executable, "-m", "petrel.operator", "manifests", "all", "--namespace", "mq-ops"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole",
                                         "ClusterRoleBinding", "Deployment"]
    assert docs[-1]["metadata"]["namespace"] == "mq-ops"
