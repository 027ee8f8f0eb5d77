"""The ``broker.toml`` the local orchestrator writes for each node.

Every node names every other node as a static connector of one cluster connection, so the
cluster keeps together whichever half of a pair is live. With ``--ha`` each pair ``pair-i``
(its ``group_name``) is a primary ``node-i`` and a backup ``node-i-backup``; shared store puts
both on the primary's data directory, replication gives each its own, and with a lock manager
both name the orchestrator's ZooKeeper.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from petrel.orchestrator.state import HA_KINDS, HOST, ClusterSpec, Node
from petrel.orchestrator.users import users_file

__all__ = ["CLUSTER_USER", "broker_toml", "toml_string"]

CLUSTER_USER = "petrel-cluster"


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string (ASCII, escaped) is a TOML basic string


def _connectors(node: Node, nodes: Sequence[Node]) -> list[str]:
    """The other nodes' connectors; a backup names its own primary first (it registers there)."""
    others = [n for n in nodes if n.name != node.name]
    others.sort(key=lambda n: (n.pair != node.pair, n.index, n.role != "primary"))
    return [f"tcp://{HOST}:{n.port}" for n in others]


def _ha_policy(spec: ClusterSpec, node: Node, zookeeper: str | None) -> list[str]:
    if spec.ha is None:
        return []
    lines = ["[ha_policy]", f"{HA_KINDS[spec.ha]} = {toml_string(node.role)}",
             f"group_name = {toml_string(node.pair or '')}"]
    if zookeeper is not None:
        lines.append(f"lock_manager = {{ type = \"zookeeper\", connect_string = {toml_string(zookeeper)}, "
                     f"session_ms = {spec.lock_session_ms} }}")
    return [*lines, ""]


def broker_toml(spec: ClusterSpec, node: Node, nodes: Sequence[Node], password: str,
                zookeeper: str | None = None) -> str:
    """The ``broker.toml`` of ``node`` among ``nodes``: its ports and data directory, the shared
    cluster credentials, a static cluster connection to every other node and, with HA, its
    ``[ha_policy]`` (``zookeeper``: the lock manager's connect string)."""
    what = f"node {node.index} of {spec.size}" if spec.ha is None else \
        f"the {node.role} of {node.pair}, one of {spec.size} pairs ({spec.ha})"
    return "\n".join([
        f"# written by `petrel cluster up`; {what} of cluster {spec.name!r}",
        f"name = {toml_string(node.name)}",
        f"data_dir = {toml_string(node.data_dir)}",
        *([] if spec.persistence_enabled else ["persistence_enabled = false"]),
        f"host = {toml_string(HOST)}",
        f"port = {node.port}",
        f"stomp_port = {node.stomp_port}",
        f"http_port = {node.http_port}",
        f"cluster_user = {toml_string(CLUSTER_USER)}",
        f"cluster_password = {toml_string(password)}",
        f"security = {{ users_file = {toml_string(str(users_file(spec.data_root)))} }}  # one for every node",
        "",
        '[address_settings."#"]',
        f"redistribution_delay = {spec.redistribution_delay}",
        "",
        *_ha_policy(spec, node, zookeeper),
        "[[cluster_connections]]",
        f"name = {toml_string(spec.name)}",
        f"connector = {toml_string(f'tcp://{HOST}:{node.port}')}",
        f"static_connectors = [{', '.join(toml_string(url) for url in _connectors(node, nodes))}]",
        f"message_load_balancing = {toml_string(spec.load_balancing)}",
        "max_hops = 1",
        "",
    ])
