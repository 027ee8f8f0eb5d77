"""FileStore.sync: a confirmation waits for every record appended before it, in every journal,
whoever appended it; a failing disk fails the waiter instead of hanging it."""

from __future__ import annotations

import errno
import os
import threading

from petrel.core.message import Message
from petrel.storage.file_store import FileStore
from petrel.storage.journal import writer as writer_module
from petrel.storage.store import QueueRecord

from journal_harness import wait_for


class Gate:
    """Holds the fdatasync of files under one directory until opened (or makes it fail)."""

    def __init__(self, monkeypatch, directory) -> None:
        self.directory = str(directory)
        self.open = threading.Event()
        self.entered = threading.Event()
        self.error: int | None = None
        real = writer_module._datasync

        def datasync(fd):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(self.directory):
                if self.error is not None:
                    raise OSError(self.error, os.strerror(self.error))
                self.entered.set()
                assert self.open.wait(20)
            real(fd)

        monkeypatch.setattr(writer_module, "_datasync", datasync)


class Waiter:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None

    def ok(self) -> None:
        self.done.set()

    def failed(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


def message(store, body=b"m"):
    return Message(id=store.next_id(), address="q", body=body, durable=True)


def test_a_confirmation_waits_for_a_queue_record_another_sync_already_asked_for(tmp_path, monkeypatch):
    """Bug 4: connection 2 creates a queue; connection 1's sync (for its own message) is the
    first to see the bindings journal behind; connection 2 then sends to its queue and syncs.
    Its confirmation must wait for the queue record, though connection 1 asked for it first."""
    store = FileStore(tmp_path, file_size=256 * 1024)
    store.recover()
    gate = Gate(monkeypatch, tmp_path / "bindings")
    try:
        queue_id = store.next_id()
        store.add_queue(QueueRecord(queue_id, "q", "q", 0))  # connection 2's queue
        first = Waiter()
        store.add_message(0, message(store, b"1"), [])  # connection 1
        store.sync(first.ok, failed=first.failed)
        assert gate.entered.wait(20)  # the bindings writer holds the queue record, not yet durable
        second = Waiter()
        store.add_message(0, message(store, b"2"), [(queue_id, 1)])  # connection 2, into its queue
        store.sync(second.ok, failed=second.failed)
        messages_done = threading.Event()
        store.after_written(messages_done.set)
        assert messages_done.wait(20)  # the message journal has both messages on disk
        assert not second.done.is_set(), "confirmed before the queue it depends on was durable"
        assert not first.done.is_set()
        gate.open.set()
        assert second.done.wait(20) and first.done.wait(20)
        assert second.error is None and first.error is None
    finally:
        gate.open.set()
        store.close()
    again = FileStore(tmp_path, file_size=256 * 1024)
    recovered = again.recover()
    assert [q.name for q in recovered.queues] == ["q"]
    again.close()


def test_nothing_behind_in_bindings_costs_no_bindings_sync(tmp_path):
    store = FileStore(tmp_path, file_size=256 * 1024)
    store.recover()
    store.add_queue(QueueRecord(store.next_id(), "q", "q", 0))
    done = threading.Event()
    store.sync(done.set)
    assert done.wait(20)
    batches = store.bindings.stats()["batches"]
    for _ in range(5):
        store.add_message(0, message(store), [])
        done = threading.Event()
        store.sync(done.set)
        assert done.wait(20)
    assert store.bindings.stats()["batches"] == batches
    store.close()


def test_a_failing_disk_fails_the_sync_and_the_store_says_why(tmp_path, monkeypatch):
    store = FileStore(tmp_path, file_size=256 * 1024)
    store.recover()
    gate = Gate(monkeypatch, tmp_path / "journal")
    gate.error = errno.ENOSPC
    try:
        store.add_message(0, message(store), [])
        waiter = Waiter()
        store.sync(waiter.ok, failed=waiter.failed)
        assert waiter.done.wait(20), "the sync hung on a failing disk"
        assert isinstance(waiter.error, OSError) and waiter.error.errno == errno.ENOSPC
        assert store.persist_error() is not None
        gate.error = None
        gate.open.set()
        wait_for(lambda: store.persist_error() is None)
        healed = Waiter()
        store.sync(healed.ok, failed=healed.failed)
        assert healed.done.wait(20) and healed.error is None
    finally:
        gate.error = None
        gate.open.set()
        store.close()
