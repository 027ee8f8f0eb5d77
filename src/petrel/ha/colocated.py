"""Colocated backups: every live also hosts, in its own process, a backup of another live.

A replication primary with ``colocated = { max_backups = N, backup_port_offset = P }`` starts
N more brokers beside itself, each a replication backup named ``colocated_backup_<n>`` with its
own data directory next to the host's and the host's ports plus ``n * P``. Each registers with
a live of the cluster that has no backup yet — never its host, whose own backup lives
elsewhere — so that in a cluster where every node does this, every node backs up a peer (the
pattern of an API-gateway cluster). A colocated backup that takes over serves from the host's
process on its own ports.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from petrel.config import BrokerConfig
    from petrel.server.node import NodeContext

__all__ = ["ColocatedBackups", "colocated_configs"]

log = logging.getLogger("petrel.ha.colocated")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host if host not in ("0.0.0.0", "") else "127.0.0.1", 0))
        return s.getsockname()[1]


def colocated_configs(config: BrokerConfig) -> list[BrokerConfig]:
    """The configurations of the backups a host starts beside itself."""
    model = config.ha_policy.colocated
    if model is None:
        return []
    out = []
    for n in range(1, model.max_backups + 1):
        name = f"colocated_backup_{n}"

        def port(value: int) -> int:
            if value < 0:
                return value
            if model.backup_port_offset == 0 or value == 0:
                return _free_port(config.host)
            return config._offset(value) + n * model.backup_port_offset

        ports = {"port": port(config.port), "stomp_port": port(config.stomp_port), "http_port": port(config.http_port)}
        for setting in ("mqtt_port", "amqp_port", "ws_port"):  # set: shifted too; unset: off (port is not 61616)
            if getattr(config, setting) is not None:
                ports[setting] = port(getattr(config, setting))
        cluster = []
        for cc in config.cluster_connections:
            scheme = "ssl" if config.ssl_enabled else "tcp"
            cluster.append(cc.model_copy(update={"connector": f"{scheme}://{_client_host(config.host)}:{ports['port']}"}))
        policy = config.ha_policy.model_copy(update={"replication": "backup", "colocated": None, "group_name": None})
        data_dir = Path(config.data_dir)
        out.append(config.model_copy(update={
            "name": f"{config.name}-{name}", "data_dir": data_dir.with_name(f"{data_dir.name}-{name}"),
            "port_offset": 0, **ports, "cluster_connections": cluster, "ha_policy": policy,
        }))
    return out


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


class ColocatedBackups:
    """The backups a host runs in its own event loop."""

    def __init__(self, host: NodeContext) -> None:
        self.host = host
        self.brokers: list = []

    async def start(self) -> None:
        from petrel.server.broker import Broker

        for config in colocated_configs(self.host.config):
            broker = Broker(config)
            await broker.start()
            self.brokers.append(broker)
            log.info("colocated backup %s started (data in %s, port %d)", config.name, config.data_dir,
                     config.port, extra={"event": "ha.colocated_started"})

    async def stop(self, timeout: float = 10.0) -> None:
        for broker in reversed(self.brokers):
            await broker.stop(timeout)
        self.brokers.clear()

    def describe(self) -> list[dict]:
        out = []
        for broker in self.brokers:
            view = broker.activation.describe() if broker.activation is not None else {}
            out.append({"name": broker.config.name, "port": broker.config.port, **view})
        return out
