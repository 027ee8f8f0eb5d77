"""Producer flow control, per queue: the queues that fall behind slow their producers down,
for a while; a queue that stays behind stops doing so and pages instead.

A queue holds its address's producers back (`SendResult.throttled`) while its consumers are
`flow_control_bytes` behind, until they catch up to half of it. One subscriber that stops
reading must not freeze a topic for everyone (issue 9, bug 11), so each queue that throttles
is looked at again after `STALL_MS`: if it is still behind and its consumers took nothing
meanwhile (a stalled client: a full socket, an exhausted prefetch window), or it shares the
address with other queues and did not catch up (a slow subscriber holding fast ones back), it
is *stalled*: it no longer throttles, and under the PAGE policy its new references go to page
files (Artemis pages the slow subscription's backlog). Its memory stays at about
`flow_control_bytes`; the producers and the other queues keep flowing. It stops being stalled
once it has caught up (`MemoryLimits.should_page`, `MemoryLimits.behind`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from petrel.core.address import Address
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import Queue

log = logging.getLogger("petrel.core.flow")

STALL_MS = 1000  # how long a queue may throttle its producers without catching up


class FlowControl:
    """A mixin of `PostOffice`."""

    def throttles(self: PostOffice, address: Address) -> bool:
        """Whether producers of `address` should pause (some queue of it is behind); every
        queue that is behind is watched for a stall."""
        behind = self.limits.behind(address)
        for queue in behind:
            if queue.stall_check is None:
                self._watch_stall(queue, len(address.anycast) + len(address.multicast) > 1)
        return bool(behind)

    def space_for(self: PostOffice, address: str) -> bool:
        """Whether blocked or throttled producers of this address may go on."""
        limits = self.limits
        if limits.disk_full or limits.is_full(address, self.settings_for(address)):
            return False
        found = self.addresses.get(address)
        return found is None or not limits.hot(found)

    def _watch_stall(self: PostOffice, queue: Queue, shared: bool) -> None:
        acked = queue.messages_acked

        def check() -> None:
            queue.stall_check = None
            limit = self.limits.flow_control_bytes
            if queue.deleted or queue.paging or limit < 0 or queue.memory_bytes < limit // 2:
                return  # caught up (or paging already)
            if queue.messages_acked != acked and not shared:
                self._watch_stall(queue, shared)  # its consumers are taking messages: keep pace
                return
            queue.stalled = True
            log.info("queue %s is %d bytes behind and its consumers %s: it no longer slows the "
                     "producers of %s%s", queue.name, queue.memory_bytes,
                     "took nothing" if queue.messages_acked == acked else "did not catch up",
                     queue.address, " (new messages page)" if self._can_page(queue) else "",
                     extra={"event": "flow.stalled"})
            if self.limits._waiters:
                self.limits.wake(lambda a: not self.space_for(a))

        queue.stall_check = self.scheduler.call_at_ms(self.now() + STALL_MS, check)

    def _can_page(self: PostOffice, queue: Queue) -> bool:
        return self.store.supports_paging and self.settings_for(queue.address).address_full_policy == "PAGE"
