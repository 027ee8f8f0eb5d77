"""Remote bindings: queues on other cluster nodes, as the post office sees them.

A remote binding is a binding like a local queue: it has a name, an address, a routing type,
a filter, and the consumer count and consumer filters its node advertises. Routing a message
to one means storing a copy in the store-and-forward queue of the next hop (`link.sf_queue`),
tagged with the binding's key on that hop; the bridge draining that queue does the rest.

Keys: a local queue is known to its neighbours by its name; a remote binding is keyed
``name@origin-node-id``, so a chain A-B-C routes A's copy to B's binding ``X@C``.
"""

from __future__ import annotations

import functools
import json
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from petrel.core.message import Message, RoutingType

if TYPE_CHECKING:
    from petrel.core.queue import Queue
    from petrel.core.selector import Selector

__all__ = ["Balancing", "Link", "RemoteBinding", "ROUTE_TO", "SYNC_FIRST", "INSTANCE", "KEY_SEPARATOR", "ORIGIN",
           "bridge_dup_id", "bridge_dup_sender", "local_demand", "origin_hops", "origin_start", "remote_key", "with_origin"]

#: Property of a store-and-forward copy: the binding keys on the next hop, joined by KEY_SEPARATOR.
ROUTE_TO = "_PETREL_ROUTE_TO"
KEY_SEPARATOR = "\x1f"
#: ... set on copies the bridge may send only once the store has them on disk (redistribution)
SYNC_FIRST = "_PETREL_SYNC_FIRST"
#: Which accepted send a message with a producer's duplicate ID is, "<node id>:<message id>" of
#: its first forwarded copy; kept as it travels on, so a node tells the same message coming back
#: (redistribution) from another send of the same duplicate ID (a resend through another node).
INSTANCE = "_PETREL_INSTANCE"


#: Property a migrated message carries its delivery count in (the target takes it off).
MIGRATED_DELIVERY_COUNT = "_PETREL_MIGRATED_DC"


def bridge_dup_id(node_id: str, message_id: int) -> str:
    """The duplicate ID of a copy a bridge sends: the sending node and the copy's message id."""
    return f"{node_id}:{message_id}"


def migration_dup_id(node_id: str, queue_id: int, seq: int) -> str:
    """The duplicate ID of one queue's message that a migration moves (scale-down, the drainer,
    `petrel spark recover`): the origin node, and the queue's sequence number, which a message
    keeps for good (its message id does not: a paged message gets a new one when it leaves its
    page, and a drain killed before that reached the disk would send it again under another)."""
    return f"{node_id}:{seq}@{queue_id}"


#: Property of a migrated message: where it was before, as a JSON list of [node id, queue name,
#: sequence number] hops, the first the node it was sent to; each migration (scale-down, the
#: drainer, `petrel spark recover`) appends the hop it leaves. A client cannot set it (a send's
#: ``_PETREL_*`` properties are dropped), so it is the message's identity across brokers: the
#: Spark source skips a copy whose earlier position it has read already (petrel.spark.source).
ORIGIN = "_PETREL_ORIGIN"


def with_origin(properties: dict, node_id: str, queue: str, seq: int) -> dict:
    """A copy of `properties` with the hop (`node_id`, `queue`, `seq`) appended to `ORIGIN`
    (written as text: a migration tags every message, json.dumps cost 6 us a message)."""
    out = dict(properties)
    hop = f"{_hop_prefix(node_id, queue)},{seq}]"
    earlier = properties.get(ORIGIN) if properties else None
    out[ORIGIN] = f"{earlier[:-1]},{hop}]" if earlier and origin_hops(properties) else f"[{hop}]"
    return out


def origin_start(node_id: str, queue: str) -> str:
    """What `with_origin` writes before the sequence number for a message with no `ORIGIN` yet:
    its value is this + ``str(seq) + "]]"`` (a migration makes it once per queue)."""
    return f"[{_hop_prefix(node_id, queue)},"


@functools.lru_cache(maxsize=256)
def _hop_prefix(node_id: str, queue: str) -> str:
    """``["<node id>","<queue>"`` in JSON, a hop without its sequence number and bracket."""
    return json.dumps([node_id, queue], separators=(",", ":"))[:-1]


def origin_hops(properties) -> list[tuple[str, str, int]]:
    """The (node id, queue, sequence number) hops of a migrated message's `ORIGIN`, oldest first;
    none for a message never migrated (or an `ORIGIN` that does not parse)."""
    raw = properties.get(ORIGIN) if properties else None
    if not raw:
        return []
    try:
        hops = json.loads(raw)
        return [(str(n), str(q), int(s)) for n, q, s in hops]
    except (TypeError, ValueError):
        return []


def bridge_dup_sender(dup_id: str) -> str:
    """The node that sent a bridged copy (see `bridge_dup_id`)."""
    return dup_id.rpartition(":")[0]


class Balancing(Enum):
    """`message_load_balancing` (Artemis `MessageLoadBalancingType`)."""

    OFF = "OFF"  # anycast messages stay on the node they were sent to
    STRICT = "STRICT"  # round-robin over every same-named queue, consumers or not
    ON_DEMAND = "ON_DEMAND"  # only to nodes with a matching consumer; else local
    OFF_WITH_REDISTRIBUTION = "OFF_WITH_REDISTRIBUTION"  # local first, redistributed later

    @property
    def forwards_anycast(self) -> bool:
        return self in (Balancing.STRICT, Balancing.ON_DEMAND)

    @property
    def redistributes(self) -> bool:
        return self in (Balancing.ON_DEMAND, Balancing.OFF_WITH_REDISTRIBUTION)


class Link(Protocol):
    """The next hop a remote binding is reached through (the cluster's bridge to that node)."""

    node_id: str
    sf_queue: Queue


def remote_key(name: str, origin: str) -> str:
    return f"{name}@{origin}"


class RemoteBinding:
    __slots__ = ("key", "remote_key", "name", "address", "routing_type", "selector", "consumer_count",
                 "consumer_selectors", "distance", "origin", "link", "messages_forwarded")

    def __init__(
        self,
        key: str,
        remote_key: str,
        name: str,
        address: str,
        routing_type: RoutingType,
        selector: Selector | None,
        *,
        origin: str,
        distance: int,
        link: Link,
        consumer_count: int = 0,
        consumer_selectors: list[Selector | None] | None = None,
    ) -> None:
        self.key = key  # this node's name for it: name@origin
        self.remote_key = remote_key  # the next hop's name for it
        self.name = name
        self.address = address
        self.routing_type = routing_type
        self.selector = selector
        self.consumer_count = consumer_count
        self.consumer_selectors = consumer_selectors or []
        self.distance = distance
        self.origin = origin
        self.link = link
        self.messages_forwarded = 0

    def accepts(self, message: Message) -> bool:
        """The queue's own filter."""
        return self.selector is None or self.selector.matches(message)

    def has_demand(self, message: Message) -> bool:
        """A consumer there would take it (Artemis `isHighAcceptPriority`)."""
        if self.consumer_count <= 0:
            return False
        selectors = self.consumer_selectors
        if not selectors or None in selectors:
            return True
        return any(s.matches(message) for s in selectors)

    def __repr__(self) -> str:
        via = (self.link.node_id or "?")[:8]
        return (f"<RemoteBinding {self.key} via {via} {self.routing_type.name} "
                f"consumers={self.consumer_count} distance={self.distance}>")


def local_demand(queue: Queue, message: Message) -> bool:
    """A local queue has a consumer that would take the message."""
    for consumer in queue.consumers:
        selector = consumer.selector
        if selector is None or selector.matches(message):
            return True
    return False
