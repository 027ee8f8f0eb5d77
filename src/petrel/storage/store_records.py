"""The records `FileStore` keeps in its two journals, and how recovery reads them back.

Record kinds (the journal's user type byte), bodies in msgpack:

bindings journal
  1 ADDRESS        add     (name, [routing types], auto_created)
  2 QUEUE          add     (name, address, routing type, filter, auto_created, client_id, subscription, seq,
                           {attributes})
  3 QUEUE_SEQ      update  (reserved sequence high-water mark)
  4 ID_COUNTER     add     (reserved id high-water mark); the previous one is deleted
  5 DIVERT         add     (name, address, forwarding address, exclusive, filter, routing type)

message journal
  10 MESSAGE       add     (encoded message, [(queue id, seq), ...])
  11 ACK           update  (queue id)
  12 DELIVERY      update  (queue id, delivery count)
  13 DUPLICATE_ID  add     (address, duplicate id)
  14 PAGE_CURSOR   add     (queue id, page file, offset); updated (file, offset) as pages are read
  15 SEQ_CURSOR    add     (format version, queue id, name, acked): a named cursor (core/cursors.py),
                           written anew (and the old record deleted) each time it moves
  16 DUPLICATE_IDS add     (address, [duplicate id, ...]): several IDs of one cache in one record (a
                           migration's batch); deleted once the cache has evicted them all
  17 MIGRATION_OPEN add    (format version, origin node id, opened at ms): a node began migrating
                           its messages here (scale-down, the drainer) and has not said
                           MIGRATION_DONE; deleted when it does (core/migrations_open.py)
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum

import msgspec

from petrel.core.message import Message, decode_message, peek_message
from petrel.storage.journal import RecordType
from petrel.storage.paging import PagePosition
from petrel.storage.store import AddressRecord, DivertRecord, PreparedRecord, QueueRecord, Recovered, RecoveredRef


class RecordKind(IntEnum):
    ADDRESS = 1
    QUEUE = 2
    QUEUE_SEQ = 3
    ID_COUNTER = 4
    DIVERT = 5
    MESSAGE = 10
    ACK = 11
    DELIVERY = 12
    DUPLICATE_ID = 13
    PAGE_CURSOR = 14
    SEQ_CURSOR = 15
    DUPLICATE_IDS = 16
    MIGRATION_OPEN = 17


SEQ_CURSOR_VERSION = 1  # the first field of a SEQ_CURSOR record
MIGRATION_OPEN_VERSION = 1  # the first field of a MIGRATION_OPEN record


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()
pack = _enc.encode
unpack = _dec.decode
# a MESSAGE record's body: its encoded message as a view of the record (not a copy), and its refs
unpack_message_record = msgspec.msgpack.Decoder(tuple[memoryview, list]).decode


def read_bindings(records: Iterable, rec: Recovered) -> tuple[int, int]:
    """Add the bindings journal's live `records` to `rec` (addresses, queues, diverts); returns
    the highest id reserved by an ID_COUNTER record (0 if none) and that record's id."""
    top = counter_record = 0
    for r in records:
        if r.user_type == RecordKind.ADDRESS:
            name, rts, auto = unpack(r.body)
            rec.addresses.append(AddressRecord(r.id, name, list(rts), auto))
        elif r.user_type == RecordKind.QUEUE:
            name, address, rt, filt, auto, client_id, sub, seq, *rest = unpack(r.body)
            for kind, body in r.updates:
                if kind == RecordKind.QUEUE_SEQ:
                    seq = max(seq, unpack(body))
            attributes = rest[0] if rest else {}
            rec.queues.append(QueueRecord(r.id, name, address, rt, filt, auto, client_id, sub, seq, attributes))
        elif r.user_type == RecordKind.DIVERT:
            rec.diverts.append(DivertRecord(r.id, *unpack(r.body)))
        elif r.user_type == RecordKind.ID_COUNTER:
            top = max(top, unpack(r.body))
            counter_record = r.id
    return top, counter_record


