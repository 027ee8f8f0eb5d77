"""Prepared transactions (two-phase commit, XA): a transaction's work made durable, to be
committed or rolled back later, by any connection, after a restart too.

`prepare(tx, xid)` routes the transaction's sends in a store transaction whose references stay
held (invisible, like any store transaction's until it commits: `PostOffice._held`), writes its
acknowledgements there as ACK updates (never the delete of a message: that follows the commit,
outside the transaction, so a message acknowledged in two prepared transactions is never
deleted by the one that commits first), and marks it prepared in the store under `xid` (the
protocol's transaction id as bytes: opaque here). The acknowledged references stay with the
queue as being delivered, to nobody: no consumer gets them meanwhile. `commit_prepared(xid)`
commits the store transaction, admits the sends and settles the acknowledgements;
`rollback_prepared(xid)` rolls it back, drops the sends and gives the acknowledged messages back
to their queues, redelivered.

A restart finds them in the store (`Recovered.prepared`): `recover_prepared` rebuilds each
one, its sends held again and its acknowledged references taken out of their queues' available
messages, and `prepared` lists them by xid for a transaction manager's recovery.

Not covered: duplicate IDs of a prepared send stay remembered if it rolls back (a resend with
the same ID is dropped); a drainer's deferred recovery does not hold what a prepared
transaction acknowledged, and prepared transactions do not move in a scale-down: the
migration refuses to start while one is here (`petrel.ha.scale_down.refuse_prepared`).
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from petrel.core.consumer import DELIVERING, MessageReference
from petrel.core.transaction import Transaction, TransactionRolledBack

if TYPE_CHECKING:
    from petrel.core.postoffice import PostOffice
    from petrel.core.queue import Queue
    from petrel.storage.store import PreparedRecord

log = logging.getLogger("petrel.core.prepared")

__all__ = ["PreparedTransaction", "PreparedTransactions", "UnknownXid", "describe_xid", "xid_bytes", "xid_parts"]

_XID_HEAD = struct.Struct(">iI")


def xid_bytes(format_id: int, global_id: bytes, branch: bytes) -> bytes:
    """An XA xid (format id, global transaction id, branch qualifier) as the one key every
    protocol prepares it under: format id, the global id's length, the global id, the branch."""
    return _XID_HEAD.pack(format_id, len(global_id)) + global_id + branch


def xid_parts(key: bytes) -> tuple[int, bytes, bytes] | None:
    """`xid_bytes` undone; None for a key that is not one (another encoding)."""
    if len(key) < _XID_HEAD.size:
        return None
    format_id, n = _XID_HEAD.unpack_from(key)
    if _XID_HEAD.size + n > len(key):
        return None
    return format_id, key[_XID_HEAD.size:_XID_HEAD.size + n], key[_XID_HEAD.size + n:]


def describe_xid(key: bytes) -> str:
    """An xid for operators: format id, global transaction id and branch qualifier (text where
    they are printable, else hex), or the key in hex when it is no `xid_bytes`."""
    parts = xid_parts(key)
    if parts is None:
        return key.hex()

    def text(b: bytes) -> str:
        try:
            t = b.decode("ascii")
        except UnicodeDecodeError:
            return "0x" + b.hex()
        return repr(t) if t.isprintable() else "0x" + b.hex()

    format_id, gtrid, bqual = parts
    return f"(format {format_id}, gtrid {text(gtrid)}, bqual {text(bqual)})"


class UnknownXid(KeyError):
    """No transaction is prepared under that xid (XAER_NOTA)."""


class PreparedTransaction:
    __slots__ = ("xid", "tx_id", "acks", "sends")

    def __init__(self, xid: bytes, tx_id: int, acks: list[MessageReference], sends: int) -> None:
        self.xid = xid
        self.tx_id = tx_id  # the store transaction holding its work
        self.acks = acks  # the references it acknowledges, held until its end
        self.sends = sends  # messages it sends (for operators)


