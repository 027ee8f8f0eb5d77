"""The cluster password a broker starts with: the well-known default is refused when security is on.

Every node of a cluster (bridges, replication, quorum votes, scale-down) logs in to the others
with ``cluster_user`` and ``cluster_password``, and the UDP announcements are sealed with a key
derived from them. With Artemis's default password (``CHANGE ME!!``), anyone who can reach a
node could join the cluster and read every message, so a broker with security enabled that
uses the cluster credentials refuses to start with it.
"""

from __future__ import annotations

from petrel.cluster.config import DEFAULT_CLUSTER_PASSWORD
from petrel.errors import ConfigError

__all__ = ["check_cluster_password", "uses_cluster_credentials"]

_GENERATE = "python -c 'import secrets; print(secrets.token_urlsafe(24))'"


def uses_cluster_credentials(config) -> list[str]:
    """What in `config` logs in to other nodes with the cluster credentials (empty: nothing)."""
    uses = []
    if config.cluster_connections:
        uses.append("[[cluster_connections]]")
    if config.broadcast_groups or config.discovery_groups:
        uses.append("UDP discovery")
    ha = config.ha_policy
    if ha.replication is not None:
        uses.append(f'[ha_policy] replication = "{ha.replication}"')
    if ha.scale_down is not None and ha.scale_down.enabled:
        uses.append("[ha_policy.scale_down]")
    return uses


def check_cluster_password(config) -> None:
    """Raise `ConfigError` when security is enabled and the cluster runs on the default password."""
    if not config.security_enabled:
        return
    uses = uses_cluster_credentials(config)
    if not uses:
        return
    if config.cluster_password == DEFAULT_CLUSTER_PASSWORD or not config.cluster_password.strip():
        what = "the default" if config.cluster_password else "empty"
        raise ConfigError(
            f"cluster_password is {what} while security is enabled and this broker uses it "
            f"({', '.join(uses)}): anyone who knows it could join the cluster. Set the same secret "
            f'on every node: cluster_password = "..." in broker.toml, or PETREL_CLUSTER_PASSWORD '
            f"(make one with {_GENERATE}); `petrel create --cluster-password` and `petrel cluster up` "
            "write one for you")
