"""Addresses and their queues: made, found and removed (a mixin of the post office).

Each change is written to the store's bindings records; what a queue holds and how messages
reach it is the post office's routing (`postoffice.py`).
"""

from __future__ import annotations

import logging
import uuid

from petrel.core.address import Address
from petrel.core.errors import RoutingError
from petrel.core.message import RoutingType
from petrel.core.names import check_name
from petrel.core.queue import Queue
from petrel.core.recovery import SEQ_RESERVATION, address_record, queue_record
from petrel.core.selector import compile_selector

log = logging.getLogger("petrel.core.postoffice")


class Addressing:
    """Creating, finding and deleting addresses and queues (`PostOffice` holds the state)."""

    def create_address(self, name: str, routing_types: set[RoutingType], *, auto_created: bool = False) -> Address:
        address = self.addresses.get(name)
        if address is not None:
            missing = set(routing_types) - address.routing_types
            if missing:
                address.routing_types |= missing
                self.store.update_address(address_record(address))
            return address
        if not self._names_from_elsewhere:
            check_name("address", name)
        self.quota.check_address(self, name, auto_created)
        address = Address(self.store.next_id(), name, routing_types, auto_created)
        self.addresses[name] = address
        self.quota.added(address)
        self.wildcard_address_added(address)
        self.store.add_address(address_record(address))
        log.debug("address created: %s %s", name, routing_types)
        return address

    def delete_address(self, name: str) -> None:
        address = self.addresses.get(name)
        if address is None:
            raise RoutingError(f"address {name!r} does not exist")
        for queue in list(address.queues):
            self.delete_queue(queue.name)
        del self.addresses[name]
        self.quota.removed(address)
        self.store.delete_address(address.id)

    def create_queue(
        self,
        name: str,
        address: str,
        routing_type: RoutingType,
        *,
        durable: bool = True,
        filter: str | None = None,
        auto_created: bool = False,
        temporary: bool = False,
        client_id: str | None = None,
        subscription: str | None = None,
        attributes: dict | None = None,
    ) -> Queue:
        """`attributes` (exclusive, last_value_key, non_destructive, ring_size, group_rebalance,
        group_buckets) default to the address settings' `default_*` values."""
        if name in self.queues:
            raise RoutingError(f"queue {name!r} already exists")
        if not self._names_from_elsewhere:
            check_name("queue", name, temporary=temporary)
        self.quota.check_queue(self, name, auto_created or temporary)
        creator = self.creator
        self.quota.check_user(self, name, creator)
        selector = compile_selector(filter) if filter else None
        attrs = self._queue_attributes(address, attributes)
        addr = self.addresses.get(address)
        if addr is None:
            addr = self.create_address(address, {routing_type}, auto_created=auto_created)
        elif routing_type not in addr.routing_types:
            self.create_address(address, {routing_type})
        queue = Queue(
            self,
            self.store.next_id(),
            name,
            address,
            routing_type,
            durable=durable and not temporary,
            selector=selector,
            auto_created=auto_created,
            temporary=temporary,
            client_id=client_id,
            subscription=subscription,
            **attrs,
        )
        queue.created_by = creator
        self._register(queue, addr)
        if queue.durable:
            queue.seq_reserved = SEQ_RESERVATION
            self.store.add_queue(queue_record(queue))
        return queue

    def _queue_attributes(self, address: str, given: dict | None) -> dict:
        settings = self.settings_for(address)
        attrs = {
            "exclusive": settings.default_exclusive_queue,
            "last_value_key": settings.default_last_value_key,
            "non_destructive": settings.default_non_destructive,
            "ring_size": settings.default_ring_size,
            "group_rebalance": settings.default_group_rebalance,
            "group_buckets": settings.default_group_buckets,
        }
        for key, value in (given or {}).items():
            if key not in attrs:
                raise RoutingError(f"unknown queue attribute {key!r}; known: {', '.join(attrs)}")
            if value is not None:
                attrs[key] = value
        return attrs

    def _register(self, queue: Queue, address: Address) -> None:
        self.queues[queue.name] = queue
        self.queues_by_id[queue.id] = queue
        address.bind(queue)
        self.quota.added(queue)
        if self.observer is not None:
            self.observer.binding_added(queue)
        for listener in list(self.queue_listeners):
            listener(queue)

    def delete_queue(self, name: str) -> None:
        queue = self.queues.get(name)
        if queue is None:
            raise RoutingError(f"queue {name!r} does not exist")
        for consumer in list(queue.consumers):
            queue.remove_consumer(consumer)
            consumer.closed = True
        queue.purge()
        queue.deleted = True
        del self.queues[name]
        del self.queues_by_id[queue.id]
        self.quota.removed(queue)
        address = self.addresses.get(queue.address)
        if address is not None:
            address.unbind(queue)
        if queue.durable:
            self.store.delete_queue(queue.id)
        self._forget_idle(queue)
        self.forget_seq_cursors(queue)
        if self.observer is not None:
            self.observer.binding_removed(queue)
        if queue.page_cursor_record:
            self.store.delete_pages(queue.id, queue.page_cursor_record)
            queue.paging, queue.page_backlog = False, 0
        if address is not None and not address.queues and address.auto_created:
            if self.settings_for(address.name).auto_delete_addresses:
                del self.addresses[address.name]
                self.quota.removed(address)
                self.store.delete_address(address.id)

    def queue_idle_check(self, queue: Queue) -> None:
        """Auto-delete: temporary queues with no consumer; auto-created ones with nothing left."""
        if queue.deleted or queue.consumers:
            return
        if queue.temporary:
            self.delete_queue(queue.name)
        elif (queue.auto_created and queue.message_count == 0 and not self.has_seq_cursors(queue)
              and not (self.prepared and self.prepared_sends_to(queue))):  # (they join it at their commit)
            if self.settings_for(queue.address).auto_delete_queues:
                self.delete_queue(queue.name)

    def ensure_address_for(self, name: str, routing_type: RoutingType | None) -> tuple[Address, RoutingType]:
        """Find (or auto-create) the address a client named, with the routing type to use."""
        address = self.addresses.get(name)
        if routing_type is None:
            if address is not None and len(address.routing_types) == 1:
                for routing_type in address.routing_types:
                    return address, routing_type  # (the usual case: nothing to create)
            elif address is not None:
                routing_type = RoutingType.MULTICAST
            else:
                routing_type = RoutingType.parse(self.settings_for(name).default_address_routing_type)
        elif address is not None and routing_type in address.routing_types:
            return address, routing_type
        settings = self.settings_for(name)
        if address is None:
            if not settings.auto_create_addresses:
                raise RoutingError(f"address {name!r} does not exist and auto-create-addresses is off for it")
            address = self.create_address(name, {routing_type}, auto_created=True)
        elif routing_type not in address.routing_types:
            if not settings.auto_create_addresses:
                raise RoutingError(f"address {name!r} does not support {routing_type.name} routing")
            self.create_address(name, {routing_type})
        return address, routing_type

    def ensure_anycast_queue(self, address: Address) -> Queue:
        """The queue behind a point-to-point name (`/queue/X`): the one named like the address."""
        queue = self.queues.get(address.name)
        if queue is not None and queue.address == address.name:
            return queue
        if address.anycast:
            return address.anycast[0]
        if not self.settings_for(address.name).auto_create_queues:
            raise RoutingError(f"queue {address.name!r} does not exist and auto-create-queues is off for it")
        return self.create_queue(address.name, address.name, RoutingType.ANYCAST, auto_created=True)

    def subscribe_multicast(
        self,
        address: Address,
        *,
        filter: str | None,
        client_id: str | None = None,
        subscription: str | None = None,
    ) -> Queue:
        """A topic subscription: a temporary queue, or a durable one named `client_id.subscription`."""
        if subscription is None:
            return self.create_queue(
                f"{address.name}.{uuid.uuid4()}",
                address.name,
                RoutingType.MULTICAST,
                durable=False,
                filter=filter,
                temporary=True,
            )
        if not client_id:
            raise RoutingError("a durable subscription needs a client-id on the connection (client-id header)")
        name = f"{client_id}.{subscription}"
        queue = self.queues.get(name)
        if queue is not None:
            old_filter = queue.selector.text if queue.selector else None
            if queue.address == address.name and old_filter == (filter or None):
                return queue
            if queue.consumers:
                raise RoutingError(f"durable subscription {name!r} is in use with another address or selector")
            self.delete_queue(name)  # JMS: a changed subscription is a new one
        return self.create_queue(
            name,
            address.name,
            RoutingType.MULTICAST,
            durable=True,
            filter=filter,
            client_id=client_id,
            subscription=subscription,
        )
