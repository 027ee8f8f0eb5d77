"""The migrations to this node that began and have not said MIGRATION_DONE, kept in the store.

A node scaling down, or a drainer on its orphaned directory, moves its messages here. A
migration killed part way (the drainer killed, the node gone) leaves the rest in the origin's
directory until it is run again. Until then a reader of the origin's range (the Spark source)
must not take what arrived here for all of it: `queue_info`'s ``migrating_from`` names the
origin while its migration is open, and the reader waits.

The mark is one journal record per origin (``MIGRATION_OPEN``), so it outlives a restart of
this node, ``kill -9`` included. It is written with the origin's first migrated message, in
that message's store transaction (a crash never keeps the messages without it), or when the
origin creates its first queue here (MIGRATE_QUEUE, made durable before the answer, so before
any message is sent); a resumed or second migration of the same origin finds it open and adds
nothing. MIGRATION_DONE deletes it, durably before the answer. An origin that is never coming
back is closed by running its drain again (when its directory is left) or with
``DELETE /api/v1/migrations/<node>`` on this node.

Why not the ``MIGRATION.<origin>`` duplicate-ID cache, which is durable too: it is not kept when
``persist_id_cache`` is off, it says nothing of whether the migration finished (it must outlive
MIGRATION_DONE to catch resends), and a migration's MIGRATE_DUPLICATE_IDS fills caches of other
nodes (the origin's own earlier origins) that are not migrating.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from petrel.storage.store import Store

__all__ = ["OpenMigrations"]

log = logging.getLogger("petrel.ha.scale_down")


class OpenMigrations:
    """Origin node id -> the record that marks its migration here open."""

    def __init__(self, store: Store, recovered: list[tuple[int, str]] = ()) -> None:
        self.store = store
        self._records: dict[str, int] = {}
        for record_id, origin in recovered:
            if origin in self._records:  # (one per origin is written; a second would be a leftover)
                store.delete_migration_open(record_id)
            else:
                self._records[origin] = record_id
        if self._records:
            log.warning("migrations begun and not finished here, from %s: their readers wait until each is run "
                        "again to the end (or DELETE /api/v1/migrations/<node>)", ", ".join(sorted(self._records)),
                        extra={"event": "scale_down.open"})

    def __contains__(self, origin: object) -> bool:
        return origin in self._records

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._records))

    def __len__(self) -> int:
        return len(self._records)

    def open(self, origin: str, tx_id: int = 0) -> None:
        """Mark `origin`'s migration open (in store transaction `tx_id`, 0: on its own); a no-op
        when it already is."""
        if origin not in self._records:
            self._records[origin] = self.store.add_migration_open(tx_id, origin)

    def close(self, origin: str) -> bool:
        """`origin`'s migration is done (or given up): its mark goes; False if there was none."""
        record_id = self._records.pop(origin, None)
        if record_id is None:
            return False
        self.store.delete_migration_open(record_id)
        return True
