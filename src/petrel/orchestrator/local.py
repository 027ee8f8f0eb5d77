"""The local orchestrator: a cluster of ``petrel run`` processes on this host.

``up`` writes one ``broker.toml`` per node under a data root, starts the brokers
detached (their own session, output to ``node-i/broker.log``), waits for their
``/health`` and records them in ``cluster.json``; ``status`` reads that file and asks
each node; ``down`` stops them (SIGTERM, then SIGKILL after a deadline)::

    petrel-cluster/
      cluster.json
      node-1/  broker.toml  broker.log  data/
      node-2/  ...

Node ``i`` (1-based) listens on the base ports plus ``(i-1) * 100``.  Nothing here
prints: progress goes to a callback, so the CLI (``petrel cluster``) stays thin.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from petrel.errors import PetrelError, UsageError

__all__ = [
    "DEFAULT_CLUSTER_NAME",
    "DEFAULT_DATA_ROOT",
    "NODE_PORT_STEP",
    "STATE_FILE",
    "ClusterSpec",
    "ClusterState",
    "LocalCluster",
    "Node",
    "NodeStatus",
    "node_ports",
    "process_alive",
]

log = logging.getLogger(__name__)

DEFAULT_DATA_ROOT = Path("petrel-cluster")
DEFAULT_CLUSTER_NAME = "petrel-cluster"
CLUSTER_USER = "petrel-cluster"
STATE_FILE = "cluster.json"
#: Ports of node i are those of node 1 plus (i-1) * NODE_PORT_STEP.
NODE_PORT_STEP = 100
#: The broker's defaults (all protocols, STOMP, HTTP), used when no base port is given.
DEFAULT_PORTS = (61616, 61613, 8161)
HOST = "127.0.0.1"

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


def node_ports(index: int, base_port: int | None = None) -> tuple[int, int, int]:
    """(all-protocols, STOMP, HTTP) ports of node ``index`` (1-based).

    Without ``base_port``: the broker's defaults 61616/61613/8161; with it: P, P+1, P+2.
    """
    first = DEFAULT_PORTS if base_port is None else (base_port, base_port + 1, base_port + 2)
    step = (index - 1) * NODE_PORT_STEP
    return first[0] + step, first[1] + step, first[2] + step


@dataclass(frozen=True)
class ClusterSpec:
    """What ``petrel cluster up`` asks for."""

    size: int
    data_root: Path = DEFAULT_DATA_ROOT
    base_port: int | None = None
    name: str = DEFAULT_CLUSTER_NAME
    load_balancing: str = "ON_DEMAND"
    redistribution_delay: int = 0


@dataclass(frozen=True)
class Node:
    """One node as recorded in ``cluster.json``."""

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
class ClusterState:
    """The content of ``cluster.json``."""

    name: str
    data_root: str
    nodes: tuple[Node, ...]
    created: str = ""

    def to_json(self) -> str:
        body = {"name": self.name, "data_root": self.data_root, "created": self.created,
                "nodes": [asdict(n) for n in self.nodes]}
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: Path) -> ClusterState:
        try:
            body = json.loads(text)
            nodes = tuple(Node(**n) for n in body["nodes"])
            return cls(name=body["name"], data_root=body["data_root"], nodes=nodes, created=body.get("created", ""))
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

    @property
    def state(self) -> str:
        if self.alive and self.healthy:
            return "running"
        return "unhealthy" if self.alive else "stopped"


# -- processes ------------------------------------------------------------------------------

def process_alive(pid: int, config: str | None = None) -> bool:
    """Whether ``pid`` runs (a zombie does not count); with ``config``, also whether its command
    line names that file, so a recycled pid is not taken for a broker."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return config is None  # someone else's process: not one of ours
    proc = Path("/proc") / str(pid)
    try:
        stat = (proc / "stat").read_text()
        if stat[stat.rindex(")") + 2:].startswith(("Z", "X")):
            return False
        if config is not None:
            return config in (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except FileNotFoundError:
        return False  # exited between the checks
    except OSError:
        pass  # no /proc (not Linux): os.kill said it exists
    return True


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker binds
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _health(node: Node, timeout: float = 1.0) -> bool:
    return _not_ready_reason(node, timeout) is None


def _not_ready_reason(node: Node, timeout: float = 1.0) -> str | None:
    """None when the node's /health answers 200, else why not (the broker's own reason on a 503)."""
    try:
        with urllib.request.urlopen(f"{node.http_url}/health", timeout=timeout) as resp:
            return None if resp.status == 200 else f"/health answered {resp.status}"
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read() or b"{}")
        except ValueError:
            body = {}
        return body.get("reason") or body.get("status") or f"/health answered {exc.code}"
    except (urllib.error.URLError, OSError, ValueError):
        return "no answer from /health"


