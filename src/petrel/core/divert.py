"""Diverts: copy (or take) messages sent to one address over to another, optionally filtered.

Exclusive diverts take the message away from the original address; non-exclusive ones send
a copy and let the original through. With them come ActiveMQ Classic's composite
destinations (non-exclusive diverts to several addresses) and virtual topics (see README).
"""

from __future__ import annotations

from dataclasses import dataclass

import logging

from petrel.core.errors import RoutingError
from petrel.core.message import ORIGINAL_ADDRESS, Message, RoutingType
from petrel.core.selector import Selector, compile_selector
from petrel.storage.store import DivertRecord

log = logging.getLogger("petrel.core.divert")

MAX_DIVERT_DEPTH = 8

ROUTING_TYPES = ("STRIP", "PASS", "ANYCAST", "MULTICAST")


@dataclass(slots=True)
class Divert:
    id: int
    name: str
    address: str
    forwarding_address: str
    exclusive: bool = False
    selector: Selector | None = None
    routing_type: str = "STRIP"

    def matches(self, message: Message) -> bool:
        return self.selector is None or self.selector.matches(message)

    def target_routing(self, original: RoutingType | None) -> RoutingType | None:
        """STRIP: the forwarding address decides; PASS: keep the sender's; or force one."""
        if self.routing_type == "PASS":
            return original
        if self.routing_type == "ANYCAST":
            return RoutingType.ANYCAST
        if self.routing_type == "MULTICAST":
            return RoutingType.MULTICAST
        return None

    def copy(self, message: Message, new_id: int) -> Message:
        copy = message.copy_to(new_id, self.forwarding_address, {ORIGINAL_ADDRESS: message.address})
        copy.expiration = message.expiration
        copy.scheduled = message.scheduled
        return copy


class Diverting:
    """The post office's diverts (a mixin of `PostOffice`)."""

    def create_divert(
        self,
        name: str,
        address: str,
        forwarding_address: str,
        *,
        exclusive: bool = False,
        filter: str | None = None,
        routing_type: str = "STRIP",
    ) -> Divert:
        if name in self.diverts:
            raise RoutingError(f"divert {name!r} already exists")
        if routing_type not in ROUTING_TYPES:
            raise RoutingError(f"divert routing type must be one of {', '.join(ROUTING_TYPES)}")
        if address == forwarding_address:
            raise RoutingError("a divert cannot forward an address to itself")
        divert = Divert(
            self.store.next_id(), name, address, forwarding_address, exclusive,
            compile_selector(filter) if filter else None, routing_type,
        )
        self.diverts[name] = divert
        self.store.add_divert(DivertRecord(divert.id, name, address, forwarding_address, exclusive, filter, routing_type))
        return divert

    def delete_divert(self, name: str) -> None:
        divert = self.diverts.pop(name, None)
        if divert is None:
            raise RoutingError(f"divert {name!r} does not exist")
        self.store.delete_divert(divert.id)

    def _apply_diverts(self, message: Message, routing_type: RoutingType | None, tx_id: int, depth: int) -> bool:
        """Send diverted copies; True when an exclusive divert took the message."""
        taken = False
        for divert in list(self.diverts.values()):
            if divert.address != message.address or not divert.matches(message):
                continue
            if depth >= MAX_DIVERT_DEPTH:
                log.warning("divert %s not applied: diverts nest deeper than %d", divert.name, MAX_DIVERT_DEPTH)
                continue
            copy = divert.copy(message, self.store.next_id())
            target_rt = divert.target_routing(routing_type)
            try:
                self.link_large(copy, message)
                address, rt = self.ensure_address_for(copy.address, target_rt)
                if rt == RoutingType.ANYCAST:
                    self.ensure_anycast_queue(address)
                self._route(copy, target_rt, tx_id, depth=depth + 1)
            except RoutingError as exc:
                log.warning("divert %s could not forward to %s: %s", divert.name, divert.forwarding_address, exc)
                self.discard(copy)
            taken = taken or divert.exclusive
        return taken