def read_messages(records: Iterable, rec: Recovered, defer: bool) -> None:
    """Add the message journal's live `records` to `rec`: messages with their live references,
    duplicate IDs, page cursors, sequence cursors and open migrations. With ``defer`` a message whose only
    reference is unacknowledged and whose body is in the journal is not built (see
    `FileStore.recover`): it goes to ``rec.deferred``."""
    deferred = rec.deferred
    for r in records:
        if r.user_type == RecordKind.MESSAGE:
            encoded, refs = unpack_message_record(r.body)
            if defer and not r.updates and len(refs) == 1:
                head = peek_message(encoded)
                if head.large is None:
                    qid, seq = refs[0]
                    deferred.append((r.id, encoded, qid, seq, head.priority, head.scheduled))
                    continue
            message = decode_message(r.id, encoded)
            # the record's bytes go now, not with the whole journal at the end: the next
            # messages' bodies reuse that memory (a million fresh pages cost a fault each)
            del encoded
            r.body = b""
            if not r.updates:
                if len(refs) == 1:  # the usual case: one queue's
                    qid, seq = refs[0]
                    rec.messages.append((message, [RecoveredRef(qid, seq)]))
                else:
                    rec.messages.append((message, [RecoveredRef(qid, seq) for qid, seq in refs]))
                continue
            live = {qid: RecoveredRef(qid, seq) for qid, seq in refs}
            for kind, body in r.updates:
                if kind == RecordKind.ACK:
                    live.pop(unpack(body), None)
                elif kind == RecordKind.DELIVERY:
                    qid, count = unpack(body)
                    if qid in live:
                        live[qid].delivery_count = count
            rec.messages.append((message, list(live.values())))
        elif r.user_type == RecordKind.DUPLICATE_ID:
            address, dup_id = unpack(r.body)
            rec.duplicate_ids.append((r.id, address, dup_id))
        elif r.user_type == RecordKind.DUPLICATE_IDS:
            address, dup_ids = unpack(r.body)
            rec.duplicate_ids.extend((r.id, address, dup_id) for dup_id in dup_ids)
        elif r.user_type == RecordKind.PAGE_CURSOR:
            queue_id, f, off = unpack(r.body)
            for _kind, body in r.updates:
                f, off = unpack(body)
            position = PagePosition(f, off)
            known = rec.page_cursors.get(queue_id)
            if known is None or known[1] <= position:
                rec.page_cursors[queue_id] = (r.id, position)
        elif r.user_type == RecordKind.SEQ_CURSOR:
            version, queue_id, name, acked, *_ = unpack(r.body)
            if version != SEQ_CURSOR_VERSION:
                raise ValueError(f"sequence cursor record {r.id} has format version {version}; this broker "
                                 f"reads version {SEQ_CURSOR_VERSION}: start the version that wrote it")
            rec.seq_cursors.append((r.id, queue_id, name, acked))
        elif r.user_type == RecordKind.MIGRATION_OPEN:
            version, origin, *_ = unpack(r.body)
            if version != MIGRATION_OPEN_VERSION:
                raise ValueError(f"open migration record {r.id} has format version {version}; this broker "
                                 f"reads version {MIGRATION_OPEN_VERSION}: start the version that wrote it")
            rec.migrations_open.append((r.id, origin))


def read_prepared(tx) -> PreparedRecord:
    """A transaction the message journal found prepared: its sends (MESSAGE records with their
    delivery counts) and acknowledgements (ACK updates)."""
    prepared = PreparedRecord(tx.tx_id, tx.data)
    sent: dict[int, tuple[Message, dict[int, RecoveredRef]]] = {}
    for code, rid, kind, body in tx.records:
        if kind == RecordKind.MESSAGE and code == RecordType.ADD_TX:
            encoded, refs = unpack_message_record(body)
            sent[rid] = (decode_message(rid, encoded), {qid: RecoveredRef(qid, seq) for qid, seq in refs})
        elif kind == RecordKind.DELIVERY and rid in sent:
            qid, count = unpack(body)
            ref = sent[rid][1].get(qid)
            if ref is not None:
                ref.delivery_count = count
        elif kind == RecordKind.ACK:
            prepared.acks.append((rid, unpack(body)))
    prepared.messages = [(message, list(refs.values())) for message, refs in sent.values()]
    return prepared
