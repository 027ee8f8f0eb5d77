"""Migration frames on the accepting side (a mixin of `CoreAdapter`): a node scaling down, or a
drainer on an orphaned data directory, moves its messages here.

MIGRATION_BEGIN (with the cluster credentials) names the origin node; MIGRATE_QUEUE creates a
queue as it was there (when missing); FORWARD frames then carry the messages, each to the one
queue it names, with its origin's duplicate ID (origin node ID + message ID): a message that
arrives twice (a migration killed and run again) is kept once. MIGRATE_BATCH carries many
messages of one queue at once (their IDs kept in one journal record); large ones come as
FORWARD. Confirmations come after the disk, like a client's sends.
"""

from __future__ import annotations

import logging
from sys import intern
from typing import TYPE_CHECKING

from petrel.codec.core import ErrorCode, Result, SendFailed
from petrel.codec.core.cluster import MigrateBatch, MigrateDuplicateIds, MigrateQueue, MigrationBegin, MigrationDone
from petrel.core.limits import AddressFull
from petrel.core.message import Message, RoutingType, now_ms
from petrel.core.postoffice import RoutingError
from petrel.core.selector import SelectorError
from petrel.server.adapters.core.cluster import _SCALARS, REFUSED_IN_ORDER
from petrel.server.adapters.core.session import Fatal

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["MigrationFrames"]

log = logging.getLogger("petrel.ha.scale_down")

_SCALAR_TYPES = frozenset(_SCALARS)  # a property value's type is one of these


