"""Addresses and their bindings: which queues a message sent to a name reaches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.core.message import Message, RoutingType

if TYPE_CHECKING:
    from petrel.core.queue import Queue


class Address:
    """A name with routing types; ANYCAST picks one queue per message, MULTICAST copies to all."""

    __slots__ = ("id", "name", "routing_types", "auto_created", "anycast", "multicast", "_rr")

    def __init__(self, id: int, name: str, routing_types: set[RoutingType], auto_created: bool = False) -> None:
        self.id = id
        self.name = name
        self.routing_types = set(routing_types)
        self.auto_created = auto_created
        self.anycast: list[Queue] = []
        self.multicast: list[Queue] = []
        self._rr = 0

    @property
    def queues(self) -> list[Queue]:
        return self.anycast + self.multicast

    def bind(self, queue: Queue) -> None:
        (self.anycast if queue.routing_type == RoutingType.ANYCAST else self.multicast).append(queue)

    def unbind(self, queue: Queue) -> None:
        group = self.anycast if queue.routing_type == RoutingType.ANYCAST else self.multicast
        if queue in group:
            group.remove(queue)

    def targets(self, message: Message, routing_type: RoutingType | None) -> list[Queue]:
        """The queues this message goes to; a queue's filter is applied here, at routing."""
        targets: list[Queue] = []
        if routing_type in (None, RoutingType.MULTICAST) and RoutingType.MULTICAST in self.routing_types:
            for q in self.multicast:
                if q.selector is None or q.selector.matches(message):
                    targets.append(q)
        if routing_type in (None, RoutingType.ANYCAST) and RoutingType.ANYCAST in self.routing_types:
            group = self.anycast
            n = len(group)
            for i in range(n):
                q = group[(self._rr + i) % n]
                if q.selector is None or q.selector.matches(message):
                    self._rr = (self._rr + i + 1) % n
                    targets.append(q)
                    break
        return targets

    def __repr__(self) -> str:
        kinds = ",".join(sorted(rt.name for rt in self.routing_types))
        return f"<Address {self.name} {kinds} queues={len(self.anycast) + len(self.multicast)}>"
