"""A journal whose disk fails: waiters hear the error, nothing hangs, writes resume once it heals.

The failures are injected at the system calls the writer makes (``fdatasync`` through the
writer module's ``_datasync``, ``pwrite`` through ``os.pwrite``), raising ``OSError`` as a
failing disk (EIO) or a full one (ENOSPC) would.
"""

from __future__ import annotations

import errno
import os
import threading

import pytest

from petrel.storage.journal import FileJournal
from petrel.storage.journal import writer as writer_module

from journal_harness import reload, run_all, wait_for

SIZE = 64 * 1024


class Waiter:
    """A sync callback that can hear of a failure (has ``fail``)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.ok = False

    def __call__(self) -> None:
        self.ok = True
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


class Disk:
    """Makes ``fdatasync`` (and optionally ``pwrite``) fail while ``broken`` is set."""

    def __init__(self, monkeypatch, err: int = errno.EIO, partial_writes: bool = False) -> None:
        self.broken = threading.Event()
        self.err = err
        self.failures = 0
        real_sync = writer_module._datasync
        real_pwrite = os.pwrite

        def datasync(fd):
            if self.broken.is_set():
                self.failures += 1
                raise OSError(self.err, os.strerror(self.err))
            real_sync(fd)

        def pwrite(fd, data, offset):
            if self.broken.is_set() and partial_writes and threading.current_thread().name.startswith("petrel"):
                view = memoryview(data)
                half = len(view) // 2
                if half:
                    real_pwrite(fd, view[:half], offset)  # a partial write, then the error
                self.failures += 1
                raise OSError(self.err, os.strerror(self.err))
            return real_pwrite(fd, data, offset)

        monkeypatch.setattr(writer_module, "_datasync", datasync)
        monkeypatch.setattr(os, "pwrite", pwrite)


def started(path, **options):
    journal = FileJournal(path, file_size=SIZE, **options)
    journal.load()
    journal.start(run_all)
    return journal


@pytest.mark.parametrize("err,partial", [(errno.EIO, False), (errno.ENOSPC, True)])
def test_failed_write_fails_waiters_then_heals_without_losing_or_doubling(tmp_path, monkeypatch, err, partial):
    disk = Disk(monkeypatch, err, partial_writes=partial)
    journal = started(tmp_path)
    journal.add(1, 0, b"before")
    first = Waiter()
    journal.sync(first)
    assert first.done.wait(10) and first.ok

    disk.broken.set()
    for rid in range(2, 40):
        journal.add(rid, 0, b"x" * 2000)  # crosses into a new segment on the way
    failing = Waiter()
    journal.sync(failing)
    assert failing.done.wait(10), "a waiter hung on a failed write"
    assert not failing.ok and isinstance(failing.error, OSError) and failing.error.errno == err
    assert journal.failure is not None
    later = Waiter()  # syncing while the failure lasts fails at once
    journal.sync(later)
    assert later.done.wait(10) and not later.ok and later.error.errno == err
    plain = threading.Event()  # a callback without fail waits for the disk
    journal.sync(plain.set)
    journal.add(40, 0, b"during")  # appends are still taken: they wait with the rest
    wait_for(lambda: disk.failures >= 3)  # the writer keeps retrying
    assert not plain.is_set()

    disk.broken.clear()
    assert plain.wait(10), "the writer did not retry once the disk healed"
    wait_for(lambda: journal.failure is None)
    healed = Waiter()
    journal.sync(healed)
    assert healed.done.wait(10) and healed.ok
    assert len(journal.segments()) >= 2  # the retried batch rolled over
    journal.stop()

    loaded = reload(tmp_path, file_size=SIZE)
    assert list(loaded.records) == list(range(1, 41))
    assert loaded.records[1].body == b"before" and loaded.records[40].body == b"during"
    assert loaded.skipped == []


def test_stop_while_the_disk_is_broken_fails_waiters_and_does_not_hang(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    journal = started(tmp_path)
    disk.broken.set()
    journal.add(1, 0, b"never")
    waiter = Waiter()
    journal.sync(waiter)
    assert waiter.done.wait(10) and not waiter.ok
    last = Waiter()
    journal.sync(last)
    stopper = threading.Thread(target=journal.stop)
    stopper.start()
    stopper.join(20)
    assert not stopper.is_alive(), "stop hung on a broken disk"
    assert last.done.is_set() and not last.ok


def test_a_fatal_writer_error_fails_every_waiter(tmp_path, monkeypatch):
    journal = started(tmp_path)

    def explode(batch):
        raise RuntimeError("replica gone")

    journal.before_durable = explode
    journal.add(1, 0, b"x")
    waiter = Waiter()
    journal.sync(waiter)
    assert waiter.done.wait(10) and not waiter.ok and "replica gone" in str(waiter.error)
    wait_for(lambda: journal._writer.dead)
    again = Waiter()
    journal.sync(again)
    assert again.done.wait(10) and not again.ok
    journal.stop()


def test_page_writer_rewinds_a_partial_write_fails_waiters_and_heals(tmp_path, monkeypatch):
    from petrel.core.message import Message
    from petrel.storage.paging import PagePosition, PageStore

    broken = threading.Event()
    real_write = os.write

    def write(fd, data):
        if broken.is_set() and threading.current_thread().name == "petrel-paging":
            real_write(fd, bytes(data)[: len(data) // 2])  # half a record lands, then ENOSPC
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    pages = PageStore(tmp_path, datasync=True)
    pages.recover()
    pages.start()
    try:
        pages.append(4, 1, Message(id=1, address="q", body=b"a" * 3000, durable=True))
        first = Waiter()
        pages.sync(first)
        assert first.done.wait(10) and first.ok
        broken.set()
        for seq in (2, 3):
            pages.append(4, seq, Message(id=seq, address="q", body=b"b" * 3000, durable=True))
        failing = Waiter()
        pages.sync(failing)
        assert failing.done.wait(10), "a page sync hung on a failed write"
        assert failing.error.errno == errno.ENOSPC and pages.failure is not None
        plain = threading.Event()
        pages.sync(plain.set)
        broken.clear()
        assert plain.wait(10)
        wait_for(lambda: pages.failure is None)
        got = pages.read(4, PagePosition(0, 0), 1 << 20)
        assert [m.seq for m in got] == [1, 2, 3]  # no torn record between them, none twice
    finally:
        broken.clear()
        pages.stop()
