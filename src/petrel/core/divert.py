"""Diverts: copy (or take) messages sent to one address over to another, optionally filtered.

Exclusive diverts take the message away from the original address; non-exclusive ones send
a copy and let the original through. With them come ActiveMQ Classic's composite
destinations (non-exclusive diverts to several addresses) and virtual topics (see README).
"""

from __future__ import annotations

from dataclasses import dataclass

from petrel.core.message import ORIGINAL_ADDRESS, Message, RoutingType
from petrel.core.selector import Selector

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
