"""Batches nobody waits on are written at once and synced with the next batch somebody waits on.

A consumer's deletes are appended with no callback: syncing them on their own doubled the
syncs of a persistent send-and-consume flow.  They are written (a ``kill -9`` keeps them: the
page cache has them) and made durable by the next sync, or by the idle writer within
``lazy_sync_ns``, or by a stop.  A failed sync may drop their pages: they are written again.
"""

from __future__ import annotations

import errno
import os
import threading

from petrel.storage.journal import writer as writer_module

from journal_harness import reload, started, wait_for
from test_journal_failures import Waiter

HOUR_NS = 3600 * 10**9


class Syncs:
    """Counts the writer's fdatasyncs; while ``broken``, one fails after putting back what the
    file held at its last good sync (a failed fdatasync may drop the dirty pages)."""

    def __init__(self, monkeypatch) -> None:
        self.count = 0
        self.failures = 0
        self.broken = threading.Event()
        self.synced: dict[int, bytes] = {}
        real = writer_module._datasync

        def datasync(fd: int) -> None:
            if self.broken.is_set():
                self.failures += 1
                before = self.synced.get(os.fstat(fd).st_ino)
                if before is not None:
                    os.pwrite(fd, before, 0)
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd)
            self.count += 1
            self.synced[os.fstat(fd).st_ino] = os.pread(fd, os.fstat(fd).st_size, 0)

        monkeypatch.setattr(writer_module, "_datasync", datasync)


def lazy_journal(path, lazy_ns: int = HOUR_NS):
    journal, _ = started(path)
    journal._writer.lazy_sync_ns = lazy_ns
    return journal


def written(journal, batches: int) -> None:
    wait_for(lambda: journal._writer.batches >= batches)


def test_a_batch_nobody_waits_on_is_written_and_synced_by_the_next_waiter(tmp_path, monkeypatch):
    syncs = Syncs(monkeypatch)
    journal = lazy_journal(tmp_path)
    for rid in range(1, 4):
        journal.add(rid, 0, b"lazy")
    written(journal, 1)
    assert syncs.count == 0, "a batch nobody waits on was synced on its own"
    assert journal.durable_position < journal.position

    journal.add(4, 0, b"waited")
    waiter = Waiter()
    journal.sync(waiter)
    assert waiter.done.wait(10) and waiter.ok
    assert syncs.count == 1  # one sync for both batches
    assert journal.durable_position == journal.position
    journal.stop()
    assert list(reload(tmp_path).records) == [1, 2, 3, 4]


def test_an_idle_writer_syncs_a_lazy_batch_within_its_bound(tmp_path, monkeypatch):
    syncs = Syncs(monkeypatch)
    journal = lazy_journal(tmp_path, lazy_ns=50_000_000)
    journal.add(1, 0, b"lazy")
    wait_for(lambda: journal.durable_position == journal.position)
    assert syncs.count == 1
    journal.stop()


def test_stop_syncs_a_lazy_batch(tmp_path, monkeypatch):
    syncs = Syncs(monkeypatch)
    journal = lazy_journal(tmp_path)
    journal.add(1, 0, b"lazy")
    written(journal, 1)
    assert syncs.count == 0
    journal.stop()
    assert syncs.count >= 1
    assert list(reload(tmp_path).records) == [1]


def test_a_lazy_batch_across_a_rollover_syncs_the_older_segment_first(tmp_path, monkeypatch):
    syncs = Syncs(monkeypatch)
    journal = lazy_journal(tmp_path)
    for rid in range(1, 20):
        journal.add(rid, 0, b"x" * 2000)  # 16 KiB segments: this crosses into a second one
    written(journal, 1)
    assert len(journal.segments()) >= 2
    assert syncs.count >= 1  # the older segment, before the newer one held anything
    assert journal.durable_position < journal.position  # the newest part waits
    journal.stop()
    assert list(reload(tmp_path).records) == list(range(1, 20))


def test_a_failed_sync_writes_again_the_lazy_batches_it_was_to_cover(tmp_path, monkeypatch):
    syncs = Syncs(monkeypatch)
    journal = lazy_journal(tmp_path)
    journal.add(1, 0, b"synced")
    first = Waiter()
    journal.sync(first)
    assert first.done.wait(10) and first.ok

    for rid in range(2, 6):
        journal.add(rid, 0, b"lazy")
    written(journal, 2)
    syncs.broken.set()
    journal.add(6, 0, b"waited")
    failing = Waiter()
    journal.sync(failing)
    assert failing.done.wait(10) and not failing.ok  # its sync failed: the pages went back
    plain = threading.Event()
    journal.sync(plain.set)
    wait_for(lambda: syncs.failures >= 2)
    syncs.broken.clear()
    assert plain.wait(10), "the writer did not retry once the disk healed"
    journal.stop()
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1, 2, 3, 4, 5, 6], "a lazy batch dropped by a failed sync was lost"
    assert loaded.skipped == []