class MigrationFrames:
    migration_source: str | None = None  # node ID of the origin moving its messages here
    migration_refusing = False  # a migrated message was refused: the later ones are too, until MIGRATE_QUEUE

    def on_migration_begin(self: CoreAdapter, e: MigrationBegin) -> None:
        self._check_cluster_credentials(e.user, e.password)
        if e.node_id == self.broker.node_id:
            raise Fatal(ErrorCode.INVALID, f"node {e.node_id} is this broker itself: migrate to another one")
        self.migration_source = e.node_id
        log.info("node %s migrates its messages here (from %s)", e.node_id, self.conn.peer,
                 extra={"event": "scale_down.receiving"})
        # the caches of its messages' IDs (MIGRATION.<node>) and of its bridge's copies
        # (BRIDGE.<node>): the origin keeps at most half of each in flight
        # and its largest frame, which a MIGRATE_BATCH must fit in
        self.reply(Result(e.corr, 0, "", {"node_id": self.broker.node_id,
                                          "id_cache_size": self.office.migration_cache_size(e.node_id),
                                          "bridge_id_cache_size": self.office.bridge_cache_size(e.node_id),
                                          "max_frame_size": self.broker.config.max_frame_size}))

    def on_migrate_queue(self: CoreAdapter, e: MigrateQueue) -> None:
        if self.migration_source is None:
            raise Fatal(ErrorCode.UNAUTHORIZED, "MIGRATE_QUEUE before MIGRATION_BEGIN")
        self.migration_refusing = False  # the origin starts again from its oldest unconfirmed message
        # open from now on, durably before the answer, so before the origin sends any message
        self.broker.migrations_open.open(self.migration_source)
        office = self.office
        queue = office.queues.get(e.name)
        if queue is None:
            try:
                with office.names_from_elsewhere():  # the origin holds it, whatever the rules say now
                    office.create_queue(e.name, e.address, RoutingType(e.routing_type), durable=e.durable,
                                        filter=e.filter, client_id=e.client_id, subscription=e.subscription,
                                        attributes=dict(e.attributes))
            except (RoutingError, SelectorError, ValueError) as exc:
                self.reply(Result(e.corr, ErrorCode.INVALID, f"cannot create queue {e.name!r}: {exc}"))
                return
        elif queue.address != e.address:
            self.reply(Result(e.corr, ErrorCode.ALREADY_EXISTS,
                              f"queue {e.name!r} exists here on address {queue.address!r}, not {e.address!r}"))
            return
        self.reply(Result(e.corr, 0, "", {"name": e.name}), sync=True)

    def on_migrate_batch(self: CoreAdapter, e: MigrateBatch) -> None:
        if self.migration_source is None:
            raise Fatal(ErrorCode.UNAUTHORIZED, "MIGRATE_BATCH before MIGRATION_BEGIN")
        session = self._session(e.session)
        if session.large is not None:
            raise Fatal(ErrorCode.PROTOCOL, "MIGRATE_BATCH while a large message is still arriving on the session")
        count = len(e.messages)
        if not count:
            return
        first = session.sent + 1  # the number of its first message among the session's sends
        if session.sent == session.confirmed:
            self._dirty.append(session)
        session.sent += count
        out = self._out
        if self.migration_refusing:
            # a migration keeps its order: after one refusal, every later message of it is refused
            # too, until the origin starts again (MIGRATE_QUEUE)
            for number in range(first, first + count):
                out.append(self.codec.send(SendFailed(session.id, number, ErrorCode.ADDRESS_FULL, REFUSED_IN_ORDER)))
            return
        routing_type = RoutingType(e.routing_type) if 0 <= e.routing_type <= 1 else None  # see receive_forwarded
        messages = e.messages
        if not {type(value) for m in messages for value in m.properties.values()} <= _SCALAR_TYPES:
            raise Fatal(ErrorCode.PROTOCOL, "message property values must be scalars")
        next_id, now = self._next_id, now_ms()
        # one string for an address however many messages name it (a million moved held a million)
        batch = [(Message(next_id(), intern(m.address), m.body, m.properties, m.durable, m.priority,
                          m.expiration, m.timestamp or now, m.scheduled, routing_type), m.dup, m.delivery_count)
                 for m in messages]
        durable = any(m.durable for m in messages)
        if not self.forward_tx:  # one store transaction for the read's forwarded messages
            self.forward_tx = self.office.store.begin()
        self.broker.migrations_open.open(self.migration_source, self.forward_tx)  # with its first messages
        if self.forward_pending is None:
            self.forward_pending = {}
        taken, refusal = self.office.receive_migrated(batch, e.keys, self.forward_tx, self.forward_pending)
        if refusal is not None:
            code = ErrorCode.ADDRESS_FULL if isinstance(refusal, AddressFull) else ErrorCode.ROUTING
            out.append(self.codec.send(SendFailed(session.id, first + taken, code, str(refusal))))
            for number in range(first + taken + 1, first + count):
                out.append(self.codec.send(SendFailed(session.id, number, ErrorCode.ADDRESS_FULL, REFUSED_IN_ORDER)))
            self.migration_refusing = True
        if durable:
            self._sync = True

    def on_migrate_duplicate_ids(self: CoreAdapter, e: MigrateDuplicateIds) -> None:
        if self.migration_source is None:
            raise Fatal(ErrorCode.UNAUTHORIZED, "MIGRATE_DUPLICATE_IDS before MIGRATION_BEGIN")
        office = self.office
        cache = office._dup_cache(e.cache, office.settings_for(e.cache))
        tx = office.store.begin()
        added = 0
        for dup_id in e.ids:
            if dup_id not in cache:
                office.remember_dup(cache, dup_id, tx)
                added += 1
        office.commit_store(tx)
        self.reply(Result(e.corr, 0, "", {"added": added}), sync=True)

    def on_migration_done(self: CoreAdapter, e: MigrationDone) -> None:
        if self.migration_source is None:
            raise Fatal(ErrorCode.UNAUTHORIZED, "MIGRATION_DONE before MIGRATION_BEGIN")
        cluster = self.broker.cluster
        rerouted = 0
        if cluster is not None:
            from petrel.cluster.bridge import sf_queue_name
            from petrel.core.clustered import BRIDGE_CACHE_PREFIX
            from petrel.core.operations import absorb
            from petrel.core.remote import bridge_dup_id

            office = self.office
            queue = office.queues.get(sf_queue_name(cluster.name, self.migration_source))
            # the IDs of this node's copies the origin had received came with its duplicate-ID caches
            received = office.dup_caches.get(BRIDGE_CACHE_PREFIX + self.broker.node_id)
            node = self.broker.node_id
            if queue is not None:
                rerouted = absorb(office, queue, lambda m: received is not None
                                  and bridge_dup_id(node, m.id) in received)
                if rerouted:
                    log.info("%d messages on their way to node %s, which scaled down here, went to its queues "
                             "here", rerouted, self.migration_source, extra={"event": "scale_down.absorbed"})
        if self.broker.migrations_open.close(self.migration_source):  # durably before the answer
            log.info("node %s finished migrating its messages here", self.migration_source,
                     extra={"event": "scale_down.received"})
        self.reply(Result(e.corr, 0, "", {"rerouted": rerouted}), sync=True)