def _cluster_view(node: Node, timeout: float = 2.0) -> dict | None:
    """The node's ``GET /api/v1/cluster``, or None when it does not answer it."""
    try:
        with urllib.request.urlopen(f"{node.http_url}/api/v1/cluster", timeout=timeout) as resp:
            view = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return view if isinstance(view, dict) else None


def _cluster_figures(view: dict | None) -> dict[str, int]:
    """The NodeStatus fields a cluster view gives: members, bridges up of all, backlog."""
    if view is None:
        return {}
    members, bridges = view.get("members"), view.get("bridges")
    figures = {}
    if isinstance(members, list):
        figures["members"] = sum(1 for m in members if isinstance(m, dict) and m.get("connected"))
    if isinstance(bridges, list):
        bridges = [b for b in bridges if isinstance(b, dict)]
        figures["bridges_up"] = sum(1 for b in bridges if b.get("connected"))
        figures["bridges"] = len(bridges)
        figures["backlog"] = sum(int(b.get("backlog") or 0) for b in bridges)
    return figures


def _log_tail(path: str, lines: int = 3) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _child_environment() -> dict[str, str]:
    """This environment without the PETREL_* settings, which would override every node's
    broker.toml alike (a shared PETREL_PORT would make the nodes collide)."""
    keep = ("PETREL_LOG_LEVEL", "PETREL_LOG_FORMAT", "PETREL_TEST_", "PETREL_BENCH_")
    return {k: v for k, v in os.environ.items() if not k.startswith("PETREL_") or k.startswith(keep)}


# -- configuration ----------------------------------------------------------------------------

def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string (ASCII, escaped) is a TOML basic string


def broker_toml(spec: ClusterSpec, index: int, data_dir: Path, password: str) -> str:
    """The ``broker.toml`` of node ``index``: its ports, the shared cluster credentials and a
    static cluster connection to every other node."""
    port, stomp_port, http_port = node_ports(index, spec.base_port)
    others = [f"tcp://{HOST}:{node_ports(i, spec.base_port)[0]}" for i in range(1, spec.size + 1) if i != index]
    return "\n".join([
        f"# written by `petrel cluster up`; node {index} of {spec.size} of cluster {spec.name!r}",
        f"name = {_toml_string(f'node-{index}')}",
        f"data_dir = {_toml_string(str(data_dir))}",
        f"host = {_toml_string(HOST)}",
        f"port = {port}",
        f"stomp_port = {stomp_port}",
        f"http_port = {http_port}",
        f"cluster_user = {_toml_string(CLUSTER_USER)}",
        f"cluster_password = {_toml_string(password)}",
        "",
        '[address_settings."#"]',
        f"redistribution_delay = {spec.redistribution_delay}",
        "",
        "[[cluster_connections]]",
        f"name = {_toml_string(spec.name)}",
        f"connector = {_toml_string(f'tcp://{HOST}:{port}')}",
        f"static_connectors = [{', '.join(_toml_string(url) for url in others)}]",
        f"message_load_balancing = {_toml_string(spec.load_balancing)}",
        "max_hops = 1",
        "",
    ])


# -- the cluster ------------------------------------------------------------------------------

