"""``python -m petrel.operator run|manifests``: run the operator (kopf), or print what deploys it."""

from __future__ import annotations

import json
import sys

import click

from petrel.operator.deploy import DEFAULT_NAMESPACE, DEFAULT_OPERATOR_IMAGE, operator_deployment, rbac
from petrel.operator.crd import crd


def dump(objects: list[dict]) -> str:
    """YAML documents (PyYAML, when installed), else JSON (which kubectl reads too)."""
    try:
        import yaml
    except ImportError:
        return "\n".join(json.dumps(o, indent=2) for o in objects) + "\n"
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=120)


@click.group(help="The Petrel Kubernetes operator (needs `pip install 'petrel[k8s]'` to run).")
def main() -> None:
    pass


@main.command("run", help="Run the operator against the cluster of the in-cluster config or the kubeconfig.")
@click.option("--namespace", "namespaces", multiple=True, help="Watch only these namespaces (repeatable).")
@click.option("--all-namespaces", is_flag=True, help="Watch every namespace.")
@click.option("--interval", type=click.FloatRange(1), default=10, show_default=True, metavar="SECONDS",
              help="How often each PetrelBroker is reconciled besides its changes.")
def run(namespaces: tuple[str, ...], all_namespaces: bool, interval: float) -> None:
    if bool(namespaces) == all_namespaces:
        raise click.UsageError("give --namespace NS (one or more) or --all-namespaces")
    try:
        import kopf
    except ImportError:
        click.echo("petrel: error: the operator needs kopf and kubernetes: pip install 'petrel[k8s]'", err=True)
        sys.exit(1)
    from petrel.operator.handlers import register

    register(interval=interval)
    kopf.configure(verbose=False)
    kopf.run(standalone=True, clusterwide=all_namespaces, namespaces=namespaces,
             liveness_endpoint="http://0.0.0.0:8080/healthz")


@main.command("manifests", help="Print the CRD, the RBAC and the operator's Deployment as YAML documents "
                                 "(deploy/crd.yaml, rbac.yaml, operator.yaml).")
@click.argument("which", type=click.Choice(["crd", "rbac", "operator", "all"]), default="all")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True)
@click.option("--image", default=DEFAULT_OPERATOR_IMAGE, show_default=True)
def manifests(which: str, namespace: str, image: str) -> None:
    parts = {"crd": [crd()], "rbac": rbac(namespace), "operator": [operator_deployment(namespace, image)]}
    objects = [o for name, objs in parts.items() if which in (name, "all") for o in objs]
    click.echo(dump(objects), nl=False)


if __name__ == "__main__":
    main()
