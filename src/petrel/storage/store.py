"""The seam between the domain and durable storage.

The post office calls a `Store` for every change that must survive a restart. Calls only
append: they never block and never wait for the disk. Whoever needs durability (a receipt
for a persistent send, a transaction commit) asks `sync(done, failed=...)` afterwards; `done`
runs once everything appended before it is on disk, `failed(error)` instead when the disk
cannot take it (the store keeps retrying; nothing is confirmed meanwhile).

`tx_id == 0` means "not in a transaction". Transactions are opened with `begin()`, which
costs nothing until a record is written under it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from petrel.core.message import Message
from petrel.storage.paging import PagedMessage, PagePosition

if TYPE_CHECKING:
    from petrel.storage.disk import DiskWatch
    from petrel.storage.stream import DurabilityGate, StoreStream


@dataclass(slots=True)
class AddressRecord:
    id: int
    name: str
    routing_types: list[int]
    auto_created: bool = False


@dataclass(slots=True)
class QueueRecord:
    id: int
    name: str
    address: str
    routing_type: int
    filter: str | None = None
    auto_created: bool = False
    client_id: str | None = None
    subscription: str | None = None
    seq_reserved: int = 0
    # queue attributes: exclusive, last_value_key, non_destructive, ring_size, group_rebalance, group_buckets
    attributes: dict = field(default_factory=dict)


@dataclass(slots=True)
class RecoveredRef:
    queue_id: int
    seq: int
    delivery_count: int = 0


@dataclass(slots=True)
class DivertRecord:
    id: int
    name: str
    address: str
    forwarding_address: str
    exclusive: bool = False
    filter: str | None = None
    routing_type: str = "STRIP"  # STRIP | PASS | ANYCAST | MULTICAST


@dataclass(slots=True)
class PreparedRecord:
    """A transaction prepared before the restart (XA), still to be committed or rolled back: what
    it sends (messages with their references, invisible until the commit) and acknowledges
    (message id, queue id: held until then), under the data it was prepared with."""

    tx_id: int
    data: bytes
    messages: list[tuple[Message, list[RecoveredRef]]] = field(default_factory=list)
    acks: list[tuple[int, int]] = field(default_factory=list)


@dataclass(slots=True)
class Recovered:
    addresses: list[AddressRecord] = field(default_factory=list)
    queues: list[QueueRecord] = field(default_factory=list)
    diverts: list[DivertRecord] = field(default_factory=list)
    # messages in journal order, each with its unacknowledged references
    messages: list[tuple[Message, list[RecoveredRef]]] = field(default_factory=list)
    # (record id, address, duplicate id), oldest first
    duplicate_ids: list[tuple[int, str, str]] = field(default_factory=list)
    # queue id -> (cursor record id, position of the next page record to read)
    page_cursors: dict = field(default_factory=dict)
    # named sequence cursors (core/cursors.py): (record id, queue id, name, acked)
    seq_cursors: list[tuple[int, int, str, int]] = field(default_factory=list)
    # nodes whose migration here began and did not say MIGRATION_DONE: (record id, origin node id)
    migrations_open: list[tuple[int, str]] = field(default_factory=list)
    rolled_back: int = 0
    # `recover(defer=True)` (the drainer): messages not built yet, each one's only reference
    # unacknowledged, not large, as (record id, encoded message, queue id, seq, priority, scheduled);
    # the post office builds them as they are needed (core/staged.py)
    deferred: list[tuple] = field(default_factory=list)
    # transactions found prepared (`Store.prepare`), oldest first
    prepared: list[PreparedRecord] = field(default_factory=list)


class Store(Protocol):
    supports_paging: bool
    # every change to the files of the data directory, in order (None: no files); see stream.py
    stream: StoreStream | None
    disk_watch: DiskWatch | None  # told of the bytes appended (storage/disk.py), when set

    def recover(self) -> Recovered: ...
    def next_id(self) -> int: ...
    def begin(self) -> int: ...
    def commit(self, tx_id: int) -> None: ...
    def rollback(self, tx_id: int) -> None: ...
    def prepare(self, tx_id: int, data: bytes) -> None: ...
    def sync(self, done: Callable[[], None], *, transactional: bool = False,
             failed: Callable[[BaseException], None] | None = None) -> None: ...
    def add_address(self, record: AddressRecord) -> None: ...
    def update_address(self, record: AddressRecord) -> None: ...
    def delete_address(self, address_id: int) -> None: ...
    def add_queue(self, record: QueueRecord) -> None: ...
    def reserve_queue_seq(self, queue_id: int, reserved: int) -> None: ...
    def delete_queue(self, queue_id: int) -> None: ...
    def add_divert(self, record: DivertRecord) -> None: ...
    def delete_divert(self, divert_id: int) -> None: ...
    def add_message(self, tx_id: int, message: Message, refs: list[tuple[int, int]]) -> None: ...
    def add_messages(self, tx_id: int, messages: list[tuple[Message, list[tuple[int, int]]]]) -> None: ...
    def ack(self, tx_id: int, message_id: int, queue_id: int) -> None: ...
    def delete_message(self, tx_id: int, message_id: int) -> None: ...
    def update_delivery_count(self, message_id: int, queue_id: int, count: int, tx_id: int = 0) -> None: ...
    def add_duplicate_id(self, tx_id: int, record_id: int, address: str, dup_id: str) -> None: ...
    def add_duplicate_ids(self, tx_id: int, record_id: int, address: str, dup_ids: list[str]) -> None: ...
    def add_duplicate_id_after_pages(self, record_id: int, address: str, dup_id: str) -> None: ...
    def delete_duplicate_id(self, tx_id: int, record_id: int) -> None: ...
    def put_seq_cursor(self, tx_id: int, record_id: int, queue_id: int, name: str, acked: int) -> int: ...
    def delete_seq_cursor(self, tx_id: int, record_id: int) -> None: ...
    def add_migration_open(self, tx_id: int, origin: str) -> int: ...
    def delete_migration_open(self, record_id: int) -> None: ...
    def close(self) -> None: ...

    # durability
    def persist_error(self) -> BaseException | None: ...
    def set_gate(self, gate: DurabilityGate | None) -> None: ...

    # paging (only where `supports_paging`)
    def page(self, queue_id: int, seq: int, message: Message, *, home: bool = False) -> None: ...
    def create_page_cursor(self, queue_id: int) -> int: ...
    def update_page_cursor(self, tx_id: int, record_id: int, queue_id: int, position: PagePosition) -> int: ...
    def read_pages(self, queue_id: int, cursor: PagePosition, max_bytes: int) -> list[PagedMessage]: ...
    def page_end(self, queue_id: int) -> PagePosition: ...
    def pending_bytes(self) -> int: ...
    def after_written(self, done: Callable[[], None]) -> None: ...
    def pages_in_flight(self, queue_id: int) -> bool: ...
    def count_pages(self, queue_id: int, cursor: PagePosition) -> int: ...
    def release_pages(self, queue_id: int, cursor: PagePosition | None = None) -> None: ...
    def delete_pages(self, queue_id: int, cursor_record: int) -> None: ...


class NullStore:
    """No persistence (`persistence_enabled = false`): everything lives in memory only."""

    supports_paging = False
    stream = None  # no files
    disk_watch = None

    def __init__(self) -> None:
        self._next = 1
        self._gate: DurabilityGate | None = None

    def recover(self) -> Recovered:
        return Recovered()

    def next_id(self) -> int:
        n = self._next
        self._next += 1
        return n

    def begin(self) -> int:
        return self.next_id()

    def sync(self, done: Callable[[], None], *, transactional: bool = False,
             failed: Callable[[BaseException], None] | None = None) -> None:
        if self._gate is None:
            done()
        else:
            self._gate.after(done, failed)

    def close(self) -> None:
        pass

    def put_seq_cursor(self, tx_id: int, record_id: int, queue_id: int, name: str, acked: int) -> int:
        return self.next_id()

    def add_migration_open(self, tx_id: int, origin: str) -> int:
        return self.next_id()

    def persist_error(self) -> BaseException | None:
        return None

    def set_gate(self, gate: DurabilityGate | None) -> None:
        self._gate = gate

    # -- paging: never asked for (`supports_paging` is False); the questions have plain answers

    def _no_paging(self, *args, **kwargs):
        raise NotImplementedError("this store keeps nothing on disk: it cannot page")

    page = create_page_cursor = update_page_cursor = read_pages = _no_paging

    def page_end(self, queue_id: int) -> PagePosition:
        return PagePosition(0, 0)

    def pending_bytes(self) -> int:
        return 0

    def after_written(self, done: Callable[[], None]) -> None:
        done()

    def pages_in_flight(self, queue_id: int) -> bool:
        return False

    def count_pages(self, queue_id: int, cursor: PagePosition) -> int:
        return 0

    def _ignore(self, *args, **kwargs) -> None:
        pass

    commit = rollback = prepare = add_address = update_address = delete_address = _ignore
    add_queue = reserve_queue_seq = delete_queue = add_divert = delete_divert = _ignore
    add_message = add_messages = ack = delete_message = update_delivery_count = _ignore
    add_duplicate_id = add_duplicate_ids = add_duplicate_id_after_pages = delete_duplicate_id = _ignore
    release_pages = delete_pages = delete_seq_cursor = delete_migration_open = _ignore
