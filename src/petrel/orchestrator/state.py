"""What the local orchestrator is asked for (`ClusterSpec`), what it records in ``cluster.json``
(`ClusterState`: the nodes, with ``--lock-manager zookeeper`` the ZooKeeper, and since a
``cluster scale`` the desired spec and the drains of retired nodes: `DrainRecord`), and what
``status`` finds (`NodeStatus`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from petrel.errors import PetrelError

__all__ = [
    "BACKUP_PORT_OFFSET",
    "DEFAULT_CLUSTER_NAME",
    "DEFAULT_DATA_ROOT",
    "DEFAULT_PORTS",
    "HA_KINDS",
    "HOST",
    "NODE_PORT_STEP",
    "STATE_FILE",
    "ClusterSpec",
    "ClusterState",
    "DesiredSpec",
    "DrainRecord",
    "Node",
    "NodeStatus",
    "ZooKeeperRecord",
    "node_ports",
]

DEFAULT_DATA_ROOT = Path("petrel-cluster")
DEFAULT_CLUSTER_NAME = "petrel-cluster"
STATE_FILE = "cluster.json"
#: Ports of node i are those of node 1 plus (i-1) * NODE_PORT_STEP.
NODE_PORT_STEP = 100
#: The backup of pair i listens on the ports of its primary (node i) plus this.
BACKUP_PORT_OFFSET = 50
#: The broker's defaults (all protocols, STOMP, HTTP), used when no base port is given.
DEFAULT_PORTS = (61616, 61613, 8161)
HOST = "127.0.0.1"
#: `--ha` values and the [ha_policy] key each one sets.
HA_KINDS = {"shared-store": "shared_store", "replication": "replication"}


def node_ports(index: int, base_port: int | None = None, *, backup: bool = False) -> tuple[int, int, int]:
    """(all-protocols, STOMP, HTTP) ports of node ``index`` (1-based), or of its backup.

    Without ``base_port``: the broker's defaults 61616/61613/8161; with it: P, P+1, P+2.
    """
    first = DEFAULT_PORTS if base_port is None else (base_port, base_port + 1, base_port + 2)
    step = (index - 1) * NODE_PORT_STEP + (BACKUP_PORT_OFFSET if backup else 0)
    return first[0] + step, first[1] + step, first[2] + step


@dataclass(frozen=True)
class ClusterSpec:
    """What ``petrel cluster up`` asks for: ``size`` nodes, or with ``ha`` ``size`` live-backup pairs."""

    size: int
    data_root: Path = DEFAULT_DATA_ROOT
    base_port: int | None = None
    name: str = DEFAULT_CLUSTER_NAME
    load_balancing: str = "ON_DEMAND"
    redistribution_delay: int = 0
    ha: str | None = None  #: "shared-store" or "replication" (HA_KINDS), or None: no backups
    lock_manager: str | None = None  #: "zookeeper" (replication only)
    lock_session_ms: int = 18000  #: the lock manager's session: a dead live's lock expires after it
    persistence_enabled: bool = True


@dataclass(frozen=True)
class Node:
    """One broker as recorded in ``cluster.json``."""

    index: int
    name: str
    pid: int
    port: int
    stomp_port: int
    http_port: int
    node_dir: str
    data_dir: str
    config: str
    log: str
    role: str = "live"  #: live (no HA), primary or backup
    pair: str | None = None  #: the pair's group name (pair-i), with HA
    stopped: bool = False  #: stopped on purpose by `cluster scale` (a dead broker not stopped crashed)
    retired: bool = False  #: its data directory was retired by a scale-down (drain, then delete)
    crashes: int = 0  #: consecutive crashes seen by `cluster scale|status`
    last_exit: float | None = None  #: when its crash was first seen (wall clock)
    found_by: str = "start"  #: how its pid was found: start, config (restarted by hand), port

    @property
    def ordinal(self) -> int:
        """0-based, as the decision core and Kubernetes count (node-1 is ordinal 0)."""
        return self.index - 1

    @property
    def url(self) -> str:
        return f"tcp://{HOST}:{self.port}"

    @property
    def stomp(self) -> str:
        return f"{HOST}:{self.stomp_port}"

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def console(self) -> str:
        return f"{self.http_url}/console"


@dataclass(frozen=True)
class ZooKeeperRecord:
    """The ZooKeeper ``up`` started for the lock manager."""

    pid: int
    port: int
    workdir: str
    config: str  #: its zoo.cfg, on its command line (so a recycled pid is not taken for it)
    log: str

    @property
    def connect_string(self) -> str:
        return f"{HOST}:{self.port}"


@dataclass(frozen=True)
class DesiredSpec:
    """What ``cluster scale|apply`` was last asked for (the operator's ``deploymentPlan``)."""

    size: int
    persistence_enabled: bool = True
    message_migration: bool = True


@dataclass(frozen=True)
class DrainRecord:
    """One drain of a retired node's data directory: its latest attempt, and how the earlier ended."""

    index: int  #: the node's (1-based)
    node: str
    data_dir: str
    target: str  #: the URL it drains onto
    attempts: int
    pid: int  #: the latest attempt's wrapper shell (its process group holds the drainer)
    started: float  #: wall clock
    progress: str  #: the latest attempt's --progress json lines
    stderr: str  #: ... its stderr
    rc_file: str  #: ... its exit code, written when it exits (absent: still running, or killed)
    phase: str = "running"  #: running, succeeded, failed, deleted (succeeded, directory deleted)
    last_failure: float | None = None
    reason: str | None = None
    finished: float | None = None


@dataclass(frozen=True)
class ClusterState:
    """The content of ``cluster.json``."""

    name: str
    data_root: str
    nodes: tuple[Node, ...]
    created: str = ""
    ha: str | None = None
    zookeeper: ZooKeeperRecord | None = None
    spec: DesiredSpec | None = None  #: set by `cluster scale|apply`; None: the `up` size, as started
    drains: tuple[DrainRecord, ...] = ()
    base_port: int | None = None  #: `up`'s, for the nodes a scale-up adds
    load_balancing: str = "ON_DEMAND"
    redistribution_delay: int = 0

    @property
    def members(self) -> tuple[Node, ...]:
        """The nodes that are not retired."""
        return tuple(n for n in self.nodes if not n.retired)

    @property
    def pairs(self) -> int:
        return sum(1 for n in self.nodes if n.role == "primary")

    def to_json(self) -> str:
        body = {"name": self.name, "data_root": self.data_root, "created": self.created, "ha": self.ha,
                "zookeeper": asdict(self.zookeeper) if self.zookeeper else None,
                "nodes": [asdict(n) for n in self.nodes],
                "spec": asdict(self.spec) if self.spec else None, "drains": [asdict(d) for d in self.drains],
                "base_port": self.base_port, "load_balancing": self.load_balancing,
                "redistribution_delay": self.redistribution_delay}
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: Path) -> ClusterState:
        try:
            body = json.loads(text)
            nodes = tuple(Node(**n) for n in body["nodes"])
            zk, spec = body.get("zookeeper"), body.get("spec")
            return cls(name=body["name"], data_root=body["data_root"], nodes=nodes, created=body.get("created", ""),
                       ha=body.get("ha"), zookeeper=ZooKeeperRecord(**zk) if zk else None,
                       spec=DesiredSpec(**spec) if spec else None,
                       drains=tuple(DrainRecord(**d) for d in body.get("drains") or ()),
                       base_port=body.get("base_port"), load_balancing=body.get("load_balancing", "ON_DEMAND"),
                       redistribution_delay=body.get("redistribution_delay", 0))
        except (ValueError, KeyError, TypeError) as exc:
            raise PetrelError(f"{source} is not a cluster state file ({type(exc).__name__}: {exc}); "
                              f"remove it if no cluster runs from {source.parent}") from None


