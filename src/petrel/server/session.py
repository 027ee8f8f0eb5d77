"""The protocol-neutral server session: what every protocol adapter does with the post office.

One `ServerSession` belongs to one connection's adapter (STOMP, CORE, MQTT, AMQP...). The
adapter is a translator: it decodes its frames, builds a `petrel.core.message.Message` and
calls the session; it renders the session's outcomes (confirmations, deliveries, refusals)
in its own protocol. The session builds nothing protocol-specific.

Contract (what an adapter can rely on, and must do):

- **Reads.** The adapter handles one read's frames in order, then calls `flush()` (also after
  any handling outside a read: a timer, a resumed hold). Confirmations the read appended with
  `confirm(item, durable=...)` go out after ONE store sync for the read when any of them is
  durable, and every read's confirmations go out in read order: a later one never overtakes
  an earlier one still waiting for its sync. An item is the bytes to write or a callable
  (``conn.close`` after a DISCONNECT's reply). When a sync fails, no confirmation of that read
  nor any later one goes out; the session calls ``on_sync_failed(NotDurable)`` once, and the
  adapter says so in its protocol and closes. `need_sync()` makes the read's confirmations
  wait for the disk without adding one (a durable send nobody asked a receipt for);
  ``confirmations.after_pending(items)`` pushes frames of the broker's own (a topology, a
  DISCONNECT) right after what earlier reads still wait for.
  A confirmation of durable sends only, made with ``sent=<the messages>``, may go out before
  the sync: once every durable queue's copy of each of them is acknowledged by a consumer
  (`acknowledge`, outside a transaction). A consumed message cannot be lost any more; a read
  with anything else durable (a commit, a subscription...) always waits for its sync.
- **Sends.** `send(message, routing_type, tx, then=...)` checks the user may send to the
  address, refuses the cluster's internal names, drops the cluster's reserved properties,
  waits for a clustered grouping decision (holding the connection), routes through
  `office.send` and calls ``then(result)`` once the message is routed (later, from `run`,
  when it waited). A full address under BLOCK, a full disk or consumers far behind
  (throttle) pause the connection's reads until there is room (`block`), unless the adapter
  passes ``block_reads=False`` and reads ``result.blocked``/``result.throttled`` itself (CORE
  holds the producer's confirmations instead). Refusals raise a
  `petrel.server.refusals.Refused` (map ``exc.kind`` to the protocol's code). The session
  owns the message from the call: a refused message is discarded, its large body's file
  with it. When ``office.grouping`` is None a send never waits: ``then`` may be left out
  and the returned result used.
- **Acknowledgements.** `acknowledge(consumer, refs, tx)` and `cancel(consumer, refs)`
  settle `MessageReference`s a consumer holds; `refs_through(consumer, seq)` gives the
  cumulative range.
- **Transactions.** `begin(name)`, `commit(name)`, `rollback(name)`; `transaction(name)`
  looks one up for a send or an ack. Unknown names raise `TransactionUnknown`; a refused
  commit `TransactionRolledBack`. A commit's reply is `confirm(..., durable=True,
  transactional=True)`.
- **Consumers.** `open_queue(name, routing_type, ...)` resolves (creating as needed) the
  anycast queue, multicast subscription or durable subscription ``<client id>.<name>`` a
  subscriber consumes from, with access and internal-name checks; the adapter makes its
  `Consumer` (its sink renders deliveries), registers it with `add_consumer` and, once its
  own reply is queued, calls ``queue.add_consumer``. `pause()`/`resume()` stop and restart
  deliveries to all of them (the connection's write flow control).
- **Holds.** `hold()` stops handling and reading (a large body being made durable, a
  grouping decision); `resume_held(fn)` runs ``fn`` first, then the frames that waited, by
  calling the adapter's ``run(fn)``; `release_hold()` lifts it without running anything (a
  refused login). The adapter's read loop stops while `held`.
- **Large bodies.** `track_large(writer)` while a body arrives, `untrack_large(writer)`
  once it is finished or dropped; `release` aborts what is still arriving.
- **End.** `release()` on connection loss: open transactions roll back, consumers close
  (their messages go back), large bodies arriving are dropped, later callbacks do nothing.

Reading is paused and resumed only through the connection's `ReadFlow` (``conn.reads``),
which counts reasons, so a producer unblocked while a hold is on keeps the reads paused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from petrel.cluster.internal_names import (
    INTERNAL_PREFIX,
    RESERVED_PROPERTY_PREFIX,
    drop_reserved,
    internal_name_problem,
    internal_write_problem,
)
from petrel.core.errors import RoutingError
from petrel.core.limits import AddressFull as _CoreAddressFull
from petrel.core.message import Message, RoutingType
from petrel.core.selector import SelectorError, compile_selector
from petrel.core.transaction import Transaction
from petrel.core.transaction import TransactionRolledBack as _CoreRolledBack
from petrel.security.errors import NotAuthorized as _SecurityNotAuthorized
from petrel.server.adapters.group_wait import wait_for_group
from petrel.server.confirmations import Confirmations
from petrel.server.flow import ReadFlow
from petrel.server.refusals import (
    AddressFull,
    NotAuthorized,
    NotDurable,
    Refused,
    RoutingRefused,
    SelectorRefused,
    TransactionRolledBack,
    TransactionUnknown,
    refusal_of,
)

if TYPE_CHECKING:
    from petrel.core.postoffice import SendResult
    from petrel.core.queue import Consumer, MessageReference, Queue
    from petrel.server.access import Access
    from petrel.server.broker import Broker
    from petrel.storage.large import LargeWriter

__all__ = ["Confirmations", "ServerSession"]  # (Confirmations: petrel.server.confirmations)

log = logging.getLogger("petrel.server.session")


class ServerSession:
    """Sends, acknowledgements, transactions, consumers, holds and flow control of one
    connection, for any protocol (see the module's contract)."""

    def __init__(self, broker: Broker, conn: Any, access: Access, *, run: Callable[[Callable[[], None]], None],
                 on_sync_failed: Callable[[NotDurable], None]) -> None:
        self.broker = broker
        self.office = broker.office
        self.conn = conn
        self.access = access
        self.next_id = broker.store.next_id
        self._run = run
        self._on_sync_failed = on_sync_failed
        reads = getattr(conn, "reads", None)
        self.reads: ReadFlow = reads if reads is not None else ReadFlow(conn)
        self.confirmations = Confirmations(conn, broker.store, self._sync_failed)
        self.held = False  # handle nothing until resume_held
        self.blocked = False  # reads paused until the address has room
        self.released = False
        self.transactions: dict[str, Transaction] = {}
        self.consumers: dict[int, Consumer] = {}  # Consumer.id -> consumer
        self._large: list[LargeWriter] = []

    @property
    def subject(self):
        return self.access.subject

    # -- confirmations ------------------------------------------------------------------------

    def confirm(self, item: bytes | Callable[[], None], *, durable: bool = False,
                transactional: bool = False, sent: Message | list[Message] | None = None) -> None:
        """Write `item` (or call it) once this read is handled, after its sync if `durable`;
        ``sent``: `item` confirms the durable sends of these messages (nothing else), which lets
        their consumption release it before the sync (`Confirmations`)."""
        self.confirmations.add(item, durable, transactional, sent)

    def need_sync(self, transactional: bool = False, sent: Message | list[Message] | None = None) -> None:
        self.confirmations.need_sync(transactional, sent)

    def flush(self) -> None:
        """The read is handled: one sync for what it appended, then its confirmations in order."""
        self.confirmations.flush()

    @property
    def not_durable(self) -> bool:
        """A sync failed: nothing is confirmed any more."""
        return self.confirmations.failed

    def _sync_failed(self, error: BaseException) -> None:
        if self.conn.closed or self.released:
            return
        self._on_sync_failed(NotDurable(f"not persisted: {error}"))

    # -- sends ----------------------------------------------------------------------------------

    def send(self, message: Message, routing_type: RoutingType | None, tx: str | Transaction | None = None,
             then: Callable[[SendResult], None] | None = None, *,
             block_reads: bool = True) -> SendResult | None:
        """Route `message` (see the contract). None when it waits for a grouping decision."""
        office = self.office
        name = message.address
        access = self.access
        # the common case (security off, no transaction named, no internal name) checks nothing
        if access.enabled or (tx is not None and tx.__class__ is str) or name.startswith(INTERNAL_PREFIX):
            try:
                if tx is not None and tx.__class__ is str:
                    tx = self.transaction(tx)
                if access.enabled:
                    try:
                        access.send(office, name, routing_type)
                    except _SecurityNotAuthorized as exc:
                        raise NotAuthorized(str(exc)) from None
                if name.startswith(INTERNAL_PREFIX) and (refused := internal_write_problem(self, name)) is not None:
                    raise NotAuthorized(refused)  # $.petrel.*
            except BaseException:
                office.discard(message)  # a large body's file goes with it
                raise
        props = message.properties
        if props:
            for key in props:  # (no generator per message: most sends carry no _PETREL_* key)
                if key.startswith(RESERVED_PROPERTY_PREFIX):
                    drop_reserved(self, props)  # _PETREL_*
                    break
        if office.grouping is not None and wait_for_group(
                self, name, message.properties, routing_type,
                lambda: self._route(message, routing_type, tx, then, block_reads),
                lambda reason: self._group_refused(message, reason)):
            return None
        # (as _route, inlined: the hot path)
        try:
            result = office.send(message, routing_type, tx)
        except (_CoreAddressFull, RoutingError, ValueError) as exc:
            raise self._refused(message, exc) from None
        if then is not None:
            then(result)
        if block_reads and (result.blocked or result.throttled):
            self.block(name, quiet=not result.blocked)
        return result

    def send_run(self, messages: list[Message], routing_type: RoutingType | None) -> SendResult | None:
        """`send` of each of `messages` (one address, in order, no transaction) in one pass
        through the office (`PostOffice.send_run`): the result that stands for each of them, or
        None when nothing was sent and the caller sends them one by one with `send` (anything
        that could refuse, wait for or route one message differently from the others)."""
        office = self.office
        name = messages[0].address
        if office.grouping is not None or name.startswith(INTERNAL_PREFIX):
            return None
        access = self.access
        if access.enabled:
            try:
                access.send(office, name, routing_type)
            except _SecurityNotAuthorized:
                return None  # (refused one by one)
        reserved = RESERVED_PROPERTY_PREFIX
        for message in messages:
            props = message.properties
            for key in props:
                if key.startswith(reserved):
                    drop_reserved(self, props)  # _PETREL_*
                    break
        try:
            result = office.send_run(messages, routing_type)
        except (RoutingError, ValueError):
            return None  # nothing was sent (the address could not be made): refused one by one
        if result is not None and result.throttled:
            self.block(name, quiet=True)
        return result

    def _route(self, message: Message, routing_type: RoutingType | None, tx: Transaction | None,
               then: Callable[[SendResult], None] | None, block_reads: bool) -> SendResult:
        """The send after a grouping decision."""
        try:
            result = self.office.send(message, routing_type, tx)
        except (_CoreAddressFull, RoutingError, ValueError) as exc:
            raise self._refused(message, exc) from None
        if then is not None:
            then(result)
        if block_reads and (result.blocked or result.throttled):
            self.block(message.address, quiet=not result.blocked)
        return result

    def _refused(self, message: Message, exc: Exception) -> Refused:
        """The office refused `message`: it goes (its large body's file too), and why."""
        self.office.discard(message)
        if isinstance(exc, _CoreAddressFull):
            return AddressFull(str(exc))
        if isinstance(exc, SelectorError):
            return SelectorRefused(str(exc))
        return RoutingRefused(str(exc))

    def _group_refused(self, message: Message, reason: str) -> None:
        self.office.discard(message)
        raise RoutingRefused(reason)

    def block(self, address: str, *, quiet: bool = False) -> None:
        """BLOCK policy, a full disk, or consumers far behind (`quiet`): read nothing more from
        this connection until `address` has room."""
        if self.blocked or self.released:
            return
        self.blocked = True
        self.reads.pause("block")
        if not quiet:
            log.info("producer %s blocked: address %s is full", self.conn.peer, address,
                     extra={"event": "address.blocked"})

        def unblock() -> None:
            if not self.blocked:
                return
            self.blocked = False
            self.reads.resume("block")

        self.office.limits.wait_for_space(address, unblock)

    # -- acknowledgements -------------------------------------------------------------------------

    @staticmethod
    def refs_through(consumer: Consumer, seq: int) -> list[MessageReference]:
        """The references `consumer` holds up to and including `seq` (cumulative acks);
        empty when it does not hold `seq`."""
        delivering = consumer.delivering
        if seq not in delivering:
            return []
        refs = []
        for s, ref in delivering.items():
            refs.append(ref)
            if s == seq:
                break
        return refs

    def acknowledge(self, consumer: Consumer, refs: Iterable[MessageReference],
                    tx: str | Transaction | None = None) -> None:
        """The consumer is done with `refs` (at the commit of `tx`, when given)."""
        queue = consumer.queue
        if tx is None:  # the common case: settled now, one by one (positional: ref, tx_id, consumer)
            acknowledge = queue.acknowledge
            for ref in refs:
                acknowledge(ref, 0, consumer, consumed=True)
            return
        if tx.__class__ is str:
            tx = self.transaction(tx)
        if not queue.non_destructive:
            for ref in refs:
                tx.hold_ack(ref)
            return
        acknowledge = queue.acknowledge
        for ref in refs:
            acknowledge(ref, consumer=consumer)

    def cancel(self, consumer: Consumer, refs: Iterable[MessageReference], *, redelivered: bool = True,
               dead_letter: bool = False) -> None:
        """`refs` go back to their queue (or to the dead letter address: at once when
        `dead_letter`); all of them go back before any is delivered again."""
        queue = consumer.queue
        paused, consumer.paused = consumer.paused, True
        try:
            for ref in refs:
                queue.cancel(ref, redelivered=redelivered, consumer=consumer, dead_letter=dead_letter)
        finally:
            consumer.paused = paused
        queue.deliver()

    # -- transactions ---------------------------------------------------------------------------

    def begin(self, name: str) -> Transaction:
        if name in self.transactions:
            raise TransactionUnknown(f"transaction {name!r} is already open")
        tx = self.transactions[name] = Transaction(name)
        return tx

    def transaction(self, name: str) -> Transaction:
        tx = self.transactions.get(name)
        if tx is None:
            raise TransactionUnknown(f"transaction {name!r} is not open (begin it first)")
        return tx

    def commit(self, name: str, *, reopen: bool = False) -> None:
        """Commit `name` (then a new empty one by that name when `reopen`); its reply should be
        confirmed ``durable=True, transactional=True``."""
        tx = self.transaction(name)
        if reopen:
            self.transactions[name] = Transaction(name)
        else:
            del self.transactions[name]
        try:
            self.office.commit(tx)
        except _CoreRolledBack as exc:
            refused = TransactionRolledBack(f"transaction {name!r} rolled back: {exc}")
            refused.reason = str(exc)  # the cause alone
            raise refused from None

    def rollback(self, name: str, *, reopen: bool = False) -> None:
        tx = self.transaction(name)
        if reopen:
            self.transactions[name] = Transaction(name)
        else:
            del self.transactions[name]
        self.office.rollback(tx)

    # -- consumers ------------------------------------------------------------------------------

    def open_queue(self, name: str, routing_type: RoutingType | None, *, selector: str | None = None,
                   client_id: str | None = None, durable_name: str | None = None) -> tuple[Queue, Any]:
        """The queue a subscriber of `name` consumes from, and the compiled selector its consumer
        applies (None when the queue filters at routing, as a multicast subscription does).

        An existing queue called `name` (anycast or no routing type); else the address's anycast
        queue; else a multicast subscription, durable as ``<client_id>.<durable_name>`` when
        both are given."""
        office = self.office
        try:
            compiled = compile_selector(selector) if selector else None
        except SelectorError as exc:
            raise SelectorRefused(str(exc)) from None
        if (refused := internal_name_problem(self, name)) is not None:  # the cluster's $.petrel.* queues
            raise NotAuthorized(refused)
        durable_queue = f"{client_id}.{durable_name}" if durable_name and client_id else None
        try:
            self.access.subscribe(office, name, routing_type, filter=selector, durable_queue=durable_queue)
        except _SecurityNotAuthorized as exc:
            raise NotAuthorized(str(exc)) from None
        try:
            existing = office.queues.get(name)
            if routing_type == RoutingType.ANYCAST and existing is not None:
                address = office.addresses[existing.address]
            else:
                address, routing_type = office.ensure_address_for(name, routing_type)
            existing = office.queues.get(name) if routing_type == RoutingType.ANYCAST else None
            if existing is not None:  # a queue by that name, whatever its address (virtual topics)
                return existing, compiled
            if routing_type == RoutingType.ANYCAST:
                return office.ensure_anycast_queue(address), compiled
            queue = office.subscribe_multicast(address, filter=selector, client_id=client_id,
                                               subscription=durable_name)
            return queue, None  # the subscription queue filters at routing
        except (RoutingError, SelectorError) as exc:
            raise refusal_of(exc) from None

    def add_consumer(self, consumer: Consumer) -> None:
        """Track `consumer` (paused while the connection's writes are); the adapter then calls
        ``consumer.queue.add_consumer(consumer)`` once its reply is queued."""
        consumer.paused = bool(getattr(self.conn, "writing_paused", False))
        self.consumers[consumer.id] = consumer

    def remove_consumer(self, consumer: Consumer) -> None:
        """Close `consumer`: what it held unacknowledged goes back to its queue."""
        self.consumers.pop(consumer.id, None)
        queue = consumer.queue
        if not queue.deleted:
            queue.remove_consumer(consumer)

    def delete_durable(self, client_id: str | None, name: str) -> bool:
        """Delete the durable subscription ``<client_id>.<name>``; False when there is none."""
        qname = f"{client_id}.{name}"
        queue = self.office.queues.get(qname)
        if queue is None:
            return False
        try:
            self.access.delete_queue(queue)
        except _SecurityNotAuthorized as exc:
            raise NotAuthorized(str(exc)) from None
        try:
            self.office.delete_queue(qname)
        except RoutingError as exc:
            raise RoutingRefused(str(exc)) from None
        return True

    def pause(self) -> None:
        """The connection's writes are backed up: no more deliveries."""
        for consumer in self.consumers.values():
            consumer.paused = True

    def resume(self) -> None:
        for consumer in list(self.consumers.values()):
            consumer.resume()

    # -- holds ----------------------------------------------------------------------------------

    def hold(self) -> None:
        """Handle nothing more (and read nothing) until `resume_held`."""
        if not self.held:
            self.held = True
            self.reads.pause("hold")

    def release_hold(self) -> None:
        """Lift the hold without handling anything (the connection is being refused)."""
        if self.held:
            self.held = False
            self.reads.resume("hold")

    def resume_held(self, fn: Callable[[], None]) -> None:
        """Run `fn` first, then the frames that waited behind it (the adapter's ``run``)."""
        self.release_hold()
        if self.conn.closed or self.released:
            return
        self._run(fn)

    # -- large bodies ---------------------------------------------------------------------------

    def track_large(self, writer: LargeWriter) -> None:
        """A body arriving into `writer`'s file: dropped if the connection goes first."""
        self._large.append(writer)

    def untrack_large(self, writer: LargeWriter) -> None:
        try:
            self._large.remove(writer)
        except ValueError:
            pass

    # -- end ------------------------------------------------------------------------------------

    def release(self) -> None:
        """The connection is gone (or leaving): roll back, close consumers, drop bodies arriving."""
        self.released = True
        self.rollback_all()
        self.close_consumers()
        large, self._large = self._large, []
        for writer in large:
            writer.abort()
        if self.conn.closed:
            self.reads.clear()

    def rollback_all(self) -> None:
        """Roll back every open transaction."""
        transactions = list(self.transactions.values())
        self.transactions.clear()
        for tx in transactions:
            self.office.rollback(tx)

    def close_consumers(self) -> None:
        """Close every consumer (their messages go back); transactions stay open."""
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            queue = consumer.queue
            if not queue.deleted:
                queue.remove_consumer(consumer)
