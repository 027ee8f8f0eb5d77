"""Cluster settings in ``broker.toml``: connectors, broadcast and discovery groups, cluster
connections and the grouping handler, with Artemis's element names and defaults.

::

    cluster_user = "petrel.cluster"
    cluster_password = "a secret shared by every node"

    [connectors]
    self = "tcp://10.0.0.1:61616"

    [[cluster_connections]]
    name = "petrel-cluster"
    connector = "self"                        # a name from [connectors], or a URL
    static_connectors = ["tcp://10.0.0.2:61616"]
    message_load_balancing = "ON_DEMAND"
    max_hops = 1

Connectors are ``tcp://host:port`` URLs (``host:port`` is accepted too); ``ssl://host:port``
connectors are reached over TLS (the broker's ``ssl_ca`` trusted, its ``ssl_cert`` presented).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "DEFAULT_CLUSTER_USER",
    "DEFAULT_CLUSTER_PASSWORD",
    "BroadcastGroupModel",
    "ClusterConnectionModel",
    "DiscoveryGroupModel",
    "GroupingHandlerModel",
    "LoadBalancing",
    "connector_tls",
    "parse_connector",
]

#: Artemis's defaults, which the broker warns about when a cluster is configured.
DEFAULT_CLUSTER_USER = "ACTIVEMQ.CLUSTER.ADMIN.USER"
DEFAULT_CLUSTER_PASSWORD = "CHANGE ME!!"


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


LoadBalancing = Annotated[
    Literal["OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION"], BeforeValidator(_upper)]


def connector_tls(text: str) -> bool:
    """Is ``text`` an ``ssl://`` (TLS) connector?"""
    return text.strip().lower().startswith(("ssl://", "tls://"))


def parse_connector(text: str) -> tuple[str, int]:
    """``tcp://host:port``, ``ssl://host:port`` or ``host:port`` (IPv6 hosts in brackets) -> (host, port)."""
    rest = text.strip()
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        if scheme.lower() not in ("tcp", "ssl", "tls"):
            raise ValueError(f"connector {text!r}: only tcp:// and ssl:// connectors are supported")
    rest = rest.split("?", 1)[0].rstrip("/")
    if rest.startswith("["):
        host, _, port = rest[1:].partition("]:")
    else:
        host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"connector {text!r}: expected tcp://host:port")
    return host, int(port)


def _connector(value: object) -> object:
    """A URL is checked here; a bare name refers to ``[connectors]`` and is checked there."""
    if isinstance(value, str) and (":" in value):
        parse_connector(value)
    return value


Connector = Annotated[str, BeforeValidator(_connector), Field(min_length=1)]


class BroadcastGroupModel(BaseModel):
    """``[[broadcast_groups]]``: announce this node's connectors over UDP (Artemis ``<broadcast-group>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    group_address: str = Field(description="multicast (or broadcast) address the announcements go to")
    group_port: int = Field(ge=1, le=65535)
    broadcast_period: int = Field(2000, ge=10, description="ms between announcements")
    connectors: list[Connector] = Field(default_factory=list, description="connectors announced (default: the cluster connection's)")
    local_bind_address: str | None = Field(None, description="interface the announcements leave from")
    local_bind_port: int = Field(-1, ge=-1, le=65535, description="-1 = any")


class DiscoveryGroupModel(BaseModel):
    """``[[discovery_groups]]``: learn other nodes from their UDP announcements (Artemis ``<discovery-group>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    group_address: str
    group_port: int = Field(ge=1, le=65535)
    refresh_timeout: int = Field(10000, ge=10, description="ms; a node not heard from this long is dropped")
    initial_wait_timeout: int = Field(10000, ge=0, description="ms to wait for the first announcements")
    local_bind_address: str | None = Field(None, description="interface to listen on")


class ClusterConnectionModel(BaseModel):
    """``[[cluster_connections]]`` (Artemis ``<cluster-connection>``, same names and defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("petrel-cluster", min_length=1)
    connector: Connector | None = Field(
        None, description="how other nodes reach this one (a [connectors] name or a URL; default: host:port)")
    static_connectors: list[Connector] = Field(
        default_factory=list, description="seed nodes; a node joins through any one and learns the rest")
    discovery_group: str | None = Field(None, description="name of a [[discovery_groups]] entry")
    allow_direct_connections_only: bool = Field(
        False, description="connect only to the static connectors (chains), not to nodes learnt from them")
    message_load_balancing: LoadBalancing = "ON_DEMAND"
    max_hops: int = Field(1, ge=0, description="how far queues are advertised (1 = symmetric cluster)")
    retry_interval: int = Field(500, ge=1, description="ms before the first reconnect attempt")
    retry_interval_multiplier: float = Field(1.0, ge=1.0)
    max_retry_interval: int = Field(2000, ge=1, description="ms cap on the reconnect interval")
    reconnect_attempts: int = Field(-1, ge=-1, description="-1 = forever")
    initial_connect_attempts: int = Field(-1, ge=-1, description="-1 = forever")
    call_timeout: int = Field(30000, ge=1, description="ms to wait for a peer's answer")
    check_period: int = Field(
        30000, ge=1, description="ms of silence from a peer after which its link is dropped and reconnected")
    connection_ttl: int = Field(60000, ge=1, description="ms of silence after which a link is dropped")
    confirmation_window_size: int = Field(
        10 * 1024 * 1024, ge=1, description="bytes a bridge sends ahead of the peer's confirmations "
        "(Artemis's effective default; its docs say 1 MiB, which halves forwarding throughput here)")
    use_duplicate_detection: bool = Field(
        True, description="bridged messages carry a duplicate ID the peer checks")
    address: str = Field(
        "", description='comma-separated address prefixes clustered; "!" excludes (empty = all)')


class GroupingHandlerModel(BaseModel):
    """``[grouping_handler]`` (Artemis ``<grouping-handler>``): who decides which node owns a group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("petrel-grouping", min_length=1)
    type: Annotated[Literal["LOCAL", "REMOTE"], BeforeValidator(_upper)]
    address: str = Field("", description="address prefix the handler covers (empty = all)")
    timeout: int = Field(5000, ge=1, description="ms a send waits for a decision before it fails")
    group_timeout: int = Field(-1, ge=-1, description="ms an unused group is kept (-1 = forever)")
    reaper_period: int = Field(30000, ge=1, description="ms between sweeps for unused groups")
