"""Orchestrators: start, watch and stop a cluster of brokers.

:mod:`petrel.orchestrator.local` runs the nodes as processes on this host (``petrel
cluster up|status|down``).
"""

from petrel.orchestrator.local import ClusterSpec, ClusterState, LocalCluster, Node, NodeStatus

__all__ = ["ClusterSpec", "ClusterState", "LocalCluster", "Node", "NodeStatus"]
