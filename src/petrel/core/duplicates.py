"""Per-address circular caches of duplicate IDs, persisted one record per entry."""

from __future__ import annotations


class DuplicateIdCache:
    """The last `size` duplicate IDs sent to one address; the oldest is overwritten first."""

    __slots__ = ("address", "size", "_ids", "_ring", "_pos")

    def __init__(self, address: str, size: int) -> None:
        self.address = address
        self.size = size
        self._ids: dict[str, int] = {}  # dup id -> record id
        self._ring: list[tuple[str, int] | None] = [None] * max(size, 0)
        self._pos = 0

    def __contains__(self, dup_id: str) -> bool:
        return dup_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, dup_id: str, record_id: int) -> int | None:
        """Remember an ID; returns the record id of the entry it overwrote, if any."""
        if self.size <= 0:
            return None
        evicted = self._ring[self._pos]
        old_record = None
        if evicted is not None:
            old_id, old_record = evicted
            if self._ids.get(old_id) == old_record:
                del self._ids[old_id]
        self._ring[self._pos] = (dup_id, record_id)
        self._ids[dup_id] = record_id
        self._pos = (self._pos + 1) % self.size
        return old_record

    def entries(self) -> list[tuple[str, int]]:
        """Oldest first."""
        out = []
        for i in range(self.size):
            e = self._ring[(self._pos + i) % self.size]
            if e is not None:
                out.append(e)
        return out
