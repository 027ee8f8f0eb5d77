"""Quorum votes name a process, not only a node ID.

A live that lost its backup asks the other lives whether they still see it. Its backup may
have taken over by then, under the same node ID, and bridged to them; a vote by node ID would
then count the backup's links as the old live's, and an isolated old live would go on serving
beside its backup. The live names its process (the cluster's ``unique_id``, new at every
start), and a voter counts only links to or from that process.
"""

from __future__ import annotations

import asyncio

from cluster_harness import PASSWORD, cluster_view, make_cluster, start_all, wait_connected

from petrel.ha import quorum
from petrel.testing.process import wait_for


def vote(voter, node_id: str, unique_id: str = "") -> bool | None:
    """The voter's answer: is `node_id` (that process of it, with `unique_id`) gone?"""
    ballots = asyncio.run(quorum.ask([f"127.0.0.1:{voter.port}"], node_id, "petrel-test", PASSWORD, 10.0,
                                     unique_id=unique_id))
    assert ballots[0].error == "", ballots[0].error
    return ballots[0].gone


def test_a_vote_about_a_process_is_not_answered_by_the_links_of_a_restart_under_its_node_id(tmp_path, stop_nodes):
    voter, node = make_cluster(tmp_path, 2)
    stop_nodes([voter, node])
    start_all([voter, node])
    wait_connected([voter, node], timeout=60)
    node_id, first = cluster_view(node)["node_id"], cluster_view(node)["unique_id"]
    assert first and cluster_view(voter)["unique_id"] != first
    assert vote(voter, node_id) is False
    assert vote(voter, node_id, first) is False
    assert vote(voter, node_id, "another-process") is True

    node.kill9()
    node.start()  # the same data directory: the same node ID, another process
    second = cluster_view(node)["unique_id"]
    assert cluster_view(node)["node_id"] == node_id and second != first

    def linked_again() -> bool:
        view = cluster_view(voter)
        return any(p["unique_id"] == second for p in view["peers"]) and \
            any(b["unique_id"] == second and b["connected"] for b in view["bridges"])

    wait_for(linked_again, 60, message="the voter never linked to the restarted node")
    assert vote(voter, node_id) is False  # a backup asking about its live's node: it is there
    assert vote(voter, node_id, second) is False
    assert vote(voter, node_id, first) is True  # the old process is gone, whatever shares its node ID
