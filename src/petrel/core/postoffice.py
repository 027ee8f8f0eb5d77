"""The post office: addresses, queues, routing, and what happens to a message at the end.

Pure and synchronous. It talks to a `Store` (appends only) and a `Scheduler` (timers), both
supplied by the server, so tests drive it without an event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from petrel.core.address import Address
from petrel.core.addressing import Addressing
from petrel.core.clustered import Clustering
from petrel.core.cursors import SeqCursors
from petrel.core.redistribution import Redistributing
from petrel.core.divert import Divert, Diverting
from petrel.core.endings import Endings
from petrel.core.flow import FlowControl
from petrel.core.errors import RoutingError
from petrel.core.large_bodies import LargeBodies
from petrel.core.paging import Paging
from petrel.core.prepared import PreparedTransactions
from petrel.core.recovery import SEQ_RESERVATION, Recovery
from petrel.core.duplicates import DuplicateDetection, DuplicateIdCache
from petrel.core.limits import AddressFull, MemoryLimits
from petrel.core.message import LargeBody, Message, RoutingType, now_ms
from petrel.core.quotas import AutoCreateQuota
from petrel.core.outcome import SendOutcome, SendResult
from petrel.core.queue import Consumer, MessageReference, Queue
from petrel.core.remote import RemoteBinding
from petrel.core.send_run import send_run
from petrel.core.settings import AddressSettings, AddressSettingsRepository
from petrel.core.transaction import Transaction, TransactionRolledBack
from petrel.core.wildcard_routing import WildcardRouting
from petrel.storage.store import Store

if TYPE_CHECKING:
    from petrel.storage.large import LargeFiles

log = logging.getLogger("petrel.core.postoffice")

__all__ = ["PostOffice", "RoutingError", "SendOutcome", "SendResult", "Scheduler"]


class Handle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_at_ms(self, when_ms: int, fn: Callable[[], None]) -> Handle: ...


def _records(stored: list[Queue], remote: list[RemoteBinding]) -> int:
    """Message records one routing writes: one for the local queues, one per next hop."""
    return (1 if stored else 0) + len({id(b.link) for b in remote})


class PostOffice(Addressing, Diverting, Paging, LargeBodies, Recovery, Clustering, Redistributing, Endings, FlowControl,
                 DuplicateDetection, SeqCursors, WildcardRouting, PreparedTransactions):
    def __init__(
        self,
        store: Store,
        settings: AddressSettingsRepository,
        scheduler: Scheduler,
        *,
        id_cache_size: int = 20000,
        persist_id_cache: bool = True,
        large: LargeFiles | None = None,
        clock: Callable[[], int] = now_ms,
        limits: MemoryLimits | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or MemoryLimits()
        self.settings = settings
        self.scheduler = scheduler
        self.id_cache_size = id_cache_size
        self.persist_id_cache = persist_id_cache
        self.now = clock
        self.addresses: dict[str, Address] = {}
        self.queues: dict[str, Queue] = {}
        self.queues_by_id: dict[int, Queue] = {}
        self.dup_caches: dict[str, DuplicateIdCache] = {}
        self.diverts: dict[str, Divert] = {}  # by name
        self.unrouted = 0
        self.duplicates = 0
        self.messages_routed = 0
        # store transaction -> references routed in it, admitted to their queues once it commits
        self._held: dict[int, list[MessageReference]] = {}
        self.paged_routes = 0  # routings that paged a reference (see `_remember_sent`)
        # Large-message files: how many references hold each (by name), and files let go
        # inside a store transaction, deleted once it commits (see `commit_store`).
        self.large = large
        self.large_holders: dict[str, int] = {}
        self._large_in_tx: dict[int, list[LargeBody]] = {}
        self.init_cluster()
        self.init_prepared()  # two-phase commit (prepared.py)
        self.init_wildcards()  # addresses named by a pattern (wildcard_routing.py)
        self.quota = AutoCreateQuota()  # max_auto_created_queues/addresses (set by the broker)
        self._names_from_elsewhere = 0  # inside `names_from_elsewhere`: names are not checked
        #: the user whose connection's frames are being handled (the adapters set it): the queues
        #: created meanwhile are theirs (`Queue.created_by`, max_queues_per_user)
        self.creator: str | None = None
        #: called with each queue made (an OpenWire wildcard queue consumer follows new queues)
        self.queue_listeners: list[Callable[[Queue], None]] = []

    def settings_for(self, address: str) -> AddressSettings:
        return self.settings.match(address)

    @contextmanager
    def names_from_elsewhere(self) -> Iterator[None]:
        """Queues and addresses created inside are not checked against `petrel.core.names`: they
        exist on another node already (a migration's queue, a forwarded message's address), maybe
        from before those rules, and what they hold must still move."""
        self._names_from_elsewhere += 1
        try:
            yield
        finally:
            self._names_from_elsewhere -= 1

    # -- sending ----------------------------------------------------------------------------

    def send(self, message: Message, routing_type: RoutingType | None, tx: Transaction | None = None) -> SendResult:
        address, routing_type = self.ensure_address_for(message.address, routing_type)
        if routing_type == RoutingType.ANYCAST:
            self.ensure_anycast_queue(address)
        settings = self.settings_for(address.name)
        blocked = False
        if self.limits.disk_full:
            blocked = True
        elif self.limits.is_full(address.name, settings):
            policy = settings.address_full_policy
            if policy == "FAIL":
                raise AddressFull(
                    f"address {address.name!r} is full (max_size_bytes {settings.max_size_bytes}); "
                    "the message was not stored"
                )
            if policy == "DROP":
                return self.drop(address.name, message)
            if policy == "BLOCK" or (policy == "PAGE" and not self.store.supports_paging):
                blocked = policy == "BLOCK"
        if message.expiration == 0 and settings.expiry_delay >= 0:
            message.expiration = (message.timestamp or self.now()) + settings.expiry_delay
        dup_id = message.duplicate_id
        if dup_id is not None:
            cache = self._dup_cache(address.name, settings)
            if dup_id in cache or (tx is not None and (address.name, dup_id) in tx.dup_ids):
                self.duplicates += 1
                log.warning("duplicate message %r to %s not routed", dup_id, address.name)
                if tx is not None:
                    tx.rollback_only = f"duplicate message {dup_id!r} in the transaction"
                self.discard(message)
                return SendResult(SendOutcome.DUPLICATE)
        if tx is not None:
            tx.sends.append((message, routing_type))
            if dup_id is not None:
                tx.dup_ids.add((address.name, dup_id))
            return SendResult(SendOutcome.QUEUED_IN_TX)
        result = self._route(message, routing_type, 0)
        result.blocked = blocked
        if not blocked and self.limits.flow_control_bytes >= 0 and self.throttles(address):
            result.throttled = True
        return result

    def send_run(self, messages: list[Message], routing_type: RoutingType | None) -> SendResult | None:
        """`send` of each of `messages` (one address, no transaction) in one pass: the result that
        stands for each, or None when they must be sent one by one (see `petrel.core.send_run`)."""
        return send_run(self, messages, routing_type)

    def drop(self, address: str, message: Message) -> SendResult:
        """DROP policy: the message is counted and let go."""
        self.limits.dropped[address] = self.limits.dropped.get(address, 0) + 1
        self.discard(message)
        return SendResult(SendOutcome.DROPPED)

    def route_to(self, message: Message, queues: list[Queue] | None, tx_id: int, *,
                 delivery_count: int = 0) -> SendResult:
        """Route to the given queues (or by the address's bindings when None), in a store transaction."""
        return self._route(message, None, tx_id, queues, delivery_count=delivery_count)

    def _route(
        self,
        message: Message,
        routing_type: RoutingType | None,
        tx_id: int,
        only: list[Queue] | None = None,
        depth: int = 0,
        *,
        remote: list[RemoteBinding] | None = None,
        own_tx: bool = False,
        track_dup: bool = True,
        delivery_count: int = 0,
    ) -> SendResult:
        """`only`: these queues instead of the address's bindings (and `remote` bindings with
        them); `own_tx`: `tx_id` is a transaction the office commits itself (not a client's),
        so paging is allowed; `track_dup`: remember the message's duplicate ID; `delivery_count`:
        the references start with it (a migrated message keeps its count)."""
        address = self.addresses.get(message.address)
        diverted = False
        if only is not None:
            targets = only
        elif self.diverts and self._apply_diverts(message, routing_type, tx_id, depth):
            targets = []
            diverted = True
        elif address is None:
            targets = []
        elif self.remote_by_address and message.address in self.remote_by_address:
            targets, remote = self.cluster_targets(
                address, message, routing_type, self.remote_by_address[message.address])
        else:
            targets = address.targets(message, routing_type)
        if self.wildcard_addresses and only is None and not diverted:
            targets = self.wildcard_targets(message, routing_type, targets)
        if self.remote_wildcards and only is None and not diverted:  # other nodes' pattern addresses
            remote = self.wildcard_remote(message, routing_type, remote)
        dup_id = message.duplicate_id if track_dup and address is not None else None
        persist_dup = dup_id is not None and self.persist_id_cache
        stored = [q for q in targets if q.durable] if message.durable else []
        may_page = tx_id == 0 or own_tx
        commit_here = 0  # a transaction begun here, committed at the end
        if tx_id == 0 and (
            (persist_dup and (stored or (remote and message.durable)))
            or (remote and message.durable and _records(stored, remote) > 1)
        ):
            # The duplicate ID and every journal record holding the message (local references,
            # store-and-forward copies) commit together: a crash keeps both or neither.
            tx_id = commit_here = self.store.begin()
        paged_before = self.paged_routes
        if remote:
            self.forward(message, remote, tx_id)
        if not targets:
            if dup_id is not None:
                self._remember_sent(address.name, dup_id, tx_id, message, paged_before)
            self.discard(message)
            if commit_here:
                self.store.commit(commit_here)
                self.admit_held(commit_here)  # its store-and-forward copies
            if diverted or remote:
                self.messages_routed += 1
                return SendResult(SendOutcome.ROUTED, len(remote or ()))
            self.unrouted += 1
            return SendResult(SendOutcome.UNROUTED)
        if message.large is not None:  # every target's reference holds the file
            self.hold_large(message.large, len(targets))
        refs = []
        # A large message is never paged: in memory it is only its headers, and its file
        # must stay named by a journal record so a restart keeps it.
        can_page = may_page and self.store.supports_paging and message.large is None
        to_page: list[tuple[Queue, int]] = []
        for queue in targets:
            seq = self._take_seq(queue)
            if can_page and self._pages(queue, address if queue.address == message.address
                                        else self.addresses.get(queue.address)):
                to_page.append((queue, seq))
                continue
            refs.append(MessageReference(message, queue, seq, delivery_count))
        paged = len(to_page)
        if paged:
            # One page record that holds the whole send (no journal record, no forwarded copy, no
            # other page) carries its duplicate ID too: recovery takes the ID from it if the
            # crash came before the ID's own record (see `remember_dup`), so the resend is dropped.
            home = (persist_dup and message.durable and paged == 1 and to_page[0][0].durable and not remote
                    and self.paged_routes == paged_before and not any(r.queue.durable for r in refs))
            for queue, seq in to_page:
                self._page(queue, seq, message, home=home)
            self.paged_routes += 1
            stored = [r.queue for r in refs if r.queue.durable] if message.durable else []
        if dup_id is not None:
            self._remember_sent(address.name, dup_id, tx_id, message, paged_before)
        if stored:
            message.ref_count = len(stored)
            self.store.add_message(tx_id, message, [(r.queue.id, r.seq) for r in refs if r.queue.durable])
            if delivery_count:
                for r in refs:
                    if r.queue.durable:
                        self.store.update_delivery_count(message.id, r.queue.id, delivery_count, tx_id)
        if commit_here:
            self.store.commit(commit_here)
            self.admit_held(commit_here)  # its store-and-forward copies
        if tx_id and not commit_here:
            # `tx_id` commits later (`commit_store`): no consumer may take (and acknowledge,
            # deleting it) a message before its add is committed in the journal
            self._held.setdefault(tx_id, []).extend(refs)
        else:
            self._admit(refs)
        self.messages_routed += 1
        return SendResult(SendOutcome.ROUTED, len(refs))

    def _admit(self, refs: list[MessageReference]) -> None:
        now = self.now()
        start, n = 0, len(refs)
        while start < n:  # a run of references for one queue joins it at once (`Queue.add_all`)
            queue = refs[start].queue
            end = start + 1
            while end < n and refs[end].queue is queue:
                end += 1
            queue.messages_added += end - start
            if end - start == 1:
                queue.add(refs[start], now=now)
            else:
                queue.add_all(refs[start:end], now)
            if queue.deleted:  # deleted before the transaction that routed it committed
                queue.purge()
            start = end

    def admit_held(self, tx_id: int) -> None:
        """Store transaction `tx_id` is committed: the references routed in it join their queues."""
        refs = self._held.pop(tx_id, None)
        if refs:
            self._admit(refs)

    def _take_seq(self, queue: Queue) -> int:
        seq = queue.take_seq()
        if queue.durable and seq > queue.seq_reserved:
            queue.seq_reserved = seq + SEQ_RESERVATION
            self.store.reserve_queue_seq(queue.id, queue.seq_reserved)
        return seq

    # -- the end of a reference -------------------------------------------------------------

    def reference_done(self, ref: MessageReference, tx_id: int, consumed: bool = False) -> None:
        """`ref` has ended: acknowledged (``consumed``: by a consumer, explicitly), expired, moved,
        dead-lettered, purged... outside or (``tx_id``) inside a store transaction."""
        message = ref.message
        queue = ref.queue
        size = message.size
        queue.memory_bytes -= size
        self.limits.removed(queue.address, size)
        if self.limits._waiters:
            self.limits.wake(lambda a: not self.space_for(a))
        if queue.paging:
            self.depage(queue)
        if message.durable and ref.queue.durable and message.ref_count > 0:
            message.ref_count -= 1
            if message.ref_count == 0:
                self.store.delete_message(tx_id, message.id)
            elif not (self.acked_when_prepared and ref in self.acked_when_prepared):  # (its ACK: prepared.py)
                self.store.ack(tx_id, message.id, ref.queue.id)
        if message.large is not None:
            self.release_large(message.large, tx_id)
        hook = message.confirm_hook
        if hook is not None:
            if consumed and not tx_id:
                if message.ref_count == 0:  # every durable queue's copy is consumed
                    message.confirm_hook = None
                    hook(message)
            else:  # another ending (a move may not be durable yet): only the sync confirms it
                message.confirm_hook = None

    def delivery_count_changed(self, ref: MessageReference) -> None:
        if ref.message.durable and ref.queue.durable and ref.message.ref_count > 0:
            self.store.update_delivery_count(ref.message.id, ref.queue.id, ref.delivery_count)

    # -- transactions -------------------------------------------------------------------

    def commit(self, tx: Transaction) -> None:
        """Route the transaction's sends and settle its acks, atomically in the store."""
        self.refuse_rollback_only(tx)
        tx_id = self.store.begin()
        for message, routing_type in tx.sends:
            self._route(message, routing_type, tx_id)
        for ref in tx.acks:
            ref.queue.acknowledge(ref, tx_id)
        self.commit_store(tx_id)
        tx.close()

    def refuse_rollback_only(self, tx: Transaction) -> None:
        """Roll `tx` back and raise TransactionRolledBack when it may not commit (a duplicate)."""
        if tx.rollback_only is None:
            tx.rollback_only = self._seen_since_sent(tx)
        if tx.rollback_only:
            reason = tx.rollback_only
            self.rollback(tx)
            raise TransactionRolledBack(reason)

    def _seen_since_sent(self, tx: Transaction) -> str | None:
        """Why the transaction must roll back: a duplicate ID it holds was checked when its
        message was sent into it, but another transaction (or send) with the same ID may have
        taken it since; the ID counts at commit, so two open transactions carrying it never
        both commit."""
        for address, dup_id in tx.dup_ids:
            cache = self.dup_caches.get(address)
            if cache is not None and dup_id in cache:
                self.duplicates += 1
                log.warning("duplicate message %r to %s committed by another since it was sent: the "
                            "transaction rolls back", dup_id, address)
                return f"duplicate message {dup_id!r} in the transaction"
        return None

    def rollback(self, tx: Transaction) -> None:
        for message, _ in tx.sends:
            self.discard(message)
        for ref in reversed(tx.acks):
            if not ref.queue.deleted:
                ref.queue.cancel(ref, redelivered=True)
        tx.close()

    # -- consumers ----------------------------------------------------------------------

    def add_consumer(self, queue: Queue, consumer: Consumer) -> None:
        queue.add_consumer(consumer)

    def ensure_defaults(self) -> None:
        """The dead-letter and expiry queues of the `#` settings, as Artemis's default config has."""
        defaults = self.settings_for("#")
        for name in (defaults.dead_letter_address, defaults.expiry_address):
            if name and name not in self.queues:
                self.create_queue(name, name, RoutingType.ANYCAST)
