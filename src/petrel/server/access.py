"""What one connection may do: its `Subject` and the permissions it was found to have.

Each protocol adapter holds an `Access`. A permission granted once is remembered for the
connection's life (a set lookup on the hot path); a refusal raises
`petrel.security.NotAuthorized` every time, with an audit line. A SEND or SUBSCRIBE that would
auto-create an address or a queue also needs ``createAddress`` or ``create*Queue`` on it, as in
Artemis. The subject is kept for the connection's life: a user whose password or roles change
keeps the access it logged in with until it reconnects (as Artemis does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from petrel.core.message import RoutingType
from petrel.security.subject import Subject

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import Queue
    from petrel.security.guard import Security

__all__ = ["Access"]

_REMEMBERED = 4096  # granted (permission, address) pairs kept per connection


class Access:
    """One connection's subject and the (permission, address) pairs it was granted."""

    __slots__ = ("security", "enabled", "subject", "_granted", "_sendable")

    def __init__(self, security: Security, subject: Subject | None = None) -> None:
        self.security = security
        self.enabled = security.enabled
        self.subject = subject
        self._granted: set[tuple[str, str]] = set()
        self._sendable: set[tuple[str, RoutingType | None]] = set()  # sends allowed with nothing to create

    def login(self, subject: Subject) -> None:
        self.subject = subject
        self._granted.clear()
        self._sendable.clear()

    @property
    def user(self) -> str | None:
        """The user per-user limits count this connection for: None when anonymous, the cluster, or
        security is off."""
        subject = self.subject
        if not self.enabled or subject is None or subject.user is None or self.internal:
            return None
        return subject.user

    @property
    def internal(self) -> bool:
        """May this connection send cluster frames (bridges, replication, scale-down)?"""
        return self.security.is_internal(self.subject)

    def check(self, permission: str, address: str) -> None:
        """Raise `NotAuthorized` unless the subject holds ``permission`` on ``address``."""
        if not self.enabled or (permission, address) in self._granted:
            return
        subject = self.subject
        if subject is None:
            from petrel.security.errors import NotAuthorized

            raise NotAuthorized(permission, address, None)
        self.security.check(subject, permission, address)
        if len(self._granted) >= _REMEMBERED:
            self._granted.clear()
        self._granted.add((permission, address))

    # -- what a SEND or a SUBSCRIBE needs --------------------------------------------------------

    def send(self, office: PostOffice, name: str, routing_type: RoutingType | None) -> None:
        """A send to ``name``: ``send``, plus what it would auto-create. The hot path: a send
        allowed before, whose address (and anycast queue) still exist, costs two or three lookups."""
        if not self.enabled:
            return
        if (name, routing_type) in self._sendable and name in office.addresses and (
                routing_type is not RoutingType.ANYCAST or name in office.queues):
            return
        self.check("send", name)
        address = office.addresses.get(name)
        if address is not None and routing_type is None and len(address.routing_types) == 1:
            routing_type = next(iter(address.routing_types))
        self._address(office, name, routing_type)
        if routing_type == RoutingType.ANYCAST or (routing_type is None and address is None and _default_anycast(
                office, name)):
            self._anycast_queue(office, name)
        if address is not None and (routing_type is None or routing_type in address.routing_types) and (
                routing_type is not RoutingType.ANYCAST or name in office.queues):
            if len(self._sendable) >= _REMEMBERED:
                self._sendable.clear()
            self._sendable.add((name, routing_type))

    def subscribe(self, office: PostOffice, name: str, routing_type: RoutingType | None, *,
                  durable_queue: str | None = None, filter: str | None = None) -> None:
        """A consumer on ``name`` (a queue name, or a topic's address): ``consume`` on the
        address, plus what it would auto-create (the address, the anycast queue, the
        subscription queue; a durable one that changes is deleted and made again)."""
        if not self.enabled:
            return
        queue = office.queues.get(name)
        if routing_type == RoutingType.ANYCAST and queue is not None:
            self.check("consume", queue.address)
            return
        address = office.addresses.get(name)
        if address is not None and routing_type is None:
            routing_type = (next(iter(address.routing_types)) if len(address.routing_types) == 1
                            else RoutingType.MULTICAST)
        elif routing_type is None:
            routing_type = RoutingType.ANYCAST if _default_anycast(office, name) else RoutingType.MULTICAST
        self.check("consume", name)
        self._address(office, name, routing_type)
        if routing_type == RoutingType.ANYCAST:
            if queue is None:
                self._anycast_queue(office, name)
        elif durable_queue is None:
            self.check("createNonDurableQueue", name)
        else:
            existing = office.queues.get(durable_queue)
            if existing is None or existing.address != name or _filter(existing) != (filter or None):
                if existing is not None:
                    self.check("deleteDurableQueue", existing.address)
                self.check("createDurableQueue", name)

    def delete_queue(self, queue: Queue) -> None:
        """Deleting ``queue``: ``deleteDurableQueue`` or ``deleteNonDurableQueue`` on its address."""
        self.check("deleteDurableQueue" if queue.durable else "deleteNonDurableQueue", queue.address)

    def _address(self, office: PostOffice, name: str, routing_type: RoutingType | None) -> None:
        address = office.addresses.get(name)
        if address is None or (routing_type is not None and routing_type not in address.routing_types):
            self.check("createAddress", name)

    def _anycast_queue(self, office: PostOffice, name: str) -> None:
        queue = office.queues.get(name)
        if queue is not None and queue.address == name:
            return
        address = office.addresses.get(name)
        if address is None or not address.anycast:
            self.check("createDurableQueue", name)  # an auto-created queue is durable


def _default_anycast(office: PostOffice, name: str) -> bool:
    return office.settings_for(name).default_address_routing_type == "ANYCAST"


def _filter(queue: Queue) -> str | None:
    return queue.selector.text if queue.selector else None
