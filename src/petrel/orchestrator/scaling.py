"""The local backend of the decision core: ``petrel cluster scale|apply`` on a cluster made by
``petrel cluster up``.

`LocalBackend` observes the cluster from ``cluster.json``, the processes and the disk, and
carries out the core's actions (:mod:`petrel.orchestrator.reconcile`): it starts brokers
(writing the ``broker.toml`` of a node a scale-up adds), stops them, marks a node's data
directory retired in ``cluster.json``, runs drainers (:mod:`petrel.orchestrator.drains`), and
deletes a retired node's directory once its drain exited 0. Ordinal ``o`` is node ``o+1``.

Nodes restarted by hand are tracked (:mod:`petrel.orchestrator.tracking`) at every observation.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from petrel.errors import PetrelError, UsageError
from petrel.orchestrator import drains as drain_files
from petrel.orchestrator.broker_toml import broker_toml
from petrel.orchestrator.converge import Outcome, converge
from petrel.orchestrator.local import LocalCluster
from petrel.orchestrator.probes import cluster_view, health
from petrel.orchestrator.processes import Progress, quiet, spawn_broker, stop_processes
from petrel.orchestrator.reconcile import (Action, BrokerObservation, BrokerPhase, DeleteData, DrainObservation,
                                           DrainPhase, Observed, Plan, Policy, Reclaim, Retire, Spec, StartBroker,
                                           StartDrain, StopBroker)
from petrel.orchestrator.state import ClusterSpec, ClusterState, DesiredSpec, DrainRecord, Node
from petrel.orchestrator.tracking import node_alive, node_process, track_nodes

__all__ = ["LocalBackend", "scale"]

log = logging.getLogger(__name__)

SCALE_LOCK = ".scale.lock"


class LocalBackend:
    """Observe and act on the cluster under ``local.data_root``; every change is saved at once."""

    def __init__(self, local: LocalCluster, *, progress: Progress = quiet, clock: Callable[[], float] = time.time,
                 stop_timeout: float = 30.0, start_timeout: float = 60.0) -> None:
        self.local = local
        self.progress = progress
        self.clock = clock
        self.stop_timeout = stop_timeout
        self.start_timeout = start_timeout
        self.state = local._require()
        self._starting: dict[int, float] = {}  # ordinal -> when we started it

    # -- observing ----------------------------------------------------------------------------

    def observe(self) -> Observed:
        state = self.local._require()
        now = self.clock()
        state = track_nodes(state, self.progress)
        nodes, brokers = [], {}
        for node in state.nodes:
            alive = node_alive(node)
            if alive and health(node, timeout=2.0):
                phase = BrokerPhase.RUNNING
                node = replace(node, crashes=0, last_exit=None)
                self._starting.pop(node.ordinal, None)
            elif alive:
                phase = BrokerPhase.STARTING
                started = self._starting.get(node.ordinal)
                if started is not None and now - started > self.start_timeout:
                    self.progress(f"{node.name} has not served within {self.start_timeout:g} s; see {node.log}")
                    self._starting[node.ordinal] = now  # say it again after as long
            elif node.stopped or node.pid <= 0:
                phase = BrokerPhase.STOPPED
            else:
                if node.last_exit is None:
                    node = replace(node, crashes=node.crashes + 1, last_exit=now)
                    self.progress(f"{node.name} (pid {node.pid}) is not running and was not stopped: crashed "
                                  f"({node.crashes} time(s)); see {node.log}")
                phase = BrokerPhase.CRASHED
            nodes.append(node)
            brokers[node.ordinal] = BrokerObservation(phase, node.crashes, node.last_exit)
        records = []
        for record in state.drains:
            polled = drain_files.poll_drain(record, now)
            if polled.phase != record.phase:
                self._report_drain(polled)
            records.append(polled)
        state = replace(state, nodes=tuple(nodes), drains=tuple(records))
        self._save(state)
        drains = {r.index - 1: DrainObservation(DrainPhase(r.phase), r.attempts, r.last_failure, r.reason)
                  for r in records if r.phase != "deleted"}
        return Observed(now=now, brokers=brokers,
                        data_dirs=frozenset(n.ordinal for n in state.nodes if Path(n.data_dir).exists()),
                        retired=frozenset(n.ordinal for n in state.nodes if n.retired), drains=drains)

    def _report_drain(self, record: DrainRecord) -> None:
        if record.phase == "succeeded":
            self.progress(f"drain of {record.node} succeeded (attempt {record.attempts}): every message moved "
                          f"to {record.target}")
            log.debug("drain of %s succeeded", record.node, extra={"event": "orchestrator.drain_succeeded"})
        else:
            self.progress(f"drain of {record.node} failed (attempt {record.attempts}): {record.reason}; "
                          f"its data directory is kept")
            log.debug("drain of %s failed: %s", record.node, record.reason,
                        extra={"event": "orchestrator.drain_failed"})

    # -- acting -------------------------------------------------------------------------------

    def apply(self, action: Action, seen: Observed) -> None:
        state = self.local._require()
        if isinstance(action, StartBroker):
            state = self._start(state, action)
        elif isinstance(action, StopBroker):
            node = self._node(state, action.ordinal)
            stop_processes([node_process(node)], timeout=self.stop_timeout, progress=self.progress)
            state = self._replace(state, replace(node, stopped=True, last_exit=None))
        elif isinstance(action, Retire):
            node = self._node(state, action.ordinal)
            self.progress(f"{node.name} leaves the cluster: its data directory {node.data_dir} is retired "
                          f"(drained, then deleted)")
            state = self._replace(state, replace(node, retired=True))
        elif isinstance(action, Reclaim):
            node = self._node(state, action.ordinal)
            self.progress(f"{node.name} comes back before any drain touched its data directory: it keeps it")
            state = self._replace(state, replace(node, retired=False))
        elif isinstance(action, StartDrain):
            node, target = self._node(state, action.ordinal), self._node(state, action.target)
            record = drain_files.spawn_drain(self.local.data_root, node, target, action.attempt, self.clock())
            before = next((d for d in state.drains if d.index == node.index), None)
            if before is not None:  # a retry: the last error stays shown while it runs
                record = replace(record, reason=before.reason, last_failure=before.last_failure)
            self.progress(f"draining {node.name} ({node.data_dir}) onto {target.name} at {target.url}, attempt "
                          f"{action.attempt} (pid {record.pid}), progress in {record.progress}")
            state = replace(state, drains=tuple(d for d in state.drains if d.index != node.index) + (record,))
        elif isinstance(action, DeleteData):
            state = self._delete(state, action)
        self._save(state)

    def _start(self, state: ClusterState, action: StartBroker) -> ClusterState:
        index = action.ordinal + 1
        node = next((n for n in state.nodes if n.index == index), None)
        if node is None:
            node = self._new_node(state, index)
            state = replace(state, nodes=tuple(sorted(state.nodes + (node,), key=lambda n: n.index)))
        if action.fresh and Path(node.data_dir).exists():
            raise PetrelError(f"{node.name}: asked to start on an empty data directory but {node.data_dir} exists")
        proc = spawn_broker(node)
        self._starting[action.ordinal] = self.clock()
        self.progress(f"started {node.name} (pid {proc.pid}){' on an empty data directory' if action.fresh else ''}"
                      f", log {node.log}")
        return self._replace(state, replace(node, pid=proc.pid, stopped=False, last_exit=None, found_by="start"))

    def _new_node(self, state: ClusterState, index: int) -> Node:
        """A node a scale-up adds: its broker.toml names every member (theirs are rewritten for their
        next start, so that the cluster connection knows it both ways)."""
        spec = self._cluster_spec(state, max(index, max((n.index for n in state.nodes), default=0)))
        node = self.local._node(spec, index, f"node-{index}", "live", None)
        self._write_configs(state, [n for n in state.members if n.index != index] + [node])
        self.local._validate(Path(node.config))
        return node

    def _write_configs(self, state: ClusterState, members: list[Node]) -> None:
        """Each member's broker.toml naming exactly ``members`` (a running broker reads it at its
        next start: until then its cluster connection still tries the nodes that left)."""
        members = sorted(members, key=lambda n: n.index)
        spec = self._cluster_spec(state, len(members))
        password = self._password(state)
        for member in members:
            Path(member.config).parent.mkdir(parents=True, exist_ok=True)
            Path(member.config).write_text(broker_toml(spec, member, members, password))
            os.chmod(member.config, 0o600)

    def _cluster_spec(self, state: ClusterState, size: int) -> ClusterSpec:
        persistent = state.spec.persistence_enabled if state.spec else True
        return ClusterSpec(size=size, data_root=Path(state.data_root), base_port=state.base_port, name=state.name,
                           load_balancing=state.load_balancing, redistribution_delay=state.redistribution_delay,
                           persistence_enabled=persistent)

    @staticmethod
    def _password(state: ClusterState) -> str:
        from petrel.config import load_config

        for node in state.nodes:
            try:
                return load_config(node.config, env={}).cluster_password
            except Exception:  # noqa: BLE001 (a deleted or broken config: try the next)
                continue
        raise PetrelError("no node's broker.toml could be read for the cluster password; "
                          "recreate the cluster with `petrel cluster down` and `up`")

    def _delete(self, state: ClusterState, action: DeleteData) -> ClusterState:
        node = self._node(state, action.ordinal)
        shutil.rmtree(node.data_dir, ignore_errors=True)
        if Path(node.data_dir).exists():
            raise PetrelError(f"could not delete {node.data_dir}; check its permissions")
        self.progress(f"deleted {node.data_dir} ({action.reason})")
        log.debug("deleted %s: %s", node.data_dir, action.reason, extra={"event": "orchestrator.data_deleted"})
        drains = tuple(replace(d, phase="deleted") if d.index == node.index and d.phase == "succeeded" else d
                       for d in state.drains)
        if node.ordinal >= (state.spec.size if state.spec else len(state.nodes)):
            self._write_configs(state, [n for n in state.members if n.index != node.index])
            shutil.rmtree(node.node_dir, ignore_errors=True)  # its config and logs: it is gone
            return replace(state, nodes=tuple(n for n in state.nodes if n.index != node.index), drains=drains)
        return replace(self._replace(state, replace(node, retired=False)), drains=drains)

    # -- state ----------------------------------------------------------------------------------

    @staticmethod
    def _node(state: ClusterState, ordinal: int) -> Node:
        for node in state.nodes:
            if node.ordinal == ordinal:
                return node
        raise PetrelError(f"node-{ordinal + 1} is not in cluster.json")

    @staticmethod
    def _replace(state: ClusterState, node: Node) -> ClusterState:
        return replace(state, nodes=tuple(node if n.index == node.index else n for n in state.nodes))

    def _save(self, state: ClusterState) -> None:
        self.local._save(state)
        self.state = state


def scale(local: LocalCluster, desired: DesiredSpec, *, policy: Policy = Policy(), timeout: float = 600.0,
          progress: Progress = quiet, on_round: Callable[[Observed, Plan], None] | None = None) -> Outcome:
    """Record ``desired`` in ``cluster.json`` and converge the cluster to it."""
    state = local._require()
    if state.ha is not None:
        raise UsageError(f"cluster scale works on clusters without --ha; this one runs {state.pairs} "
                         f"{state.ha} pairs: stop it with `petrel cluster down` and start the size you want")
    if desired.size < 1:
        raise UsageError("size must be at least 1 locally (size 0 would leave no broker to drain onto)")
    with _exclusive(local):
        before = local._require()
        local._save(replace(before, spec=desired))
        spec = Spec(desired.size, desired.persistence_enabled, desired.message_migration)
        outcome = converge(spec, LocalBackend(local, progress=progress), policy, timeout=timeout, on_round=on_round)
        for line in stranded(local._require(), {n.url: n.name for n in before.nodes}):
            progress(f"warning: {line}")
        return outcome


def stranded(state: ClusterState, known: dict[str, str]) -> list[str]:
    """Messages the members still hold for nodes that left: a store-and-forward queue with a
    backlog whose bridge goes to a node no longer in ``state`` (``known``: URL -> name, before)."""
    gone = {url: name for url, name in known.items() if url not in {n.url for n in state.nodes}}
    lines = []
    for member in state.members if gone else ():
        for bridge in (cluster_view(member) or {}).get("bridges") or ():
            if not isinstance(bridge, dict) or bridge.get("connector") not in gone or not bridge.get("backlog"):
                continue
            sf = f"$.petrel.sf.{state.name}.{bridge.get('node_id') or '?'}"
            lines.append(f"{member.name} holds {bridge['backlog']} message(s) in {sf}, its store-and-forward queue "
                         f"for {gone[bridge['connector']]} which left the cluster; they are kept there but reach no "
                         f"consumer: see `petrel queue stat --url {member.http_url}`")
    return lines


@contextlib.contextmanager
def _exclusive(local: LocalCluster):
    """One ``cluster scale|apply`` at a time per data root (two would start two drains of one
    directory and overwrite each other's cluster.json)."""
    path = local.data_root / SCALE_LOCK
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"another `petrel cluster scale|apply` is running on {local.data_root} ({path} is "
                             "locked); wait for it, or stop it (its drains go on and the next run carries on)") \
                from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
