"""Per-address circular caches of duplicate IDs, persisted one record per entry (or one record
for a migration's batch of entries), and how the post office remembers them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from petrel.core.message import Message
    from petrel.core.postoffice import PostOffice
    from petrel.core.settings import AddressSettings


#: The cache of the messages a node migrated here (scale-down, a drainer) is `MIGRATION.<its node
#: id>`, with at least MIGRATION_ID_CACHE entries whatever `id_cache_size` says: a migration keeps
#: at most half of it in flight or not yet removed at its origin (its window), and a wide window
#: is what makes a migration fast (32.6 s for a million messages with 50,000, 47.6 s with 10,000).
MIGRATION_CACHE_PREFIX = "MIGRATION."
MIGRATION_ID_CACHE = 100_000


class DuplicateIdCache:
    """The last `size` duplicate IDs sent to one address; the oldest is overwritten first.

    Each entry names the journal record holding it; several entries may share one record (a
    migration's batch), which is deleted once the cache has overwritten them all."""

    __slots__ = ("address", "size", "ids", "_ring", "_records", "_pos", "_held")

    def __init__(self, address: str, size: int) -> None:
        self.address = address
        self.size = size
        self.ids: dict[str, int] = {}  # dup id -> record id (read it; `add` keeps it)
        # the ring: its IDs (None: a free slot) and their records, side by side (no tuple per
        # entry: a migration's cache holds 100,000, each one more object for the collector)
        self._ring: list[str | None] = [None] * max(size, 0)
        self._records: list[int] = [0] * max(size, 0)
        self._pos = 0
        self._held: dict[int, int] = {}  # record id -> its entries in the ring

    def __contains__(self, dup_id: str) -> bool:
        return dup_id in self.ids

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, dup_id: str, record_id: int) -> int | None:
        """Remember an ID; returns the record id of the entry it overwrote when that was the
        record's last entry (the record can go), else None."""
        if self.size <= 0:
            return None
        freed = self.add_all([dup_id], record_id)
        return freed[0] if freed else None

    def add_all(self, dup_ids: list[str], record_id: int) -> list[int]:
        """`add` of each of `dup_ids` (distinct), all held by record `record_id`: the records
        whose last entry they overwrote (those records can go)."""
        size = self.size
        if size <= 0 or not dup_ids:
            return []
        ids, ring, records, held = self.ids, self._ring, self._records, self._held
        held[record_id] = held.get(record_id, 0) + len(dup_ids)
        freed = []
        pos = self._pos
        for dup_id in dup_ids:
            old_id = ring[pos]
            if old_id is not None:
                old_record = records[pos]
                if ids.get(old_id) == old_record:
                    del ids[old_id]
                left = held[old_record] - 1
                if left:
                    held[old_record] = left
                else:
                    del held[old_record]
                    freed.append(old_record)
            ring[pos] = dup_id
            records[pos] = record_id
            ids[dup_id] = record_id
            pos += 1
            if pos == size:
                pos = 0
        self._pos = pos
        return freed

    def entries(self) -> list[tuple[str, int]]:
        """Oldest first."""
        out = []
        for i in range(self.size):
            at = (self._pos + i) % self.size
            if self._ring[at] is not None:
                out.append((self._ring[at], self._records[at]))
        return out


class DuplicateDetection:
    """A mixin of `PostOffice`: its caches (`dup_caches`) and how an ID is journalled."""

    def _dup_cache(self: PostOffice, address: str, settings: AddressSettings) -> DuplicateIdCache:
        cache = self.dup_caches.get(address)
        if cache is None:
            size = settings.id_cache_size if settings.id_cache_size is not None else self.id_cache_size
            if address.startswith(MIGRATION_CACHE_PREFIX):
                size = max(size, MIGRATION_ID_CACHE)
            cache = self.dup_caches[address] = DuplicateIdCache(address, size)
        return cache

    def remember_dup(self: PostOffice, cache: DuplicateIdCache, dup_id: str, tx_id: int, *,
                     after_pages: bool = False) -> None:
        """Add `dup_id` to `cache`, journalled (with the eviction it causes) in `tx_id`.

        `after_pages`: the message went (in part) to page files, which a journal transaction
        cannot include; the ID is journalled only once those pages are durable (see
        `FileStore.add_duplicate_id_after_pages`), so a crash never keeps the ID without the
        message (a resend would be dropped and the message lost). A crash after the pages and
        before the ID can let a resend through as a second copy (at least once, never lost),
        unless its one page record is the send's only home: then recovery takes the ID from it."""
        record_id = self.store.next_id()
        evicted = cache.add(dup_id, record_id)
        if self.persist_id_cache:
            if evicted is not None:
                self.store.delete_duplicate_id(tx_id, evicted)
            if after_pages:
                self.store.add_duplicate_id_after_pages(record_id, cache.address, dup_id)
            else:
                self.store.add_duplicate_id(tx_id, record_id, cache.address, dup_id)

    def remember_dups(self: PostOffice, cache: DuplicateIdCache, dup_ids: list[str], tx_id: int) -> None:
        """Add `dup_ids` to `cache` as one journal record in `tx_id` (a migration's batch: one
        record, not one per ID and one more for each ID it evicts), with the records the cache
        no longer needs deleted. Never for messages that went to page files (see `remember_dup`)."""
        if not dup_ids:
            return
        record_id = self.store.next_id()
        evicted = cache.add_all(dup_ids, record_id)
        if self.persist_id_cache and cache.size > 0:  # (its last entry, at least, is in the cache)
            for old in evicted:
                self.store.delete_duplicate_id(tx_id, old)
            self.store.add_duplicate_ids(tx_id, record_id, cache.address, dup_ids)

    def _remember_sent(self: PostOffice, address: str, dup_id: str, tx_id: int, message: Message,
                       paged_before: int) -> None:
        """Remember a routed message's duplicate ID; after its pages when any of it was paged
        (here or in a store-and-forward copy: `paged_routes` moved)."""
        cache = self._dup_cache(address, self.settings_for(address))
        self.remember_dup(cache, dup_id, tx_id,
                          after_pages=message.durable and self.paged_routes != paged_before)
