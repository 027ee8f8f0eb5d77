"""`FileStore`: the broker's state in two journals, `bindings/` and `journal/`, and page files
in `paging/`. The records and how recovery reads them back: storage/store_records.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from petrel.core.message import Message, encode_message, now_ms
from petrel.storage.journal import FileJournal
from petrel.storage.paging import PagedMessage, PagePosition, PageStore, remove
from petrel.storage.store import AddressRecord, DivertRecord, QueueRecord, Recovered
from petrel.storage.store_records import (  # noqa: F401  (RecordKind, pack, unpack: imported from here too)
    MIGRATION_OPEN_VERSION,
    SEQ_CURSOR_VERSION,
    RecordKind,
    pack,
    read_bindings,
    read_messages,
    read_prepared,
    unpack,
)
from petrel.storage.stream import DurabilityGate, StoreStream
from petrel.storage.sync_waiters import _DupIdsAfterPages, _PagesSynced, _Waiter


ID_BATCH = 100_000


class FileStore:
    def __init__(
        self,
        data_dir: Path,
        *,
        dispatch: Callable[[list[Callable[[], None]]], None] | None = None,
        sync_transactional: bool = True,
        sync_non_transactional: bool = True,
        skip_damaged: bool = False,
        page_size: int = 10 * 1024 * 1024,
        **journal_options,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.dispatch = dispatch or _run_all
        self.sync_transactional = sync_transactional
        self.sync_non_transactional = sync_non_transactional
        self.skip_damaged = skip_damaged
        # every change to a file under data_dir, in order (storage/stream.py; replication follows it)
        self.stream = StoreStream(self.data_dir)
        self._gate: DurabilityGate | None = None
        journal_options["stream"] = self.stream
        bindings_options = dict(journal_options)
        bindings_options["file_size"] = min(journal_options.get("file_size", 1 << 20), 1 << 20)
        bindings_options["compact_min_files"] = 2
        self.bindings = FileJournal(
            self.data_dir / "bindings", prefix="petrel-bindings", extension="bindings", **bindings_options
        )
        self.messages = FileJournal(self.data_dir / "journal", prefix="petrel-data", extension="pj",
                                    keep_prepared=True, **journal_options)
        self.pages = PageStore(
            self.data_dir / "paging", page_size=page_size, datasync=journal_options.get("datasync", True),
            dispatch=self.dispatch, stream=self.stream,
        )
        self.disk_watch = None  # a storage.disk.DiskWatch told of the bytes appended
        self._pages_appended = 0  # page records appended
        self._pages_durable = 0  # page records a completed page sync covered
        # duplicate-ID records waiting for their pages: record id -> ((address, id), body), and
        # (address, id) -> record id
        self._dup_after_pages: dict[int, tuple[tuple[str, str], bytes]] = {}
        self._dup_waiting: dict[tuple[str, str], int] = {}  # ... of sends whose one page is their home
        self._held_deletes: list[int] | None = None  # deletes outside transactions held (hold_deletes)
        self._dup_homes: set[tuple[str, str]] = set()  # paged as their send's only home, ID to come
        self._dup_waits = 0  # syncs waiting for the page writer before appending those
        self._next_id = 1
        self._reserved = 0
        self._counter_record = 0
        self._tx_with_records: set[int] = set()
        self.rolled_back = 0

    # -- lifecycle ----------------------------------------------------------------------

    def recover(self, defer: bool = False) -> Recovered:
        """What the journals hold. With ``defer`` a message whose only reference is unacknowledged
        and whose body is in the journal is not built: it goes to ``Recovered.deferred`` with what
        its queue's order needs (its priority and scheduled time, read without decoding the rest)."""
        b = self.bindings.load(skip_damaged=self.skip_damaged)
        m = self.messages.load(skip_damaged=self.skip_damaged)
        rec = Recovered(rolled_back=len(b.rolled_back) + len(m.rolled_back))
        counter_top, counter_record = read_bindings(b.records.values(), rec)
        if counter_record:
            self._counter_record = counter_record
        top = max(b.max_id, m.max_id, counter_top)
        read_messages(m.records.values(), rec, defer)
        for tx in m.prepared:
            self._tx_with_records.add(tx.tx_id)  # it stays open here
            rec.prepared.append(read_prepared(tx))
        self._next_id = top + 1
        self._reserved = 0
        self.rolled_back = rec.rolled_back
        found = self.pages.recover({qid: position.file for qid, (_, position) in rec.page_cursors.items()})
        self.bindings.start(self.dispatch)
        self.messages.start(self.dispatch)
        self.pages.start()
        for qid in found:
            if qid not in rec.page_cursors:
                # no cursor was ever durable: nothing in these files was confirmed
                self._remove_when_durable(self.pages.delete_queue(qid))
        for qid, (_, position) in rec.page_cursors.items():
            self._remove_when_durable(self.pages.release(qid, position))  # read before a crash
        self._dup_ids_from_pages(rec)
        return rec

    def _dup_ids_from_pages(self, rec: Recovered) -> None:
        """Duplicate IDs of paged sends whose page was durable and their ID record not yet
        (`add_duplicate_id_after_pages`; a crash between the two): taken from the page records
        that are their send's only home, and journalled now, so a resend is still dropped."""
        known = {(address, dup_id) for _, address, dup_id in rec.duplicate_ids}
        oldest: dict[str, int] = {}  # address -> its oldest journalled ID (its cache's oldest entry)
        for record_id, address, _ in rec.duplicate_ids:
            oldest[address] = min(oldest.get(address, record_id), record_id)
        found = []  # (message id: when it was sent, record id, address, dup id)
        for qid, (_, position) in rec.page_cursors.items():
            for message in self.pages.homes_after(qid, position):
                dup_id = message.duplicate_id
                key = (message.address, dup_id)
                if dup_id is None or key in known or message.id < oldest.get(message.address, 0):
                    continue  # journalled, or older than its cache's oldest entry: evicted since
                known.add(key)
                record_id = self.next_id()
                self.messages.add(record_id, RecordKind.DUPLICATE_ID, pack(key))
                found.append((message.id, record_id, message.address, dup_id))
        if found:
            # in the order they were sent among the others, so each cache keeps its newest IDs
            entries = [(rid, rid, address, dup_id) for rid, address, dup_id in rec.duplicate_ids] + found
            entries.sort(key=lambda e: e[0])
            rec.duplicate_ids = [(rid, address, dup_id) for _, rid, address, dup_id in entries]

    def close(self) -> None:
        self.pages.stop()
        self.messages.stop()
        self.bindings.stop()

    # -- ids and transactions -----------------------------------------------------------

    def next_id(self) -> int:
        n = self._next_id
        if n > self._reserved:
            # Reserve a batch so ids keep growing across restarts; the counter record takes id n.
            self._reserved = n + ID_BATCH
            old = self._counter_record
            self.bindings.add(n, RecordKind.ID_COUNTER, pack(self._reserved))
            if old:
                self.bindings.delete(old)
            self._counter_record = n
            n += 1
        self._next_id = n + 1
        return n

    def begin(self) -> int:
        return self.next_id()

    def commit(self, tx_id: int) -> None:
        if tx_id in self._tx_with_records:
            self._tx_with_records.discard(tx_id)
            self.messages.commit(tx_id)

    def rollback(self, tx_id: int) -> None:
        if tx_id in self._tx_with_records:
            self._tx_with_records.discard(tx_id)
            self.messages.rollback(tx_id)

    def prepare(self, tx_id: int, data: bytes) -> None:
        """Transaction `tx_id` is prepared (XA): its records and `data` survive a restart, where
        `Recovered.prepared` hands them back, until its `commit` or `rollback`."""
        self._tx_with_records.add(tx_id)
        self.messages.prepare(tx_id, data)

    def sync(self, done: Callable[[], None], *, transactional: bool = False,
             failed: Callable[[BaseException], None] | None = None) -> None:
        """`done` runs once everything appended so far, to any journal, is durable (or at once if
        syncs are off); `failed(error)` runs instead when that cannot be done (a write failed).
        Held deletes (`hold_deletes`) are appended first.

        A journal is waited on whenever something appended to it is not yet known durable, not
        only when this caller appended to it: a record another connection appended (a queue, say)
        can be what this caller's records depend on.  Journals report their durable position;
        page files count appends and what confirmed syncs covered.
        """
        if self._held_deletes:
            self._release_held()
        if not (self.sync_transactional if transactional else self.sync_non_transactional):
            self._append_dup_ids(list(self._dup_after_pages))
            done()
            return
        if self._dup_after_pages or self._dup_waits:
            # Duplicate IDs of paged messages wait for their pages (`add_duplicate_id_after_pages`);
            # while any do, every sync goes through the page writer first (its callbacks run in
            # order), so none completes before an ID appended before it is durable.
            self._dup_waits += 1
            self.pages.sync(_DupIdsAfterPages(self, list(self._dup_after_pages), done, failed))
            return
        self._sync_now(done, failed)

    def set_gate(self, gate: DurabilityGate | None) -> None:
        """From now on a sync that is locally durable calls `gate.after(done, failed)` instead of
        `done()` (where `done` would have run); the gate reads `stream.seq` then, and lets `done`
        run once the backup holds the stream that far. None: back to `done()` at once."""
        self._gate = gate

    def _confirm(self, done: Callable[[], None], failed: Callable[[BaseException], None] | None) -> None:
        gate = self._gate
        if gate is None:
            done()
        else:
            gate.after(done, failed)

    def _sync_now(self, done: Callable[[], None], failed: Callable[[BaseException], None] | None) -> None:
        journals = [self.messages]
        if self.bindings.position > self.bindings.durable_position:
            journals.append(self.bindings)
        waiter = _Waiter(self, done, failed, len(journals) + (self._pages_appended > self._pages_durable))
        for journal in journals:
            journal.sync(waiter)
        if self._pages_appended > self._pages_durable:
            self.pages.sync(_PagesSynced(self, self._pages_appended, waiter))

    def persist_error(self) -> BaseException | None:
        """Why the store cannot make anything durable now (a failing write), or None."""
        for journal in (self.messages, self.bindings):
            if journal.failure is not None:
                return journal.failure
        return self.pages.failure

    # -- bindings -----------------------------------------------------------------------

    def add_address(self, r: AddressRecord) -> None:
        self.bindings.add(r.id, RecordKind.ADDRESS, pack((r.name, r.routing_types, r.auto_created)))

    def update_address(self, r: AddressRecord) -> None:
        # Routing types only grow: write the whole record anew under the same id.
        self.bindings.delete(r.id)
        self.bindings.add(r.id, RecordKind.ADDRESS, pack((r.name, r.routing_types, r.auto_created)))

    def delete_address(self, address_id: int) -> None:
        self.bindings.delete(address_id)

    def add_queue(self, r: QueueRecord) -> None:
        body = pack((r.name, r.address, r.routing_type, r.filter, r.auto_created, r.client_id, r.subscription,
                     r.seq_reserved, r.attributes))
        self.bindings.add(r.id, RecordKind.QUEUE, body)

    def reserve_queue_seq(self, queue_id: int, reserved: int) -> None:
        self.bindings.update(queue_id, RecordKind.QUEUE_SEQ, pack(reserved))

    def delete_queue(self, queue_id: int) -> None:
        self.bindings.delete(queue_id)

    def add_divert(self, r: DivertRecord) -> None:
        body = pack((r.name, r.address, r.forwarding_address, r.exclusive, r.filter, r.routing_type))
        self.bindings.add(r.id, RecordKind.DIVERT, body)

    def delete_divert(self, divert_id: int) -> None:
        self.bindings.delete(divert_id)

    # -- messages -----------------------------------------------------------------------

    def add_message(self, tx_id: int, message: Message, refs: list[tuple[int, int]]) -> None:
        body = pack((encode_message(message), refs))
        if self.disk_watch is not None:
            self.disk_watch.appended(len(body))
        if tx_id:
            self._tx_with_records.add(tx_id)
            self.messages.add_tx(tx_id, message.id, RecordKind.MESSAGE, body)
            if self._dup_waiting:
                self._dup_id_with(tx_id, message)
        else:
            self.messages.add(message.id, RecordKind.MESSAGE, body)

    def add_messages(self, tx_id: int, messages: list[tuple[Message, list[tuple[int, int]]]]) -> None:
        """`add_message` of each (message, refs), in order, in transaction `tx_id` (not 0): the
        journal places and hands over their records together (a migration's batch)."""
        records = [(message.id, pack((encode_message(message), refs))) for message, refs in messages]
        if self.disk_watch is not None:
            self.disk_watch.appended(sum(len(body) for _, body in records))
        self._tx_with_records.add(tx_id)
        self.messages.add_tx_many(tx_id, RecordKind.MESSAGE, records)
        if self._dup_waiting:
            for message, _ in messages:
                self._dup_id_with(tx_id, message)

    def _dup_id_with(self, tx_id: int, message: Message) -> None:
        """A message paged as its send's only home, whose duplicate ID still waits for the page
        (`add_duplicate_id_after_pages`), reaches the journal (read back from its page before
        the page writer's sync came back): the ID goes in the same transaction, so a crash never
        keeps the message (now only in the journal, the page being behind the cursor) without it."""
        dup_id = message.duplicate_id
        record_id = None if dup_id is None else self._dup_waiting.pop((message.address, dup_id), None)
        if record_id is not None:
            _, body = self._dup_after_pages.pop(record_id)
            self.messages.add_tx(tx_id, record_id, RecordKind.DUPLICATE_ID, body)

    def ack(self, tx_id: int, message_id: int, queue_id: int) -> None:
        if tx_id:
            self._tx_with_records.add(tx_id)
            self.messages.update_tx(tx_id, message_id, RecordKind.ACK, pack(queue_id))
        else:
            self.messages.update(message_id, RecordKind.ACK, pack(queue_id))

    def delete_message(self, tx_id: int, message_id: int) -> None:
        if tx_id:
            self._tx_with_records.add(tx_id)
            self.messages.delete_tx(tx_id, message_id)
        elif self._held_deletes is not None:
            self._held_deletes.append(message_id)
        else:
            self.messages.delete(message_id)

    def hold_deletes(self) -> None:
        """Deletes outside transactions wait, until `release_deletes` (or a `sync`), and then go
        to the journal together, in order (`FileJournal.delete_many`: one run of DELETE records,
        not one hand-over each): a migration removing a confirmed batch."""
        if self._held_deletes is None:
            self._held_deletes = []

    def release_deletes(self) -> None:
        held, self._held_deletes = self._held_deletes, None
        if held:
            self.messages.delete_many(held)

    def _release_held(self) -> None:
        held, self._held_deletes = self._held_deletes, []
        self.messages.delete_many(held)

    def update_delivery_count(self, message_id: int, queue_id: int, count: int, tx_id: int = 0) -> None:
        """`tx_id`: in that transaction, the one that adds the message (a count it arrives with):
        outside it, the update would precede the add's commit, and recovery would drop it."""
        if tx_id:
            self._tx_with_records.add(tx_id)
            self.messages.update_tx(tx_id, message_id, RecordKind.DELIVERY, pack((queue_id, count)))
        else:
            self.messages.update(message_id, RecordKind.DELIVERY, pack((queue_id, count)))

    def add_duplicate_id(self, tx_id: int, record_id: int, address: str, dup_id: str) -> None:
        self._add_message_record(tx_id, record_id, RecordKind.DUPLICATE_ID, pack((address, dup_id)))

    def add_duplicate_ids(self, tx_id: int, record_id: int, address: str, dup_ids: list[str]) -> None:
        self._add_message_record(tx_id, record_id, RecordKind.DUPLICATE_IDS, pack((address, dup_ids)))

    def _add_message_record(self, tx_id: int, record_id: int, kind: RecordKind, body: bytes) -> None:
        if tx_id:
            self._tx_with_records.add(tx_id)
            self.messages.add_tx(tx_id, record_id, kind, body)
        else:
            self.messages.add(record_id, kind, body)

    def add_duplicate_id_after_pages(self, record_id: int, address: str, dup_id: str) -> None:
        """A duplicate ID of a message that went to page files: a journal transaction cannot
        include a page write, so the ID is appended to the journal only once the page writer
        has made everything paged so far durable (see `sync`). Journalled before, a crash could
        keep the ID without the message, and the client's resend would be dropped as a duplicate."""
        key = (address, dup_id)
        self._dup_after_pages[record_id] = (key, pack(key))
        if key in self._dup_homes:  # its one page record holds the whole send (`page`)
            self._dup_homes.discard(key)
            self._dup_waiting[key] = record_id

    def _append_dup_ids(self, record_ids: list[int]) -> None:
        for record_id in record_ids:
            waiting = self._dup_after_pages.pop(record_id, None)
            if waiting is not None:  # not evicted from its cache (nor journalled) meanwhile
                key, body = waiting
                if self._dup_waiting.get(key) == record_id:
                    del self._dup_waiting[key]
                self.messages.add(record_id, RecordKind.DUPLICATE_ID, body)

    def delete_duplicate_id(self, tx_id: int, record_id: int) -> None:
        waiting = self._dup_after_pages.pop(record_id, None)
        if waiting is not None:
            if self._dup_waiting.get(waiting[0]) == record_id:
                del self._dup_waiting[waiting[0]]
            return  # evicted from its cache before it was journalled
        if tx_id:
            self._tx_with_records.add(tx_id)
            self.messages.delete_tx(tx_id, record_id)
        else:
            self.messages.delete(record_id)

    # -- named sequence cursors ---------------------------------------------------------

    def put_seq_cursor(self, tx_id: int, record_id: int, queue_id: int, name: str, acked: int) -> int:
        """Write a cursor's position as a new record, deleting its old one (`record_id`, 0 for a
        new cursor), so segments holding older positions are reclaimed; returns the new id."""
        new_id = self.next_id()
        body = pack((SEQ_CURSOR_VERSION, queue_id, name, acked))
        if tx_id:
            self._tx_with_records.add(tx_id)
            self.messages.add_tx(tx_id, new_id, RecordKind.SEQ_CURSOR, body)
            if record_id:
                self.messages.delete_tx(tx_id, record_id)
        else:
            self.messages.add(new_id, RecordKind.SEQ_CURSOR, body)
            if record_id:
                self.messages.delete(record_id)
        return new_id

    def delete_seq_cursor(self, tx_id: int, record_id: int) -> None:
        self.delete_message(tx_id, record_id)

    # -- migrations begun here and not done (core/migrations_open.py) --------------------------

    def add_migration_open(self, tx_id: int, origin: str) -> int:
        """Record that node `origin` began migrating its messages here (in `tx_id`: with its
        first messages, so a crash never keeps them without it); returns the record's id."""
        record_id = self.next_id()
        self._add_message_record(tx_id, record_id, RecordKind.MIGRATION_OPEN,
                                 pack((MIGRATION_OPEN_VERSION, origin, now_ms())))
        return record_id

    def delete_migration_open(self, record_id: int) -> None:
        self.messages.delete(record_id)

    # -- paging -------------------------------------------------------------------------

    supports_paging = True

    def page(self, queue_id: int, seq: int, message: Message, *, home: bool = False) -> None:
        self.pages.append(queue_id, seq, message, home=home)
        if home:
            self._dup_homes.add((message.address, message.duplicate_id))
        self._pages_appended += 1
        if self.disk_watch is not None:
            self.disk_watch.appended(message.size)

    def create_page_cursor(self, queue_id: int) -> int:
        record_id = self.next_id()
        self.messages.add(record_id, RecordKind.PAGE_CURSOR, pack((queue_id, 0, 0)))
        return record_id

    def update_page_cursor(self, tx_id: int, record_id: int, queue_id: int, position: PagePosition) -> int:
        """Move a queue's page cursor; returns the id of the record that now holds it.

        The cursor is written as a new record and the old one deleted (not updated in place), so
        the journal segments holding older positions become dead and are reclaimed."""
        new_id = self.next_id()
        body = pack((queue_id, position.file, position.offset))
        if tx_id:
            self._tx_with_records.add(tx_id)
            self.messages.add_tx(tx_id, new_id, RecordKind.PAGE_CURSOR, body)
            self.messages.delete_tx(tx_id, record_id)
        else:
            self.messages.add(new_id, RecordKind.PAGE_CURSOR, body)
            self.messages.delete(record_id)
        return new_id

    def read_pages(self, queue_id: int, cursor: PagePosition, max_bytes: int) -> list[PagedMessage]:
        return self.pages.read(queue_id, cursor, max_bytes, after_restart_from=self.pages.run_start.get(queue_id, 0))

    def page_end(self, queue_id: int) -> PagePosition:
        return self.pages.end_position(queue_id)

    def pending_bytes(self) -> int:
        """Bytes appended to the message journal that the writer has not written yet."""
        return self.messages.pending_bytes()

    def after_written(self, done: Callable[[], None]) -> None:
        """`done` runs once the message journal has written what was appended so far."""
        if self._held_deletes:
            self._release_held()
        self.messages.sync(done)

    def pages_in_flight(self, queue_id: int) -> bool:
        """Paged records not yet written to their file (a read now would not see them)."""
        return self.pages.has_unwritten(queue_id)

    def count_pages(self, queue_id: int, cursor: PagePosition) -> int:
        return self.pages.count_after(queue_id, cursor)

    def release_pages(self, queue_id: int, cursor: PagePosition | None = None) -> None:
        """Drop page files before the cursor, or all of them (None: everything was read), once
        the journal holds the cursor past them (and the messages read from them) durably."""
        if cursor is None:
            self._remove_when_durable(self.pages.reset(queue_id))
        else:
            self._remove_when_durable(self.pages.release(queue_id, cursor))

    def delete_pages(self, queue_id: int, cursor_record: int) -> None:
        if cursor_record:
            self.messages.delete(cursor_record)
        self._remove_when_durable(self.pages.delete_queue(queue_id))

    def _remove_when_durable(self, paths: list[Path]) -> None:
        """Unlink page files once everything appended to the message journal so far is durable:
        a crash before that recovers a cursor that still points into them."""
        if paths:
            self.messages.sync(lambda: remove(paths, self.stream))


def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for cb in callbacks:
        cb()
