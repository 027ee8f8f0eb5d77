"""The post office in a cluster: remote bindings, message load balancing, forwarding, and
messages forwarded here by other nodes.

Routing with remote bindings follows Artemis (`BindingsImpl.getNextBinding`):

- multicast: every matching subscription in the cluster gets the message once; the copies
  for one node travel together, one store-and-forward copy per next hop;
- anycast: one queue among the address's local anycast queues and its remote anycast
  bindings, round-robin. ON_DEMAND takes a remote binding only when a consumer there would
  take the message, and falls back to a local queue; STRICT takes every queue in turn; OFF
  and OFF_WITH_REDISTRIBUTION never forward at routing time.

A forwarded copy is a new message (its own id, so its own store record and large-message
file) in the next hop's store-and-forward queue, in the same store transaction as the local
references of the original, so a crash keeps both or neither.

A message forwarded here is routed at most once per bridge duplicate ID (a copy sent again
after a cut link or a crash), and a producer's duplicate ID it carries counts as for a send to
this node: once a send of that ID reached this node (sent here, or forwarded), another send of
it is dropped, whichever node it came through. So a client's resend after failover is
delivered once where its copies meet; copies that never meet (the first kept on a node that
was down, the resend delivered elsewhere) are beyond any one node's cache.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from petrel.core.duplicates import MIGRATION_CACHE_PREFIX
from petrel.core.errors import RoutingError
from petrel.core.limits import AddressFull
from petrel.core.message import GROUP_ID, Message, RoutingType
from petrel.core.migrated import receive_batch
from petrel.core.outcome import SendOutcome, SendResult
from petrel.core.remote import (
    INSTANCE,
    KEY_SEPARATOR,
    MIGRATED_DELIVERY_COUNT,
    ROUTE_TO,
    SYNC_FIRST,
    Balancing,
    Link,
    RemoteBinding,
    bridge_dup_sender,
    local_demand,
)
from petrel.core.selector import Selector

if TYPE_CHECKING:
    from petrel.core.address import Address
    from petrel.core.duplicates import DuplicateIdCache
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import Queue

__all__ = ["Clustering", "BindingObserver", "BRIDGE_CACHE_PREFIX", "origin_cache"]

log = logging.getLogger("petrel.core.cluster")

#: The duplicate-ID cache of the copies one node's bridge sent here is `BRIDGE.<its node id>`: one
#: cache per sender, so that no other node's traffic evicts the IDs that catch that bridge's
#: resends; the bridge keeps at most half of it in flight (see `bridge_cache_size`).
BRIDGE_CACHE_PREFIX = "BRIDGE."
#: ... and `INSTANCES.<address>` remembers which send (`INSTANCE`) each producer's duplicate ID
#: that arrived forwarded belongs to.
INSTANCES_CACHE_PREFIX = "INSTANCES."
#: ... by which the copies a migration brings from one origin are one send (see `_sent_elsewhere`)
MIGRATED_FROM = "migrated-from:"


def origin_cache(dup_id: str) -> str:
    """The cache of a forwarded copy's duplicate ID: a bridge's copy (`<node>:<message id>`) in
    `BRIDGE.<node>`; a migrated message (`<node>:<message id>@<queue id>`) in `MIGRATION.<node>`."""
    sender = bridge_dup_sender(dup_id)
    return (MIGRATION_CACHE_PREFIX if "@" in dup_id else BRIDGE_CACHE_PREFIX) + sender


class BindingObserver(Protocol):
    """Told about bindings as they change (the cluster advertises them to its neighbours)."""

    def binding_added(self, binding: Queue | RemoteBinding) -> None: ...

    def binding_removed(self, binding: Queue | RemoteBinding) -> None: ...

    def binding_changed(self, binding: Queue | RemoteBinding) -> None: ...


class Clustering:
    """PostOffice mixin; the state lives on the office (see `init_cluster`)."""

    def init_cluster(self: PostOffice) -> None:
        self.remote_bindings: dict[str, RemoteBinding] = {}
        self.remote_by_address: dict[str, list[RemoteBinding]] = {}
        self.balancing = Balancing.ON_DEMAND
        self.observer: BindingObserver | None = None
        self.grouping = None  # the cluster's grouping handler (cluster/grouping.py), if any
        self.messages_forwarded = 0
        self.forwarded_duplicates = 0
        self.node_id = ""  # this node's, once it is in a cluster
        self.init_redistribution()

    def attach_cluster(self: PostOffice, node_id: str, balancing: Balancing, observer: BindingObserver,
                       grouping=None) -> None:
        """The one way a cluster hooks into the office: this node's ID, how to balance, who hears
        about binding changes, and the grouping handler (if any)."""
        self.node_id = node_id
        self.balancing = balancing
        self.observer = observer
        self.grouping = grouping

    def detach_cluster(self: PostOffice) -> None:
        self.observer = None
        self.grouping = None

    # -- remote bindings ---------------------------------------------------------------------

    def add_remote_binding(self: PostOffice, binding: RemoteBinding) -> None:
        if binding.key in self.remote_bindings:
            self.remove_remote_binding(binding.key)
        self.remote_bindings[binding.key] = binding
        self.remote_by_address.setdefault(binding.address, []).append(binding)
        self.remote_wildcard_changed(binding, True)
        log.debug("remote binding added: %r", binding)
        if self.observer is not None:
            self.observer.binding_added(binding)
        if binding.consumer_count > 0:
            self.remote_demand(binding)

    def remove_remote_binding(self: PostOffice, key: str) -> RemoteBinding | None:
        binding = self.remote_bindings.pop(key, None)
        if binding is None:
            return None
        group = self.remote_by_address.get(binding.address)
        if group is not None:
            if binding in group:
                group.remove(binding)
            if not group:
                del self.remote_by_address[binding.address]
        self.remote_wildcard_changed(binding, False)
        log.debug("remote binding removed: %r", binding)
        if self.observer is not None:
            self.observer.binding_removed(binding)
        return binding

    def update_remote_consumers(self: PostOffice, key: str, count: int, selectors: list[Selector | None]) -> None:
        binding = self.remote_bindings.get(key)
        if binding is None:
            return
        binding.consumer_count = max(count, 0)  # never negative (ARTEMIS-4527's ping-pong)
        binding.consumer_selectors = selectors
        if self.observer is not None:
            self.observer.binding_changed(binding)
        if binding.consumer_count > 0:
            self.remote_demand(binding)

    def bindings_via(self: PostOffice, link: Link) -> list[RemoteBinding]:
        return [b for b in self.remote_bindings.values() if b.link is link]

    def consumers_changed(self: PostOffice, queue: Queue) -> None:
        """A local queue gained or lost a consumer."""
        if self.observer is not None:
            self.observer.binding_changed(queue)
        if not queue.consumers:
            self.queue_idle(queue, since=self.now())

    # -- routing -----------------------------------------------------------------------------

    def cluster_targets(
        self: PostOffice, address: Address, message: Message, routing_type: RoutingType | None,
        remote: list[RemoteBinding],
    ) -> tuple[list[Queue], list[RemoteBinding]]:
        """The local queues and remote bindings a message sent to `address` goes to."""
        local: list[Queue] = []
        far: list[RemoteBinding] = []
        if routing_type in (None, RoutingType.MULTICAST) and RoutingType.MULTICAST in address.routing_types:
            for q in address.multicast:
                if q.selector is None or q.selector.matches(message):
                    local.append(q)
            for b in remote:
                if b.routing_type == RoutingType.MULTICAST and b.accepts(message):
                    far.append(b)
        if routing_type in (None, RoutingType.ANYCAST) and RoutingType.ANYCAST in address.routing_types:
            balancing = self.balancing
            candidates: list[Queue | RemoteBinding] = list(address.anycast)
            if balancing.forwards_anycast:
                candidates += [b for b in remote if b.routing_type == RoutingType.ANYCAST and b.link.connected]
            choice = _next_binding(address, candidates, message, balancing)
            grouping = self.grouping
            if grouping is not None and grouping.covers(message):
                choice = grouping.route(message, choice)
                if choice is None:
                    raise RoutingError(f"no grouping decision for group {message.properties.get(GROUP_ID)!r} "
                                       f"on {message.address}: is the LOCAL grouping handler's node up?")
            if isinstance(choice, RemoteBinding):
                far.append(choice)
            elif choice is not None:
                local.append(choice)
        return local, far

    def propose_binding(self: PostOffice, message: Message,
                        routing_type: RoutingType | None = None) -> Queue | RemoteBinding | None:
        """The anycast binding load balancing would pick for `message` (a grouping proposal)."""
        address, routing_type = self.ensure_address_for(message.address, routing_type)
        if routing_type != RoutingType.ANYCAST and RoutingType.ANYCAST not in address.routing_types:
            return None
        self.ensure_anycast_queue(address)
        candidates: list[Queue | RemoteBinding] = list(address.anycast)
        candidates += [b for b in self.remote_by_address.get(address.name, ())
                       if b.routing_type == RoutingType.ANYCAST and b.link.connected]
        return _next_binding(address, candidates, message, self.balancing)

    def forward(self: PostOffice, message: Message, bindings: list[RemoteBinding], tx_id: int, *,
                sync_first: bool = False, delivery_count: int = 0) -> None:
        """Store one copy per next hop in its store-and-forward queue, tagged with the keys there.

        `sync_first`: the bridge sends the copy only once it is on disk. A redistributed copy
        needs it: its transaction also removes the original, and a crash before that is durable
        would bring the original back to be moved again. A routed copy goes at once, as a local
        delivery does: its sender is confirmed only after the disk either way.

        `delivery_count`: how often the message was delivered here (a redistributed one): the
        next hop's reference starts from it, so a message a consumer here saw and never
        acknowledged arrives there as a redelivery."""
        by_link: dict[int, list[RemoteBinding]] = {}
        for b in bindings:
            by_link.setdefault(id(b.link), []).append(b)
        for group in by_link.values():
            link = group[0].link
            props = dict(message.properties)
            props[ROUTE_TO] = KEY_SEPARATOR.join(b.remote_key for b in group)
            copy = Message(self.store.next_id(), message.address, message.body, props, message.durable,
                           message.priority, message.expiration, message.timestamp, message.scheduled,
                           user_id=message.user_id)
            types = {b.routing_type for b in group}
            if len(types) == 1:  # so the next hop can keep an anycast copy whose queue went away
                copy.routing_type = types.pop()  # stored with the message
            if sync_first:
                props[SYNC_FIRST] = True
            if delivery_count:
                props[MIGRATED_DELIVERY_COUNT] = delivery_count
            copy._size = message.size + 64  # the original's, and the route-to keys (no recount)
            self.link_large(copy, message)
            for b in group:
                b.messages_forwarded += 1
            self.messages_forwarded += 1
            self._route(copy, None, tx_id, [link.sf_queue], own_tx=True, track_dup=False)

    # -- messages other nodes forwarded here ---------------------------------------------------

    def migration_cache_size(self: PostOffice, origin: str) -> int:
        """Entries of the duplicate-ID cache for the messages `origin` migrates here."""
        name = MIGRATION_CACHE_PREFIX + origin
        return self._dup_cache(name, self.settings_for(name)).size

    def bridge_cache_size(self: PostOffice, sender: str) -> int:
        """Entries of the duplicate-ID cache for copies `sender`'s bridge sends here (a bridge
        learns it when it joins, and keeps at most half of it in flight)."""
        name = BRIDGE_CACHE_PREFIX + sender
        return self._dup_cache(name, self.settings_for(name)).size

    def receive_forwarded(self: PostOffice, message: Message, keys: list[str], dup_id: str | None,
                          tx_id: int = 0, delivery_count: int = 0, *, strict: bool = False) -> SendResult:
        """Route a bridged message to the bindings its sender named, at most once per `dup_id`
        (an anycast one, `message.routing_type`, whose queues are all gone: to the address's queue;
        `strict`, a migrated one: refused, so that its origin keeps it).

        A producer's duplicate ID it carries counts here as for a send: a second send of that ID
        arriving through another node (a client's resend after failover) is dropped, as is one
        sent to this node after it, unless it is the very message that was here before
        (`INSTANCE`: redistribution may bring a message back to a node it left).

        Its duplicate IDs and its records go in one store transaction: `tx_id` when given (the
        caller commits it, e.g. once for every message of one read), else one of its own."""
        remember: list[tuple[DuplicateIdCache, str]] = []
        if dup_id is not None:
            name = origin_cache(dup_id)
            cache = self._dup_cache(name, self.settings_for(name))
            if dup_id in cache:
                self.forwarded_duplicates += 1
                log.info("bridged message %s to %s already received: not routed again", dup_id, message.address)
                self.discard(message)
                return SendResult(SendOutcome.DUPLICATE)
            remember.append((cache, dup_id))
        return self._route_forwarded(message, keys, tx_id, delivery_count, strict, remember,
                                     bridge_dup_sender(dup_id) if strict and dup_id is not None else None)

    def receive_migrated(self: PostOffice, batch: list[tuple[Message, str, int]], keys: list[str],
                         tx_id: int, pending: dict[str, tuple[int, int]] | None = None) -> tuple[int, Exception | None]:
        """Route a migration's batch — (message, its origin's duplicate ID, delivery count), in
        order, all for the bindings `keys` — in store transaction `tx_id` (the caller commits it),
        each as `receive_forwarded(strict=True)` would, except that the origin IDs of the batch
        go in one journal record: one per ID, and one more for each ID it evicted, were two of
        every three records a migration wrote here.

        `pending`: (bytes, messages) per FAIL or BLOCK address routed in `tx_id` by earlier
        batches of the same read; kept up to date here. What `tx_id` holds is counted against the address's
        limits only once it commits, so without it a read of batches could take far more than
        a FAIL or BLOCK address's max_size_bytes (a 1,024-message batch went whole into an
        address full after 150).

        Returns how many were taken (routed, or dropped as already here) before the first
        refusal, and that refusal (None: all were taken)."""
        if not batch:
            return 0, None
        name = origin_cache(batch[0][1])
        cache = self._dup_cache(name, self.settings_for(name))
        paged_before = self.paged_routes
        taken, refusal, fresh = receive_batch(self, cache, batch, keys, tx_id, pending)
        if self.paged_routes == paged_before:
            self.remember_dups(cache, fresh, tx_id)
        else:  # some went to page files: each ID waits for its pages (see `remember_dup`)
            for dup_id in fresh:
                self.remember_dup(cache, dup_id, tx_id, after_pages=True)
        return taken, refusal

    def _route_forwarded(self: PostOffice, message: Message, keys: list[str], tx_id: int, delivery_count: int,
                         strict: bool, remember: list[tuple[DuplicateIdCache, str]],
                         origin: str | None = None) -> SendResult:
        """`receive_forwarded` past its bridge duplicate ID (in `remember`, with the IDs to keep);
        `origin`: the node a migrated message comes from."""
        settings = self.settings_for(message.address)
        user_dup = message.duplicate_id
        # A producer's ID on a migrated copy counts as on a bridged one: every copy of it from its
        # origin arrives (one per subscription; paged ones no longer share a message id there), but
        # another send of that ID that this node accepted first (the producer's resend after its
        # node died, before the drain moved the original here) makes it a duplicate.
        if user_dup is not None and self._dup_cache(message.address, settings).size > 0:
            if self._sent_elsewhere(message, user_dup, settings, remember,
                                    None if origin is None else MIGRATED_FROM + origin):
                self.forwarded_duplicates += 1
                self.duplicates += 1
                log.warning("duplicate message %r to %s arrived from another node: not routed", user_dup,
                            message.address)
                self.discard(message)
                return SendResult(SendOutcome.DUPLICATE)
        if self.limits.disk_full or self.limits.is_full(message.address, settings):
            policy = "BLOCK" if self.limits.disk_full else settings.address_full_policy
            if policy in ("FAIL", "BLOCK"):  # the bridge keeps it and tries again after retry_interval
                raise AddressFull(f"address {message.address!r} is full ({policy}): the forwarded message "
                                  "stays on the sending node for now")
            if policy == "DROP":
                return self.drop(message.address, message)
        local: list[Queue] = []
        far: list[RemoteBinding] = []
        for key in keys:
            queue = self.queues.get(key)
            if queue is not None:
                local.append(queue)
                continue
            binding = self.remote_bindings.get(key)
            if binding is not None:
                far.append(binding)
                continue
            log.warning("bridged message for %s names binding %r, which is gone: not routed there",
                        message.address, key)
        if strict and not local and not far:  # a migrated message is never dropped: refused, it is kept
            raise RoutingError(f"queue {', '.join(keys)} is gone here: create it again")
        if not local and not far and message.routing_type == RoutingType.ANYCAST:
            # its queue went away while it travelled (auto-deleted with its last consumer): an
            # anycast message is kept in the address's queue rather than lost
            log.info("forwarded message for %s is kept in the address's anycast queue", message.address)
            with self.names_from_elsewhere():  # the message was sent there
                address, _ = self.ensure_address_for(message.address, RoutingType.ANYCAST)
                local.append(self.ensure_anycast_queue(address))
        own = tx_id == 0
        if own:
            tx_id = self.store.begin()
        paged_before = self.paged_routes
        result = self._route(message, None, tx_id, local, remote=far, own_tx=True, track_dup=False,
                             delivery_count=delivery_count)
        after_pages = message.durable and self.paged_routes != paged_before  # see `remember_dup`
        for cache, key in remember:
            self.remember_dup(cache, key, tx_id, after_pages=after_pages)
        if own:
            self.commit_store(tx_id)
        return result

    def _sent_elsewhere(self: PostOffice, message: Message, user_dup: str, settings,
                        remember: list[tuple[DuplicateIdCache, str]], sender: str | None = None) -> bool:
        """Whether a forwarded message is another send of a producer's duplicate ID this node has
        seen (True: drop it); if not, adds the IDs to remember with it to `remember`. The copies
        of one send are known by their `INSTANCE`, or by `sender` when given (a migration's)."""
        cache = self._dup_cache(message.address, settings)
        own = str(message.properties.get(INSTANCE, ""))
        instance = sender or own
        key = f"{user_dup}{KEY_SEPARATOR}{instance}"
        instances = self._dup_cache(INSTANCES_CACHE_PREFIX + message.address, settings)
        if key in instances:
            return False  # this very message was here before (and left by redistribution)
        if user_dup in cache:
            # a send of it reached this node (sent here, or forwarded): only the one this node
            # accepted itself may come back, by redistribution (no instance entry for it here)
            return not (self.node_id and own.startswith(self.node_id + ":"))
        remember.append((cache, user_dup))
        if instance:
            remember.append((instances, key))
        return False


def _next_binding(
    address: Address, candidates: list, message: Message, balancing: Balancing
) -> Queue | RemoteBinding | None:
    """Round-robin over `candidates` from the address's position; see the module docstring."""
    n = len(candidates)
    fallback = None
    fallback_local = False
    for i in range(n):
        idx = (address._rr + i) % n
        c = candidates[idx]
        is_remote = isinstance(c, RemoteBinding)
        if is_remote:
            if not c.accepts(message):
                continue
        elif c.selector is not None and not c.selector.matches(message):
            continue
        if n == 1 or balancing == Balancing.STRICT or (
            c.has_demand(message) if is_remote else local_demand(c, message)
        ):
            address._rr = (idx + 1) % n
            return c
        if fallback is None or (not is_remote and not fallback_local):
            fallback, fallback_local = c, not is_remote
    if fallback is not None:
        address._rr = (address._rr + 1) % n
    return fallback

