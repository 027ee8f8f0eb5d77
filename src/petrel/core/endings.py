"""Where a message goes when it cannot stay: expiry to the expiry address and dead-lettering
after too many delivery attempts (a PostOffice mixin)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from petrel.core.errors import RoutingError
from petrel.core.message import ACTUAL_EXPIRY_TIME, ORIGINAL_ADDRESS, ORIGINAL_MESSAGE_ID, ORIGINAL_QUEUE, RoutingType
from petrel.core.queue import DONE, MessageReference

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice

__all__ = ["Endings"]

log = logging.getLogger("petrel.core.postoffice")


class Endings:
    def expire(self: PostOffice, ref: MessageReference) -> None:
        """A reference whose message expired: to the expiry address, or dropped."""
        ref.state = DONE
        queue = ref.queue
        queue.messages_expired += 1
        target = self.settings_for(queue.address).expiry_address
        extra = {ACTUAL_EXPIRY_TIME: self.now()}
        self._move_to(ref, target, extra, "expired")

    def dead_letter(self: PostOffice, ref: MessageReference) -> None:
        """Too many delivery attempts: to the dead-letter address, or dropped."""
        ref.state = DONE
        queue = ref.queue
        queue.messages_killed += 1
        target = self.settings_for(queue.address).dead_letter_address
        self._move_to(ref, target, {}, "dead-lettered")

    def _move_to(self: PostOffice, ref: MessageReference, target: str | None, extra: dict, why: str) -> None:
        queue = ref.queue
        if not target or (target == queue.address):
            log.info("message %s on %s %s and dropped (no address configured)", ref.message.id, queue.name, why)
            self.reference_done(ref, 0)
            self.queue_idle_check(queue)
            return
        tx_id = self.store.begin()
        extra = {
            ORIGINAL_ADDRESS: ref.message.address,
            ORIGINAL_QUEUE: queue.name,
            ORIGINAL_MESSAGE_ID: ref.message.id,
            **extra,
        }
        copy = ref.message.copy_to(self.store.next_id(), target, extra)
        try:
            self.link_large(copy, ref.message)
            address, _ = self.ensure_address_for(target, RoutingType.ANYCAST if target not in self.addresses else None)
            if RoutingType.ANYCAST in address.routing_types and not address.anycast:
                self.ensure_anycast_queue(address)
            copy.properties.pop("_AMQ_DUPL_ID", None)
            self._route(copy, None, tx_id)
        except RoutingError as exc:
            log.warning("message %s %s but %s: dropped", ref.message.id, why, exc)
            self.discard(copy)
        self.reference_done(ref, tx_id)
        self.commit_store(tx_id)
        self.queue_idle_check(queue)

    def expire_scan(self: PostOffice) -> int:
        now = self.now()
        return sum(q.expire_scan(now) for q in list(self.queues.values()))
