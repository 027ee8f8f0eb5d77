"""Memory accounting per queue, address and broker, and the address-full policies.

Every message reference held in memory counts its message size against its queue, its
address and the broker. When an address passes `max_size_bytes` / `max_size_messages`, or the
broker passes `global_max_size`, the address's `address_full_policy` decides:

- PAGE: new references go to page files (only for the queues that hold the backlog, so a
  fast subscriber keeps receiving from memory while a slow one pages);
- BLOCK: the message is accepted and the producer's connection stops being read until
  space frees;
- FAIL: the send is refused with an error;
- DROP: the message is dropped and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from petrel.core.address import Address
    from petrel.core.queue import Queue
    from petrel.core.settings import AddressSettings

POLICIES = ("PAGE", "BLOCK", "FAIL", "DROP")


class AddressFull(Exception):
    """FAIL policy: the address is full; the message was not stored."""


class MemoryLimits:
    def __init__(self, global_max_size: int = -1, flow_control_bytes: int = -1) -> None:
        self.global_max_size = global_max_size
        # Producer flow control: an address whose consumers fall this far behind stops
        # reading its producers until they catch up to half of it (-1 = off).
        self.flow_control_bytes = flow_control_bytes
        self.total_bytes = 0
        self.by_address: dict[str, int] = {}
        self.messages_by_address: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.disk_full = False
        self._waiters: list[tuple[str, Callable[[], None]]] = []

    def added(self, address: str, size: int) -> None:
        self.total_bytes += size
        self.by_address[address] = self.by_address.get(address, 0) + size
        self.messages_by_address[address] = self.messages_by_address.get(address, 0) + 1

    def added_many(self, address: str, size: int, count: int) -> None:
        """`added` for `count` messages of `size` bytes in all."""
        if count:
            self.total_bytes += size
            self.by_address[address] = self.by_address.get(address, 0) + size
            self.messages_by_address[address] = self.messages_by_address.get(address, 0) + count

    def removed(self, address: str, size: int) -> None:
        self.total_bytes -= size
        left = self.by_address.get(address, 0) - size
        count = self.messages_by_address.get(address, 0) - 1
        if left <= 0 or count <= 0:
            self.by_address.pop(address, None)
            self.messages_by_address.pop(address, None)
        else:
            self.by_address[address] = left
            self.messages_by_address[address] = count

    def is_full(self, address: str, settings: AddressSettings, pending: tuple[int, int] = (0, 0)) -> bool:
        """`pending`: (bytes, messages) routed to `address` in a store transaction not yet
        committed, so not counted yet (a migration's batches of one read)."""
        extra_bytes, extra_messages = pending
        if settings.max_size_bytes >= 0 and self.by_address.get(address, 0) + extra_bytes >= settings.max_size_bytes:
            return True
        if (settings.max_size_messages >= 0
                and self.messages_by_address.get(address, 0) + extra_messages >= settings.max_size_messages):
            return True
        return self.global_max_size >= 0 and self.total_bytes + extra_bytes >= self.global_max_size

    # -- producer flow control, per queue (see core/flow.py) ------------------------------

    def behind(self, address: Address) -> list[Queue]:
        """The queues of `address` whose consumers are attached but `flow_control_bytes` behind:
        they slow the address's producers down (a stalled one no longer does)."""
        limit = self.flow_control_bytes
        if limit < 0 or self.by_address.get(address.name, 0) < limit:
            return []
        return [q for queues in (address.anycast, address.multicast) for q in queues
                if q.memory_bytes >= limit and self._throttling(q)]

    def hot(self, address: Address) -> bool:
        """Some queue of `address` is still above the point where throttled producers may resume."""
        limit = self.flow_control_bytes
        if limit < 0 or self.by_address.get(address.name, 0) < limit // 2:
            return False
        return any(q.memory_bytes >= limit // 2 and self._throttling(q)
                   for queues in (address.anycast, address.multicast) for q in queues)

    def _throttling(self, queue: Queue) -> bool:
        if not queue.consumers or queue.paging:
            return False
        if queue.stalled and queue.memory_bytes < self.flow_control_bytes // 2:
            queue.stalled = False  # caught up
        return not queue.stalled

    def should_page(self, queue: Queue, address: Address, settings: AddressSettings) -> bool:
        """PAGE: page for the queues that hold (their share of) the backlog, and for a stalled
        queue (core/flow.py) until it has caught up."""
        if queue.paging:
            return True
        if queue.stalled:
            if queue.memory_bytes >= self.flow_control_bytes // 2:
                return True
            queue.stalled = False
        if not self.is_full(address.name, settings):
            return False
        n = max(len(address.anycast) + len(address.multicast), 1)
        if settings.max_size_bytes >= 0:
            share = settings.max_size_bytes / n
        else:
            share = self.by_address.get(address.name, 0) / n
        return queue.memory_bytes >= share or not queue.consumers

    # -- BLOCK: producers waiting for space --------------------------------------------

    def wait_for_space(self, address: str, callback: Callable[[], None]) -> None:
        self._waiters.append((address, callback))

    def wake(self, is_full: Callable[[str], bool] | None = None) -> None:
        if self.disk_full:
            return
        ready, waiting = [], []
        for address, callback in self._waiters:
            (waiting if is_full is not None and is_full(address) else ready).append((address, callback))
        self._waiters = waiting
        for _, callback in ready:
            callback()
