"""Nodes an operator restarted by hand: a recorded pid that is gone is looked for again, by the
broker's ``--config`` on a command line, then by the pid listening on the node's port, so that
``cluster status``, ``scale`` and ``down`` see (and stop) the process that really runs."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from petrel.orchestrator.processes import (Process, Progress, find_broker_process, pid_listening_on, process_alive,
                                           quiet)
from petrel.orchestrator.state import ClusterState, Node

__all__ = ["node_alive", "node_process", "track_nodes"]

log = logging.getLogger(__name__)


def node_alive(node: Node) -> bool:
    if node.pid <= 0:
        return False
    if node.found_by == "port":  # restarted some other way: the pid that holds its port
        return process_alive(node.pid) and pid_listening_on(node.port) == node.pid
    return process_alive(node.pid, node.config)


def _a_broker(pid: int) -> bool:
    """A ``petrel run`` (however started), not some other program that took the port."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return "run" in args and any("petrel" in a for a in args)


def node_process(node: Node) -> Process:
    """What `stop_processes` needs: the config on the command line identifies it, unless it was
    found by its port."""
    return Process(node.name, node.pid, None if node.found_by == "port" else node.config)


def track_nodes(state: ClusterState, progress: Progress = quiet) -> ClusterState:
    """``state`` with the pids of the nodes restarted by hand since they were recorded."""
    nodes = []
    for node in state.nodes:
        if node_alive(node):
            nodes.append(node)
            continue
        pid, how = find_broker_process(node.config), "config"
        if pid is None and not node.retired:
            pid, how = pid_listening_on(node.port), "port"
            if pid is not None and not _a_broker(pid):
                pid = None  # something else took the port: never ours to stop
        if pid is not None and pid != node.pid:
            progress(f"{node.name} runs again (pid {pid}, found by its {'port' if how == 'port' else '--config'}); "
                     f"tracking it")
            log.debug("%s restarted by hand: pid %d", node.name, pid, extra={"event": "orchestrator.adopted"})
            node = replace(node, pid=pid, found_by=how, stopped=False, last_exit=None)
        nodes.append(node)
    return replace(state, nodes=tuple(nodes))