class LocalCluster:
    """The cluster kept under one data root."""

    def __init__(self, data_root: Path | str = DEFAULT_DATA_ROOT) -> None:
        self.data_root = Path(data_root).absolute()
        self.state_path = self.data_root / STATE_FILE

    def load(self) -> ClusterState | None:
        """The recorded cluster, or None when there is no ``cluster.json``."""
        try:
            text = self.state_path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PetrelError(f"cannot read {self.state_path}: {exc.strerror or exc}") from None
        return ClusterState.from_json(text, self.state_path)

    def _save(self, state: ClusterState) -> None:
        tmp = self.state_path.with_name(STATE_FILE + ".tmp")
        tmp.write_text(state.to_json())
        os.replace(tmp, self.state_path)

    def _require(self) -> ClusterState:
        state = self.load()
        if state is None:
            raise PetrelError(f"no cluster in {self.data_root} (no {STATE_FILE}); "
                              f"start one with `petrel cluster up --data-root {self.data_root}`")
        return state

    # -- up ---------------------------------------------------------------------------------

    def up(self, spec: ClusterSpec, *, timeout: float = 60.0, progress: Progress = _quiet) -> ClusterState:
        """Write the configs, start the nodes and wait until each answers /health.

        Raises ``UsageError`` (nothing started) when a cluster still runs here or a port is
        taken, ``PetrelError`` when a node does not come up (the started ones are stopped).
        """
        self._check_can_start(spec)
        password = secrets.token_urlsafe(24)
        self.data_root.mkdir(parents=True, exist_ok=True)
        configs = [self._write_node(spec, i, password) for i in range(1, spec.size + 1)]
        nodes: list[Node] = []
        procs: list[subprocess.Popen] = []  # detached, but reaped here if the start fails
        state = ClusterState(spec.name, str(self.data_root), (), time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        try:
            for node in configs:
                procs.append(self._spawn(node))
                nodes.append(Node(**{**asdict(node), "pid": procs[-1].pid}))
                progress(f"started {node.name} (pid {procs[-1].pid}), log {node.log}")
            state = ClusterState(state.name, state.data_root, tuple(nodes), state.created)
            self._save(state)  # before waiting: `petrel cluster down` finds them even if we are interrupted
            self._wait_healthy(nodes, timeout, progress)
        except BaseException:
            self._stop(nodes, timeout=10.0, progress=_quiet)
            for proc in procs:
                proc.wait()
            self.state_path.unlink(missing_ok=True)
            raise
        log.debug("cluster %s up: %d nodes under %s", spec.name, spec.size, self.data_root,
                 extra={"event": "orchestrator.up"})
        return state

    def _check_can_start(self, spec: ClusterSpec) -> None:
        if spec.size < 1:
            raise UsageError(f"--size must be at least 1, not {spec.size}")
        state = self.load()
        if state is not None:
            live = [n for n in state.nodes if process_alive(n.pid, n.config)]
            if live:
                pids = ", ".join(f"{n.name} pid {n.pid}" for n in live)
                raise UsageError(f"a cluster is already running from {self.state_path} ({pids}); "
                                 f"run `petrel cluster down --data-root {self.data_root}` first")
        highest = node_ports(spec.size, spec.base_port)
        if max(highest) > 65535:
            raise UsageError(f"{spec.size} nodes need ports up to {max(highest)}, above 65535; "
                             "choose a lower --base-port or fewer nodes")
        for i in range(1, spec.size + 1):
            for kind, port in zip(("all-protocols", "STOMP", "HTTP"), node_ports(i, spec.base_port)):
                if not _port_free(port):
                    raise UsageError(f"port {port} ({kind} port of node-{i}) is already in use; "
                                     "stop what listens there or choose another --base-port")

    def _write_node(self, spec: ClusterSpec, index: int, password: str) -> Node:
        node_dir = self.data_root / f"node-{index}"
        data_dir = node_dir / "data"
        config = node_dir / "broker.toml"
        node_dir.mkdir(parents=True, exist_ok=True)
        config.write_text(broker_toml(spec, index, data_dir, password))
        os.chmod(config, 0o600)  # it holds the cluster password
        self._validate(config)
        port, stomp_port, http_port = node_ports(index, spec.base_port)
        return Node(index=index, name=f"node-{index}", pid=0, port=port, stomp_port=stomp_port,
                    http_port=http_port, node_dir=str(node_dir), data_dir=str(data_dir), config=str(config),
                    log=str(node_dir / "broker.log"))

    @staticmethod
    def _validate(config: Path) -> None:
        """Read the written file as the broker will, so a bad value fails here, once, not N times."""
        from petrel.config import load_config

        load_config(config, env={})

    @staticmethod
    def _spawn(node: Node) -> subprocess.Popen:
        with open(node.log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "petrel", "run", "--config", node.config],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=node.node_dir, env=_child_environment(), start_new_session=True,
            )
        return proc

    @staticmethod
    def _wait_healthy(nodes: list[Node], timeout: float, progress: Progress) -> None:
        started = time.monotonic()
        deadline = started + timeout
        pending = list(nodes)
        next_report = started + 5.0
        while pending:
            reasons: dict[str, str] = {}
            for node in list(pending):
                reason = _not_ready_reason(node)
                if reason is None:
                    pending.remove(node)
                    progress(f"{node.name} ready at {node.url} ({time.monotonic() - started:.1f} s, "
                             f"{len(nodes) - len(pending)}/{len(nodes)})")
                    continue
                reasons[node.name] = reason
                if not process_alive(node.pid, node.config):
                    tail = _log_tail(node.log)
                    raise PetrelError(f"{node.name} exited during start; see {node.log}"
                                      + (f": {tail}" if tail else ""))
            if not pending:
                return
            now = time.monotonic()
            if now > deadline:
                why = "; ".join(f"{n.name}: {reasons.get(n.name, 'no answer from /health')}" for n in pending)
                raise PetrelError(f"not ready within {timeout:g} s ({why}); see {pending[0].log}")
            if now >= next_report:
                progress(f"waiting for {', '.join(f'{n.name} ({reasons.get(n.name)})' for n in pending)} "
                         f"({now - started:.0f} s of {timeout:g} s)")
                next_report = now + 5.0
            time.sleep(0.1)

    # -- status -----------------------------------------------------------------------------

    def status(self) -> tuple[ClusterState, list[NodeStatus]]:
        state = self._require()
        statuses = []
        for node in state.nodes:
            alive = process_alive(node.pid, node.config)
            healthy = alive and _health(node, timeout=3.0)
            figures = _cluster_figures(_cluster_view(node)) if healthy else {}
            statuses.append(NodeStatus(node, alive, healthy, **figures))
        return state, statuses

    # -- down -------------------------------------------------------------------------------

    def down(self, *, purge: bool = False, timeout: float = 30.0, progress: Progress = _quiet) -> ClusterState | None:
        """Stop every node, forget the cluster and, with ``purge``, delete the node directories.

        Returns the cluster that was recorded, or None when there was none.
        """
        state = self.load()
        if state is None:
            return None
        self._stop(list(state.nodes), timeout=timeout, progress=progress)
        self.state_path.unlink(missing_ok=True)
        if purge:
            for node in state.nodes:
                shutil.rmtree(node.node_dir, ignore_errors=True)
                progress(f"deleted {node.node_dir}")
        log.debug("cluster %s down", state.name, extra={"event": "orchestrator.down"})
        return state

    @staticmethod
    def _stop(nodes: list[Node], *, timeout: float, progress: Progress) -> None:
        """SIGTERM, wait up to ``timeout`` for the exits, then SIGKILL the stragglers."""
        running = [n for n in nodes if process_alive(n.pid, n.config)]
        for node in nodes:
            if node not in running:
                progress(f"{node.name} (pid {node.pid}) is not running")
        for node in running:
            _signal(node.pid, signal.SIGTERM)
            progress(f"stopping {node.name} (pid {node.pid})")
        started = time.monotonic()
        next_report = started + 2.0
        while running:
            still = [n for n in running if process_alive(n.pid, n.config)]
            for node in running:
                if node not in still:
                    progress(f"{node.name} stopped")
            running = still
            now = time.monotonic()
            if not running or now - started > timeout:
                break
            if now >= next_report:
                progress(f"waiting for {', '.join(n.name for n in running)} to stop "
                         f"({now - started:.0f} s of {timeout:g} s)")
                next_report = now + 2.0
            time.sleep(0.05)
        for node in running:
            progress(f"{node.name} (pid {node.pid}) did not stop within {timeout:g} s; killing it")
            _signal(node.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while running and time.monotonic() < deadline:
            running = [n for n in running if process_alive(n.pid, n.config)]
            time.sleep(0.05)
        if running:
            raise PetrelError(f"{', '.join(f'pid {n.pid}' for n in running)} still running after SIGKILL")