@dataclass(frozen=True)
class NodeStatus:
    node: Node
    alive: bool  #: the recorded process exists (and is a broker run with this node's config)
    healthy: bool  #: /health answered 200
    members: int | None = None  #: members connected to the node, itself included (from /api/v1/cluster)
    bridges_up: int | None = None  #: its bridges that are connected ...
    bridges: int | None = None  #: ... of all its bridges
    backlog: int | None = None  #: messages waiting in its bridges' store-and-forward queues
    ha: dict = field(default_factory=dict)  #: its /api/v1/ha (empty when it did not answer)

    @property
    def ha_state(self) -> str | None:
        """live, backup, syncing, failing-back, starting or stopped (from /api/v1/ha)."""
        return self.ha.get("state")

    @property
    def standby(self) -> bool:
        """A backup waiting as it should: /health says 503 "backup", /api/v1/ha says so too."""
        return self.alive and not self.healthy and self.ha_state in ("backup", "syncing")

    @property
    def state(self) -> str:
        if self.alive and self.healthy:
            return "running"
        if self.standby:
            return "standby"
        return "unhealthy" if self.alive else "stopped"

    @property
    def sync(self) -> str | None:
        """Replication: on a backup, its copy of the live (connecting, syncing, in-sync); on a live,
        its backup's copy (syncing, in-sync, lost; "none" without a backup)."""
        repl = self.ha.get("replication")
        if not isinstance(repl, dict):
            return None
        live, backup = repl.get("live"), repl.get("backup")
        if isinstance(live, dict):
            return live.get("state")
        if isinstance(backup, dict):
            return backup.get("state")
        return "none" if self.ha_state == "live" else None

    @property
    def lag(self) -> int | None:
        """Replication: operations not yet applied by the backup (on a backup) or not yet confirmed
        by it (on a live); None when there is no copy under way."""
        repl = self.ha.get("replication")
        if not isinstance(repl, dict):
            return None
        for key in ("live", "backup"):
            side = repl.get(key)
            if isinstance(side, dict) and side.get("state") != "lost" and side.get("lag_operations") is not None:
                return int(side["lag_operations"])
        return None
