"""Orchestrators: start, watch and stop a cluster of brokers.

:mod:`petrel.orchestrator.local` runs the nodes as processes on this host (``petrel
cluster up|status|down``), plain or as live-backup pairs; :mod:`~petrel.orchestrator.state`
holds what it records, :mod:`~petrel.orchestrator.broker_toml` what it configures,
:mod:`~petrel.orchestrator.processes` and :mod:`~petrel.orchestrator.probes` how it starts,
stops and asks the brokers, :mod:`~petrel.orchestrator.zookeeper` its lock manager's ZooKeeper.

Scaling (``petrel cluster scale|apply``) runs one decision core,
:mod:`~petrel.orchestrator.reconcile` (what to start, stop, drain, retry and delete), in the loop
of :mod:`~petrel.orchestrator.converge`, on the local backend :mod:`~petrel.orchestrator.scaling`
(processes, directories, the drainers of :mod:`~petrel.orchestrator.drains`, the nodes restarted
by hand found by :mod:`~petrel.orchestrator.tracking`); the Kubernetes operator
(:mod:`petrel.operator`) is its other backend.
"""

from petrel.orchestrator.local import LocalCluster
from petrel.orchestrator.state import ClusterSpec, ClusterState, Node, NodeStatus, ZooKeeperRecord

__all__ = ["ClusterSpec", "ClusterState", "LocalCluster", "Node", "NodeStatus", "ZooKeeperRecord"]
