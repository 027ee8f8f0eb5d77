"""Migration frames on the accepting side (a mixin of `CoreAdapter`): a node scaling down, or a
drainer on an orphaned data directory, moves its messages here.

MIGRATION_BEGIN (with the cluster credentials) names the origin node; MIGRATE_QUEUE creates a
queue as it was there (when missing); FORWARD frames then carry the messages, each to the one
queue it names, with its origin's duplicate ID (origin node ID + message ID): a message that
arrives twice (a migration killed and run again) is kept once. Confirmations come after the
disk, like a client's sends.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from petrel.codec.core import ErrorCode, Result
from petrel.codec.core.cluster import MigrateDuplicateIds, MigrateQueue, MigrationBegin, MigrationDone
from petrel.core.message import RoutingType
from petrel.core.postoffice import RoutingError
from petrel.core.selector import SelectorError
from petrel.server.adapters.core.session import Fatal

if TYPE_CHECKING:
    from petrel.server.adapters.core.adapter import CoreAdapter

__all__ = ["MigrationFrames"]

log = logging.getLogger("petrel.ha.scale_down")


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
        self.reply(Result(e.corr, 0, "", {"node_id": self.broker.node_id,
                                          "id_cache_size": self.office.bridge_cache_size(e.node_id)}))

    def on_migrate_queue(self: CoreAdapter, e: MigrateQueue) -> None:
        if self.migration_source is None:
            raise Fatal(ErrorCode.UNAUTHORIZED, "MIGRATE_QUEUE before MIGRATION_BEGIN")
        self.migration_refusing = False  # the origin starts again from its oldest unconfirmed message
        office = self.office
        queue = office.queues.get(e.name)
        if queue is None:
            try:
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
        self.reply(Result(e.corr, 0, "", {"rerouted": rerouted}), sync=True)
