"""Cluster link frames on the accepting side (a mixin of `CoreAdapter`).

A peer that sends CLUSTER_JOIN with the right cluster name and credentials becomes a cluster
peer of this connection: the cluster sends it the members and bindings it should know, and
its FORWARD frames are routed to the bindings they name, at most once per bridge duplicate ID
(and per producer's duplicate ID, see `core/clustered.py`), and confirmed after the disk like
ordinary sends. An anycast message whose queues are all gone
(an auto-created queue deleted when its last consumer left, while the message travelled) is
kept in the address's anycast queue here rather than dropped; a multicast copy for a
subscription that is gone is dropped, as it would be had it been sent after the unsubscribe.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from petrel.codec.core import ErrorCode, Result, SendFailed
from petrel.codec.core.cluster import ClusterJoin, Forward, GroupPropose
from petrel.core.limits import AddressFull
from petrel.core.remote import MIGRATED_DELIVERY_COUNT
from petrel.core.message import Message, RoutingType, now_ms
from petrel.core.postoffice import RoutingError
from petrel.core.selector import SelectorError
from petrel.server.adapters.core import large
from petrel.server.adapters.core.session import Fatal

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter
    from petrel.server.adapters.core.session import ServerSession

__all__ = ["ClusterFrames"]

log = logging.getLogger("petrel.cluster")

_SCALARS = (type(None), bool, int, float, str, bytes)
REFUSED_IN_ORDER = "refused after an earlier refusal: send again in order"


class ClusterFrames:
    cluster_peer: str | None = None  # node id of the joined peer
    forward_tx = 0  # the store transaction of the forwarded messages of the read being handled
    forward_pending: dict[str, tuple[int, int]] | None = None  # what forward_tx holds per address, not yet counted

    def commit_forwarded(self: CoreAdapter) -> None:
        """End of a read: commit its forwarded messages (their confirmations wait for the disk)."""
        tx, self.forward_tx = self.forward_tx, 0
        self.forward_pending = None
        self.office.commit_store(tx)

    def on_cluster_join(self: CoreAdapter, e: ClusterJoin) -> None:
        cluster = self.broker.cluster
        if cluster is None:
            raise Fatal(ErrorCode.UNSUPPORTED, "this broker is not in a cluster (no cluster_connections)")
        problem = cluster.check_join(e)
        if problem is not None:
            first = cluster.refused.get(e.node_id) != problem  # a peer retries: say it once
            cluster.refused[e.node_id] = problem
            (log.warning if first else log.debug)("refused cluster peer %s at %s: %s", e.node_id, self.conn.peer,
                                                  problem, extra={"event": "cluster.peer_refused"})
            raise Fatal(ErrorCode.UNAUTHORIZED, problem)
        cluster.refused.pop(e.node_id, None)
        self.cluster_peer = e.node_id
        # in order: the answer, then the members and bindings peer_joined sends
        # with the size of the duplicate-ID cache for its copies: its bridge keeps at most half
        # of that in flight, so that every copy it may send again is still recognised here
        self.cluster_send(Result(e.corr, 0, "", {"node_id": self.broker.node_id, "unique_id": cluster.unique_id,
                                                 "id_cache_size": self.office.bridge_cache_size(e.node_id)}))
        cluster.peer_joined(self, e)

    def cluster_send(self: CoreAdapter, event) -> None:
        """Send a frame to the joined peer, after any replies still waiting for the disk."""
        if self.conn.closed or self._closing:
            return
        self._confirmations.after_pending([self.codec.send(event)])

    def on_forward(self: CoreAdapter, e: Forward) -> None:
        if self.cluster_peer is None and self.migration_source is None:
            raise Fatal(ErrorCode.UNAUTHORIZED, "FORWARD before a successful CLUSTER_JOIN or MIGRATION_BEGIN")
        session = self._session(e.session)
        if session.large is not None:
            raise Fatal(ErrorCode.PROTOCOL, "FORWARD while a large message is still arriving on the session")
        for value in e.properties.values():
            if not isinstance(value, _SCALARS):
                raise Fatal(ErrorCode.PROTOCOL, "message property values must be scalars")
        if e.more or len(e.body) > self._large_over:
            large.start(self, session, e)
            return
        self.route_forward(session, e, e.body)

    def route_forward(self: CoreAdapter, session: ServerSession, e: Forward, body: bytes,
                      large_body: tuple | None = None) -> None:
        session.sent += 1
        if session.sent - session.confirmed == 1:
            self._dirty.append(session)
        properties, delivery_count = e.properties, 0
        if MIGRATED_DELIVERY_COUNT in properties:  # migrated, or redistributed, after deliveries there
            properties = dict(properties)
            delivery_count = int(properties.pop(MIGRATED_DELIVERY_COUNT) or 0)
        if self.migration_source is not None and self.migration_refusing:
            # a migration keeps its order: after one refusal, every later message of it is refused
            # too, until the origin starts again (MIGRATE_QUEUE)
            self._out.append(self.codec.send(SendFailed(session.id, session.sent, ErrorCode.ADDRESS_FULL,
                                                        REFUSED_IN_ORDER)))
            return
        message = Message(large_body[0] if large_body else self._next_id(), e.address, body, properties,
                          e.durable, e.priority, e.expiration, e.timestamp or now_ms(), e.scheduled)
        if large_body is not None:
            message.large = large_body[1]
        if 0 <= e.routing_type <= 1:  # the bindings' routing type (see receive_forwarded)
            message.routing_type = RoutingType(e.routing_type)
        try:
            if not self.forward_tx:  # one store transaction for the read's forwarded messages
                self.forward_tx = self.office.store.begin()
            if self.migration_source is not None:  # open (durably) with its first messages
                self.broker.migrations_open.open(self.migration_source, self.forward_tx)
            self.office.receive_forwarded(message, e.keys, e.dup, self.forward_tx, delivery_count,
                                          strict=self.migration_source is not None)
        except (AddressFull, RoutingError, SelectorError, ValueError) as exc:
            self.office.discard(message)
            code = ErrorCode.ADDRESS_FULL if isinstance(exc, AddressFull) else ErrorCode.ROUTING
            self._out.append(self.codec.send(SendFailed(session.id, session.sent, code, str(exc))))
            if self.migration_source is not None:
                self.migration_refusing = True
            return
        if e.durable:
            self._sync = True

    def on_group_propose(self: CoreAdapter, e: GroupPropose) -> None:
        if self.cluster_peer is None:
            raise Fatal(ErrorCode.UNAUTHORIZED, "GROUP_PROPOSE before a successful CLUSTER_JOIN")
        grouping = self.broker.cluster.grouping if self.broker.cluster is not None else None
        if grouping is None or not grouping.is_local:
            self.reply(Result(e.corr, ErrorCode.UNSUPPORTED, "this node has no LOCAL grouping handler"))
            return
        self.cluster_send(grouping.propose_from_peer(e))