class PreparedTransactions:
    """PostOffice mixin: `prepared` (xid -> PreparedTransaction) and what moves them on."""

    def init_prepared(self: PostOffice) -> None:
        self.prepared: dict[bytes, PreparedTransaction] = {}
        #: references whose ACK update a prepared transaction wrote (`reference_done` writes none again)
        self.acked_when_prepared: set[MessageReference] = set()

    def prepare(self: PostOffice, tx: Transaction, xid: bytes) -> bool:
        """Make `tx`'s work durable under `xid` (the caller syncs the store before it answers);
        False when it has no work (read-only: nothing is prepared and there is nothing to commit)."""
        if xid in self.prepared:
            self.rollback(tx)
            raise TransactionRolledBack("a transaction is already prepared under this xid")
        self.refuse_rollback_only(tx)
        if not tx.sends and not tx.acks:
            tx.close()
            return False
        store = self.store
        tx_id = store.begin()
        try:
            for message, routing_type in tx.sends:
                self._route(message, routing_type, tx_id)
        except Exception as exc:  # (a large body that cannot be copied...): nothing of it is kept
            log.warning("transaction %d not prepared: %s", tx_id, exc)
            store.rollback(tx_id)
            self._held.pop(tx_id, None)
            self._large_in_tx.pop(tx_id, None)
            self.rollback(tx)
            raise TransactionRolledBack(f"not prepared: {exc}") from None
        acks = list(tx.acks)
        acked = self.acked_when_prepared
        for ref in acks:
            message = ref.message
            if message.durable and ref.queue.durable and message.ref_count > 0:
                store.ack(tx_id, message.id, ref.queue.id)
                acked.add(ref)
        store.prepare(tx_id, xid)
        self.prepared[xid] = PreparedTransaction(xid, tx_id, acks, len(tx.sends))
        tx.close()
        return True

    def commit_prepared(self: PostOffice, xid: bytes) -> None:
        """Commit what `prepare` made durable under `xid` (the caller syncs before it answers)."""
        p = self.prepared.pop(xid, None)
        if p is None:
            raise UnknownXid(xid)
        self.commit_store(p.tx_id)  # the sends join their queues
        acked = self.acked_when_prepared
        for ref in p.acks:
            if ref.state == DELIVERING and not ref.queue.deleted:
                ref.queue.acknowledge(ref, 0)  # (its ACK is committed: `reference_done` deletes at most)
            acked.discard(ref)

    def rollback_prepared(self: PostOffice, xid: bytes, *, to_consumer: bool = False) -> None:
        """Undo what `prepare` did under `xid`. The acknowledged messages go back to their queues,
        redelivered; with `to_consumer`, those whose consumer is still open go back to it instead,
        unacknowledged (a JMS client redelivers a rolled-back transaction's messages itself)."""
        p = self.prepared.pop(xid, None)
        if p is None:
            raise UnknownXid(xid)
        self.store.rollback(p.tx_id)
        for ref in self._held.pop(p.tx_id, ()):
            if ref.message.large is not None:
                self.release_large(ref.message.large)
        self._large_in_tx.pop(p.tx_id, None)  # files its acknowledgements would have let go: kept
        acked = self.acked_when_prepared
        back = []
        for ref in p.acks:
            acked.discard(ref)
            if ref.state != DELIVERING or ref.queue.deleted:
                continue
            consumer = ref.consumer
            if to_consumer and consumer is not None and not consumer.closed:
                consumer.delivering[ref.seq] = ref
                consumer.bytes_in_flight += ref.message.body_size
            else:
                back.append(ref)
        for ref in reversed(back):
            ref.queue.cancel(ref, redelivered=True)

    def prepared_sends_to(self: PostOffice, queue: Queue) -> bool:
        """Whether a prepared transaction sends to `queue` (it is not auto-deleted meanwhile)."""
        held = self._held
        return any(ref.queue is queue for p in self.prepared.values() for ref in held.get(p.tx_id, ()))

    # -- after a restart -------------------------------------------------------------------

    def recover_prepared(self: PostOffice, records: list[PreparedRecord],
                         per_queue: dict[int, list[MessageReference]]) -> list[tuple[Queue, MessageReference]]:
        """Rebuild the prepared transactions the store found; `per_queue` (the recovered
        references about to join their queues) loses those they acknowledge, which are returned
        as (queue, reference) for `hold_recovered` once the queues are filled."""
        wanted: dict[int, dict[int, bytes]] = {}  # queue id -> message id -> the xid acknowledging it
        for p in records:
            for message_id, queue_id in p.acks:
                wanted.setdefault(queue_id, {})[message_id] = p.data
        found: dict[tuple[int, int], MessageReference] = {}
        for queue_id, ids in wanted.items():
            refs = per_queue.get(queue_id)
            if not refs:
                continue
            kept = []
            for ref in refs:
                if ref.message.id in ids:
                    found[(ref.message.id, queue_id)] = ref
                else:
                    kept.append(ref)
            if kept:
                per_queue[queue_id] = kept
            else:
                del per_queue[queue_id]
        held = []
        queues_by_id = self.queues_by_id
        for p in records:
            refs = []
            for message, recovered in p.messages:
                live = [r for r in recovered if r.queue_id in queues_by_id]
                message.ref_count = len(live) if message.durable else 0
                if message.large is not None and live:
                    self.hold_large(message.large, len(live))
                for r in live:
                    queue = queues_by_id[r.queue_id]
                    refs.append(MessageReference(message, queue, r.seq, r.delivery_count))
                    if r.seq >= queue.next_seq:
                        queue.next_seq = r.seq + 1
            if refs:
                self._held[p.tx_id] = refs
            acks = []
            for message_id, queue_id in p.acks:
                ref = found.pop((message_id, queue_id), None)
                if ref is None:
                    log.warning("prepared transaction %d acknowledges message %d of queue %d, which is not "
                                "here", p.tx_id, message_id, queue_id)
                    continue
                acks.append(ref)
                self.acked_when_prepared.add(ref)
                held.append((ref.queue, ref))
            self.prepared[p.data] = PreparedTransaction(p.data, p.tx_id, acks, len(p.messages))
            log.warning("transaction %d is prepared: %d message(s) sent and %d acknowledged wait for its commit "
                        "or rollback", p.tx_id, len(p.messages), len(acks), extra={"event": "recovery.prepared"})
        return held

    def hold_recovered(self: PostOffice, held: list[tuple[Queue, MessageReference]]) -> None:
        """The references prepared transactions acknowledge join their queues as being delivered
        (to nobody): counted there, never dispatched, until the transaction ends."""
        for queue, ref in held:
            size = ref.message.size
            ref.state = DELIVERING
            ref.consumer = None
            ref.in_deque = False
            queue.delivering_count += 1
            queue.delivering_bytes += size
            queue.memory_bytes += size
            queue.messages_added += 1
            self.limits.added(queue.address, size)
            if queue.seq_index is not None:
                queue.seq_index.add(ref)
            if ref.seq >= queue.next_seq:
                queue.next_seq = ref.seq + 1
