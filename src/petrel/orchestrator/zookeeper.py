"""The ZooKeeper of ``petrel cluster up --lock-manager zookeeper``: one standalone server (Debian's
``zookeeper`` package, started as :class:`petrel.testing.zookeeper.ZooKeeperServer` does) under
``<data root>/zookeeper/``, left running detached and recorded in ``cluster.json``, so that
``petrel cluster down`` stops it with the brokers.

One server is a single point of failure: fine for a cluster on one host, which dies with it
anyway; a real deployment runs an ensemble of three or more.
"""

from __future__ import annotations

from pathlib import Path

from petrel.errors import PetrelError
from petrel.orchestrator.processes import Process, port_free
from petrel.orchestrator.state import ZooKeeperRecord

__all__ = ["ZOOKEEPER_DIR", "missing", "start_zookeeper", "zookeeper_process"]

ZOOKEEPER_DIR = "zookeeper"


def missing() -> str | None:
    """None when ZooKeeper can run here, else what to install."""
    from petrel.testing.zookeeper import zookeeper_available

    return zookeeper_available()


def start_zookeeper(data_root: Path, *, port: int | None = None, timeout: float = 60.0) -> ZooKeeperRecord:
    """Start the server (on ``port``, or a free one) and wait until it serves; it keeps running
    after this process exits. Raises ``PetrelError`` with the tail of its log when it does not start."""
    from petrel.testing.zookeeper import ZooKeeperServer, ZooKeeperStartError

    why = missing()
    if why is not None:
        raise PetrelError(f"--lock-manager zookeeper: {why}")
    if port is not None and not port_free(port):
        raise PetrelError(f"port {port} for ZooKeeper is already in use; stop what listens there")
    server = ZooKeeperServer(data_root / ZOOKEEPER_DIR, port=port, start_timeout=timeout)
    try:
        server.start()
    except ZooKeeperStartError as exc:
        raise PetrelError(f"ZooKeeper did not start ({exc}); see {server.log_path}") from None
    pid = server.detach()
    return ZooKeeperRecord(pid=pid, port=server.port, workdir=str(server.workdir), config=str(server.config_path),
                           log=str(server.log_path))


def zookeeper_process(record: ZooKeeperRecord) -> Process:
    return Process("zookeeper", record.pid, record.config)
