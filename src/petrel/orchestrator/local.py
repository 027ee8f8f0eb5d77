"""The local orchestrator: a cluster of ``petrel run`` processes on this host.

``up`` writes one ``broker.toml`` per node under a data root, starts the brokers
detached (their own session, output to ``node-i/broker.log``), waits until they serve
and records them in ``cluster.json``; ``status`` reads that file and asks each node;
``down`` stops them (SIGTERM, then SIGKILL after a deadline)::

    petrel-cluster/
      cluster.json
      node-1/  broker.toml  broker.log  data/
      node-2/  ...

Node ``i`` (1-based) listens on the base ports plus ``(i-1) * 100``.

With ``--ha shared-store|replication`` each of the ``size`` nodes is the primary of a pair
``pair-i`` and gets a backup ``node-i-backup`` (its own directory, ports +50; shared store:
the primary's data directory). The primaries start first; once they serve (and, for
replication, see each other, so that a backup learns the whole cluster it may ask for a
vote), the backups start, and ``up`` returns when each one waits as a backup (replication:
holding an in-sync copy). ``--lock-manager zookeeper`` first starts one ZooKeeper
(``zookeeper/``), which ``down`` stops last.

Nothing here prints: progress goes to a callback, so the CLI (``petrel cluster``) stays thin.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from petrel.errors import PetrelError, UsageError
from petrel.orchestrator.broker_toml import CLUSTER_USER, broker_toml
from petrel.orchestrator.drains import DRAINS_DIR, stop_drain
from petrel.orchestrator.probes import cluster_figures, cluster_view, ha_view, health, not_ready_reason
from petrel.orchestrator.processes import (Progress, log_tail, port_free, process_alive, quiet,
                                           spawn_broker, stop_processes)
from petrel.orchestrator.state import (DEFAULT_CLUSTER_NAME, DEFAULT_DATA_ROOT, HA_KINDS, HOST, NODE_PORT_STEP,
                                       STATE_FILE, ClusterSpec, ClusterState, Node, NodeStatus, ZooKeeperRecord,
                                       node_ports)
from petrel.orchestrator.tracking import node_alive, node_process, track_nodes
from petrel.orchestrator.users import ensure_users, users_file
from petrel.orchestrator.zookeeper import ZOOKEEPER_DIR, missing, start_zookeeper, zookeeper_process

__all__ = [
    "CLUSTER_USER",
    "DEFAULT_CLUSTER_NAME",
    "DEFAULT_DATA_ROOT",
    "HOST",
    "NODE_PORT_STEP",
    "STATE_FILE",
    "ClusterSpec",
    "ClusterState",
    "LocalCluster",
    "Node",
    "NodeStatus",
    "ZooKeeperRecord",
    "node_ports",
    "process_alive",
]

log = logging.getLogger(__name__)

# the names the tests and older callers use
_not_ready_reason = not_ready_reason
_health = health

#: A readiness check: None when the node is where ``up`` wants it, else why not.
Check = Callable[[Node], str | None]


def _live_ready(node: Node) -> str | None:
    """A primary of a pair serves: /health 200 and /api/v1/ha says live."""
    reason = not_ready_reason(node)
    if reason is not None:
        return reason
    state = ha_view(node).get("state")
    return None if state == "live" else f"HA state {state or 'unknown'}"


def _backup_ready(node: Node) -> str | None:
    """A backup waits as one: /api/v1/ha says backup and, for replication, its copy is in sync."""
    view = ha_view(node)
    if not view:
        return "no answer from /api/v1/ha"
    if view.get("state") != "backup":
        return f"HA state {view.get('state')}"
    if view.get("policy") == "replication":
        live = (view.get("replication") or {}).get("live") or {}
        if live.get("state") != "in-sync":
            return f"copy of the live {live.get('state') or 'not started'}"
    return None


def _sees_all(size: int) -> Check:
    def check(node: Node) -> str | None:
        members = cluster_figures(cluster_view(node)).get("members")
        return None if members == size else f"sees {members or 0} of {size} lives"
    return check


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

    def up(self, spec: ClusterSpec, *, timeout: float = 60.0, progress: Progress = quiet) -> ClusterState:
        """Write the configs, start the nodes (and the ZooKeeper) and wait until they serve.

        Raises ``UsageError`` (nothing started) when a cluster still runs here or a port is
        taken, ``PetrelError`` when a node does not come up (what started is stopped).
        """
        self._check_can_start(spec)
        if spec.ha == "replication" and spec.lock_manager is None and spec.size == 1:
            progress("note: a lone replicated pair without a lock manager never fails over by itself (its backup "
                     "cannot tell a dead live from a cut link); add --lock-manager zookeeper, or run 2 or more "
                     "pairs so that the other lives vote")
        password = secrets.token_urlsafe(24)
        self.data_root.mkdir(parents=True, exist_ok=True)
        created = ensure_users(self.data_root)  # one admin for every node
        if created:
            progress(created)
        deadline = time.monotonic() + timeout
        layout = self._layout(spec)
        state = ClusterState(spec.name, str(self.data_root), (), time.strftime("%Y-%m-%dT%H:%M:%S%z"), ha=spec.ha,
                             base_port=spec.base_port, load_balancing=spec.load_balancing,
                             redistribution_delay=spec.redistribution_delay)
        procs: list[subprocess.Popen] = []  # detached, but reaped here if the start fails
        try:
            if spec.lock_manager == "zookeeper":
                progress(f"starting ZooKeeper in {self.data_root / ZOOKEEPER_DIR}")
                zk = start_zookeeper(self.data_root, timeout=max(1.0, deadline - time.monotonic()))
                state = replace(state, zookeeper=zk)
                self._save(state)  # `petrel cluster down` finds it even if we are interrupted
                progress(f"ZooKeeper serves on {zk.connect_string} (pid {zk.pid}), log {zk.log}")
            connect = state.zookeeper.connect_string if state.zookeeper else None
            for node in layout:
                self._write_node(spec, node, layout, password, connect)
            first = [n for n in layout if n.role != "backup"]
            backups = [n for n in layout if n.role == "backup"]
            state = self._start(state, first, procs, progress)
            first = list(state.nodes)
            self._wait(first, _live_ready if spec.ha else not_ready_reason, deadline, timeout, progress, "ready")
            if backups:
                if spec.ha == "replication" and spec.size > 1:  # a backup learns the lives it may ask to vote
                    self._wait(first, _sees_all(spec.size), deadline, timeout, progress, "in the cluster")
                state = self._start(state, backups, procs, progress)
                backups = list(state.nodes[len(first):])
                self._wait(backups, _backup_ready, deadline, timeout, progress,
                           "in sync" if spec.ha == "replication" else "waiting as a backup")
        except BaseException:
            self._stop(state, timeout=10.0, progress=quiet)
            for proc in procs:
                proc.wait()
            self.state_path.unlink(missing_ok=True)
            raise
        log.debug("cluster %s up: %d nodes under %s", spec.name, len(state.nodes), self.data_root,
                  extra={"event": "orchestrator.up"})
        return state

    def _start(self, state: ClusterState, nodes: list[Node], procs: list[subprocess.Popen],
               progress: Progress) -> ClusterState:
        started = list(state.nodes)
        try:
            for node in nodes:
                procs.append(spawn_broker(node))
                started.append(replace(node, pid=procs[-1].pid))
                progress(f"started {node.name} (pid {procs[-1].pid}), log {node.log}")
        finally:
            state = replace(state, nodes=tuple(started))
            self._save(state)  # before waiting: `petrel cluster down` finds them even if we are interrupted
        return state

    def _layout(self, spec: ClusterSpec) -> list[Node]:
        """The nodes, not started yet: node-1..node-N, then (with HA) their backups."""
        nodes = []
        for i in range(1, spec.size + 1):
            pair = f"pair-{i}" if spec.ha else None
            nodes.append(self._node(spec, i, f"node-{i}", "primary" if spec.ha else "live", pair))
        if spec.ha:
            for primary in list(nodes):
                shared = primary.data_dir if spec.ha == "shared-store" else None
                nodes.append(self._node(spec, primary.index, f"{primary.name}-backup", "backup", primary.pair, shared))
        return nodes

    def _node(self, spec: ClusterSpec, index: int, name: str, role: str, pair: str | None,
              data_dir: str | None = None) -> Node:
        node_dir = self.data_root / name
        port, stomp_port, http_port = node_ports(index, spec.base_port, backup=role == "backup")
        return Node(index=index, name=name, pid=0, port=port, stomp_port=stomp_port, http_port=http_port,
                    node_dir=str(node_dir), data_dir=data_dir or str(node_dir / "data"),
                    config=str(node_dir / "broker.toml"), log=str(node_dir / "broker.log"), role=role, pair=pair)

    def _check_can_start(self, spec: ClusterSpec) -> None:
        if spec.size < 1:
            raise UsageError(f"--size must be at least 1, not {spec.size}")
        if spec.ha is not None and spec.ha not in HA_KINDS:
            raise UsageError(f"--ha must be one of {', '.join(HA_KINDS)}, not {spec.ha!r}")
        if spec.lock_manager is not None:
            if spec.lock_manager != "zookeeper":
                raise UsageError(f"--lock-manager must be zookeeper, not {spec.lock_manager!r}")
            if spec.ha != "replication":
                raise UsageError("--lock-manager goes with --ha replication (a shared store's lock is its "
                                 "data directory's file lock)")
            why = missing()
            if why is not None:
                raise PetrelError(f"--lock-manager zookeeper: {why}")
        state = self.load()
        if state is not None:
            live = [f"{n.name} pid {n.pid}" for n in state.nodes if process_alive(n.pid, n.config)]
            zk = state.zookeeper
            if zk is not None and process_alive(zk.pid, zk.config):
                live.append(f"zookeeper pid {zk.pid}")
            if live:
                raise UsageError(f"a cluster is already running from {self.state_path} ({', '.join(live)}); "
                                 f"run `petrel cluster down --data-root {self.data_root}` first")
        kinds = ("all-protocols", "STOMP", "HTTP")
        nodes = [(f"node-{i}", node_ports(i, spec.base_port)) for i in range(1, spec.size + 1)]
        if spec.ha:
            nodes += [(f"node-{i}-backup", node_ports(i, spec.base_port, backup=True)) for i in range(1, spec.size + 1)]
        highest = max(max(ports) for _, ports in nodes)
        if highest > 65535:
            raise UsageError(f"{spec.size} {'pairs' if spec.ha else 'nodes'} need ports up to {highest}, above 65535; "
                             "choose a lower --base-port or a smaller --size")
        for name, ports in nodes:
            for kind, port in zip(kinds, ports):
                if not port_free(port):
                    raise UsageError(f"port {port} ({kind} port of {name}) is already in use; "
                                     "stop what listens there or choose another --base-port")

    def _write_node(self, spec: ClusterSpec, node: Node, nodes: list[Node], password: str,
                    zookeeper: str | None) -> None:
        config = Path(node.config)
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(broker_toml(spec, node, nodes, password, zookeeper))
        os.chmod(config, 0o600)  # it holds the cluster password
        self._validate(config)

    @staticmethod
    def _validate(config: Path) -> None:
        """Read the written file as the broker will, so a bad value fails here, once, not N times."""
        from petrel.config import load_config

        load_config(config, env={})

    @staticmethod
    def _wait(nodes: list[Node], check: Check, deadline: float, timeout: float, progress: Progress,
              what: str) -> None:
        """Until ``check`` passes for every node; a node that exits fails at once, with its log's tail."""
        started = time.monotonic()
        pending = list(nodes)
        next_report = started + 5.0
        while pending:
            reasons: dict[str, str] = {}
            for node in list(pending):
                reason = check(node)
                if reason is None:
                    pending.remove(node)
                    progress(f"{node.name} {what} at {node.url} ({time.monotonic() - started:.1f} s, "
                             f"{len(nodes) - len(pending)}/{len(nodes)})")
                    continue
                reasons[node.name] = reason
                if not process_alive(node.pid, node.config):
                    tail = log_tail(node.log)
                    raise PetrelError(f"{node.name} exited during start; see {node.log}"
                                      + (f": {tail}" if tail else ""))
            if not pending:
                return
            now = time.monotonic()
            if now > deadline:
                why = "; ".join(f"{n.name}: {reasons.get(n.name, 'no answer')}" for n in pending)
                raise PetrelError(f"not {what} within {timeout:g} s ({why}); see {pending[0].log}")
            if now >= next_report:
                progress(f"waiting for {', '.join(f'{n.name} ({reasons.get(n.name)})' for n in pending)} "
                         f"({now - started:.0f} s)")
                next_report = now + 5.0
            time.sleep(0.1)

    # -- status -----------------------------------------------------------------------------

    def status(self, progress: Progress = quiet) -> tuple[ClusterState, list[NodeStatus]]:
        """Each node as it runs now (nodes restarted by hand are found again and recorded)."""
        state = self._require()
        tracked = track_nodes(state, progress)
        if tracked != state:
            self._save(tracked)
            state = tracked
        statuses = []
        for node in state.nodes:
            alive = node_alive(node)
            healthy = alive and health(node, timeout=3.0)
            figures = cluster_figures(cluster_view(node)) if healthy else {}
            ha = ha_view(node) if alive and state.ha else {}
            statuses.append(NodeStatus(node, alive, healthy, **figures, ha=ha))
        return state, statuses

    def zookeeper_running(self, state: ClusterState) -> bool | None:
        """Whether the recorded ZooKeeper runs; None when there is none."""
        zk = state.zookeeper
        return None if zk is None else process_alive(zk.pid, zk.config)

    # -- down -------------------------------------------------------------------------------

    def down(self, *, purge: bool = False, timeout: float = 30.0, progress: Progress = quiet) -> ClusterState | None:
        """Stop every node (then the ZooKeeper), forget the cluster and, with ``purge``, delete
        the node directories and the cluster's users file. Returns the cluster that was recorded, or
        None when there was none.
        """
        state = self.load()
        if state is None:
            return None
        state = track_nodes(state, progress)
        self._save(state)
        self._stop(state, timeout=timeout, progress=progress)
        self.state_path.unlink(missing_ok=True)
        if purge:
            dirs = [n.node_dir for n in state.nodes] + ([state.zookeeper.workdir] if state.zookeeper else [])
            dirs += [str(self.data_root / DRAINS_DIR)] if state.drains else []
            for path in dirs:
                shutil.rmtree(path, ignore_errors=True)
                progress(f"deleted {path}")
            users = users_file(self.data_root)
            if users.exists():
                users.unlink()
                progress(f"deleted {users}")
        log.debug("cluster %s down", state.name, extra={"event": "orchestrator.down"})
        return state

    @staticmethod
    def _stop(state: ClusterState, *, timeout: float, progress: Progress) -> None:
        """The drainers, the brokers (a broker stopping keeps its lock manager session to the end), then
        ZooKeeper."""
        for record in state.drains:
            if record.phase == "running" and process_alive(record.pid, record.rc_file):
                progress(f"stopping the drain of {record.node} (pid {record.pid}); its data directory is kept")
                stop_drain(record, timeout=min(timeout, 10.0))
        stop_processes([node_process(n) for n in state.nodes], timeout=timeout, progress=progress)
        if state.zookeeper is not None:
            stop_processes([zookeeper_process(state.zookeeper)], timeout=timeout, progress=progress)

