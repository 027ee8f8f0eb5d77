"""`NodeContext`: what the cluster, HA and management see of a broker — not the whole `Broker`.

Cluster connections, activations and the management API hold a node context; the `Broker`
is the one implementation. Keeping the view narrow keeps those packages from reaching into
the broker's internals (timers, listeners, the disk watch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from petrel.config import BrokerConfig
    from petrel.core.postoffice import PostOffice
    from petrel.server.connection import Connection
    from petrel.server.tls import BrokerTls
    from petrel.storage.large import LargeMessageStore

__all__ = ["NodeContext"]


class NodeContext(Protocol):
    config: BrokerConfig
    version: str
    node_id: str  # this node's ID (a backup's changes when it takes over its live's)
    office: PostOffice | None  # None while not serving (a backup waiting, a node giving way)
    store: object | None  # the Store, while serving
    large: LargeMessageStore | None
    ports: dict[str, int]  # listener name -> bound port ("all", "stomp", "http")
    connections: set[Connection]
    cluster: object | None  # the ClusterConnection, while serving in a cluster
    activation: object | None  # how this node becomes live (petrel.ha.activation)
    management: object | None
    colocated: object | None  # the backups of other lives this node hosts
    started_at: float  # epoch seconds of the last activation; 0 while not serving
    tls: BrokerTls  # TLS contexts: link_context for links to ssl:// connectors

    def cannot_persist(self) -> str | None: ...

    async def activate(self) -> None: ...

    async def deactivate(self, timeout: float = 10.0, *, reason: str = ..., code: int | None = None,
                         keep: set | frozenset = ...) -> None: ...
