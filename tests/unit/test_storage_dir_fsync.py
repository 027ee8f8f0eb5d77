"""New files and directories are durable by name: their directory is fsynced before anything
relies on them (a power loss must not lose ``server.lock`` or a journal directory)."""

from __future__ import annotations

import os

from petrel.storage.journal import FileJournal
from petrel.storage.server_lock import ServerLock


def record_dir_fsyncs(monkeypatch) -> list[str]:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isdir(path):
            synced.append(path)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_server_lock_and_the_directories_it_creates_are_fsynced(tmp_path, monkeypatch):
    synced = record_dir_fsyncs(monkeypatch)
    data = tmp_path / "a" / "data"
    lock = ServerLock(data)
    node = lock.acquire()
    assert str(tmp_path) in synced  # the entry of the new "a"
    assert str(tmp_path / "a") in synced  # the entry of the new "data"
    assert synced.count(str(data)) >= 1 and synced[-1] == str(data)  # server.lock's entry, last
    lock.release()
    synced.clear()
    again = ServerLock(data)
    assert again.acquire() == node
    assert synced == []  # nothing new: nothing to sync
    again.release()


def test_a_new_journal_directory_and_its_segment_files_are_fsynced(tmp_path, monkeypatch):
    synced = record_dir_fsyncs(monkeypatch)
    path = tmp_path / "data" / "journal"
    journal = FileJournal(path, file_size=64 * 1024)
    journal.load()
    assert str(tmp_path) in synced and str(tmp_path / "data") in synced
    assert str(path) in synced  # the first segment renamed into place
    journal.stop()
