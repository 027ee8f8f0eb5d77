"""Which bindings a node advertises to a peer, and how (pure).

A peer that joined with `max_hops` h learns this node's queues (distance 0, so h >= 1) and the
remote bindings this node reaches within h - 1 further hops, except those that lead back to
the peer itself. Internal queues and addresses outside the cluster connection's `address`
filter are never advertised.
"""

from __future__ import annotations

from petrel.codec.core.cluster import BindingInfo
from petrel.core.queue import Queue
from petrel.core.redistribution import INTERNAL_PREFIX
from petrel.core.remote import RemoteBinding

__all__ = ["AddressFilter", "binding_info", "advertised"]


class AddressFilter:
    """Artemis's cluster-connection `address`: comma-separated prefixes, `!` excludes; empty = all."""

    def __init__(self, text: str) -> None:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        self.include = [p for p in parts if not p.startswith("!")]
        self.exclude = [p[1:] for p in parts if p.startswith("!")]

    def covers(self, address: str) -> bool:
        if address.startswith(INTERNAL_PREFIX):
            return False
        if any(address.startswith(p) for p in self.exclude):
            return False
        return not self.include or any(address.startswith(p) for p in self.include)


def advertised(binding: Queue | RemoteBinding, peer_node: str, max_hops: int, filter: AddressFilter, *,
               removing: bool = False) -> bool:
    """Whether the peer hears of `binding` (`removing`: whether it had, for a queue being deleted)."""
    if not filter.covers(binding.address) or binding.name.startswith(INTERNAL_PREFIX):
        return False
    if isinstance(binding, Queue):
        return max_hops >= 1 and (removing or not binding.deleted)
    return (binding.distance < max_hops and binding.origin != peer_node
            and binding.link.node_id != peer_node)


def binding_info(binding: Queue | RemoteBinding, own_node: str) -> BindingInfo:
    if isinstance(binding, Queue):
        return BindingInfo(
            binding.name, binding.name, binding.address, int(binding.routing_type),
            binding.selector.text if binding.selector is not None else None,
            len(binding.consumers),
            [c.selector.text if c.selector is not None else None for c in binding.consumers],
            0, own_node,
        )
    return BindingInfo(
        binding.key, binding.name, binding.address, int(binding.routing_type),
        binding.selector.text if binding.selector is not None else None,
        binding.consumer_count,
        [s.text if s is not None else None for s in binding.consumer_selectors],
        binding.distance, binding.origin,
    )
