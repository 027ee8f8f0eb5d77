"""Replication frames on the accepting side (a mixin of `CoreAdapter`).

A backup registers on an ordinary CORE connection; the HA activation decides whether this
node feeds it (`accept_backup`), then the connection carries the replication stream out and
the backup's acknowledgements in. Votes from backups of other pairs are answered from the
cluster's view of its members.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from petrel.codec.core import ErrorCode, Result
from petrel.codec.core.replication import ReplicaAck, ReplicaFailback, ReplicaRegister, ReplicaVote, ReplicaVoteAnswer
from petrel.server.adapters.core.session import Fatal

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["ReplicationFrames"]


class ReplicationFrames:
    replicator = None  # the Replicator feeding the backup on this connection

    def _check_cluster_credentials(self: CoreAdapter, user: str, password: str) -> None:
        config = self.broker.config
        good_user = hmac.compare_digest(user.encode(), config.cluster_user.encode())  # in constant time
        if not (hmac.compare_digest(password.encode(), config.cluster_password.encode()) and good_user):
            raise Fatal(ErrorCode.UNAUTHORIZED, "wrong cluster user or password (cluster_user/cluster_password "
                                                "must be the same on every node, pair and drainer of the cluster; a drainer takes them from --config)")

    def on_replica_register(self: CoreAdapter, e: ReplicaRegister) -> None:
        self._check_cluster_credentials(e.user, e.password)
        accept = getattr(self.broker.activation, "accept_backup", None)
        if accept is None:
            self.reply(Result(e.corr, ErrorCode.UNSUPPORTED, "this broker is not a replicating live "
                                                             "([ha_policy] replication)"))
            return
        problem, data = accept(self, e)
        if problem is not None:
            self.reply(Result(e.corr, ErrorCode.INVALID, problem))
            return
        self.cluster_send(Result(e.corr, 0, "", data))
        self.replicator.start()

    def on_replica_ack(self: CoreAdapter, e: ReplicaAck) -> None:
        if self.replicator is None:
            raise Fatal(ErrorCode.PROTOCOL, "REPLICA_ACK before REPLICA_REGISTER")
        self.replicator.acked(e.seq)

    def on_replica_failback(self: CoreAdapter, e: ReplicaFailback) -> None:
        if self.replicator is None:
            raise Fatal(ErrorCode.PROTOCOL, "REPLICA_FAILBACK before REPLICA_REGISTER")
        self.broker.activation.failback_requested(self.replicator)

    def on_replica_vote(self: CoreAdapter, e: ReplicaVote) -> None:
        self._check_cluster_credentials(e.user, e.password)
        cluster = self.broker.cluster
        if cluster is None:
            self.reply(ReplicaVoteAnswer(e.corr, False, 0))
            return
        seen = cluster.sees_node(e.node_id, e.unique_id)
        self.reply(ReplicaVoteAnswer(e.corr, not seen, cluster.largest_size))

    def replica_connection_lost(self: CoreAdapter) -> None:
        if self.replicator is not None:
            self.replicator.lose("its connection closed")
