"""Page files on disk: numbering across restarts, directory fsync, deletion only once durable."""

from __future__ import annotations

import os
import threading
import time

from petrel.core.message import Message
from petrel.storage import paging
from petrel.storage.file_store import FileStore
from petrel.storage.paging import PagePosition, PageStore


def message(i: int, size: int = 1000) -> Message:
    return Message(id=i, address="q", body=b"%06d" % i + b"x" * size, durable=True)


def flush_pages(pages: PageStore) -> None:
    done = threading.Event()
    pages.sync(done.set)
    assert done.wait(10)


def page_files(path, qid):
    return sorted(int(p.stem) for p in (path / "paging" / str(qid)).glob("*.page"))


def test_new_page_files_are_numbered_after_the_recovered_cursor_even_with_no_file_left(tmp_path):
    pages = PageStore(tmp_path, datasync=False)
    pages.recover({7: 6})  # the cursor of queue 7 points into file 6, long deleted
    pages.start()
    assert pages.append(7, 1, message(1)).file == 7
    assert pages.run_start[7] == 7
    flush_pages(pages)
    assert [m.seq for m in pages.read(7, PagePosition(6, 5000), 1 << 20)] == [1]
    pages.stop()


def test_page_file_numbers_only_grow_across_resets_and_restarts(tmp_path):
    pages = PageStore(tmp_path, page_size=4096, datasync=False)
    pages.recover()
    pages.start()
    for i in range(10):
        end = pages.append(3, i, message(i))
    paging.remove(pages.reset(3))
    after_reset = pages.append(3, 10, message(10))
    assert after_reset.file > end.file
    flush_pages(pages)
    pages.stop()
    again = PageStore(tmp_path, page_size=4096, datasync=False)
    again.recover({3: after_reset.file})
    again.start()
    assert again.append(3, 11, message(11)).file == after_reset.file + 1
    again.stop()


def test_a_new_page_file_and_its_directory_are_fsynced_before_the_sync_completes(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(paging, "fsync_dir", synced.append)
    pages = PageStore(tmp_path / "paging", datasync=True)
    pages.recover()
    pages.start()
    pages.append(5, 1, message(1))
    seen_at_callback = []
    done = threading.Event()
    pages.sync(lambda: (seen_at_callback.extend(synced), done.set()))
    assert done.wait(10)
    assert tmp_path / "paging" / "5" in seen_at_callback  # the new file's name
    assert tmp_path / "paging" in seen_at_callback  # the new queue directory's name
    pages.stop()


class HeldCallbacks:
    """A store dispatch that keeps the durability callbacks until the test runs them."""

    def __init__(self) -> None:
        self.held = []
        self.cond = threading.Condition()

    def __call__(self, callbacks) -> None:
        with self.cond:
            self.held.extend(callbacks)
            self.cond.notify_all()

    def durable(self, store) -> None:
        """Wait until everything appended to the message journal is durable, its callbacks held."""
        marker = threading.Event()
        store.messages.sync(marker.set)
        with self.cond:
            assert self.cond.wait_for(lambda: any(getattr(cb, "__self__", None) is marker for cb in self.held), 10)

    def run(self) -> None:
        with self.cond:
            callbacks, self.held = self.held, []
        for cb in callbacks:
            cb()


def test_page_files_are_unlinked_only_once_the_cursor_past_them_is_durable(tmp_path):
    held = HeldCallbacks()
    store = FileStore(tmp_path, dispatch=held, page_size=4096, datasync=False)
    store.recover()
    cursor = store.create_page_cursor(9)
    for i in range(20):
        store.page(9, i, message(i))
    synced = threading.Event()
    store.sync(synced.set)
    deadline = time.monotonic() + 10
    while not synced.is_set() and time.monotonic() < deadline:
        held.run()
    assert synced.is_set()
    files = page_files(tmp_path, 9)
    assert len(files) > 3
    read = store.read_pages(9, PagePosition(0, 0), 1 << 20)
    assert len(read) == 20
    # the cursor moves past the first files in a transaction: they stay until it is durable
    tx = store.begin()
    cursor = store.update_page_cursor(tx, cursor, 9, read[10].position)
    store.commit(tx)
    store.release_pages(9, read[10].position)
    assert store.read_pages(9, read[10].position, 1 << 20)[0].seq == 11
    held.durable(store)
    assert page_files(tmp_path, 9) == files  # written and synced, but the callbacks have not run
    held.run()
    remaining = page_files(tmp_path, 9)
    assert remaining == [f for f in files if f >= read[10].position.file]
    # the end of paging: every file goes, again only once the last cursor is durable
    tx = store.begin()
    cursor = store.update_page_cursor(tx, cursor, 9, read[-1].position)
    store.commit(tx)
    store.release_pages(9, None)
    held.durable(store)
    assert page_files(tmp_path, 9) == remaining
    held.run()
    assert page_files(tmp_path, 9) == []
    # deleting the queue removes its directory once the cursor's deletion is durable
    store.page(9, 21, message(21))
    store.delete_pages(9, cursor)
    held.durable(store)
    assert (tmp_path / "paging" / "9").is_dir()
    held.run()
    assert not (tmp_path / "paging" / "9").exists()
    store.close()


def test_recovery_removes_files_before_the_cursor_and_files_without_a_cursor(tmp_path):
    store = FileStore(tmp_path, page_size=4096, datasync=False)
    store.recover()
    cursor = store.create_page_cursor(4)
    for i in range(20):
        store.page(4, i, message(i))
        store.page(8, i, message(i))  # no cursor: never confirmed
    durable = threading.Event()
    store.sync(durable.set)
    assert durable.wait(10)
    read = store.read_pages(4, PagePosition(0, 0), 1 << 20)
    tx = store.begin()
    store.update_page_cursor(tx, cursor, 4, read[10].position)
    store.commit(tx)
    store.close()  # a crash right after the commit: the files before the cursor are still there
    assert page_files(tmp_path, 4)[0] < read[10].position.file
    again = FileStore(tmp_path, page_size=4096, datasync=False)
    again.recover()
    durable.clear()
    again.messages.sync(durable.set)
    assert durable.wait(10)
    assert page_files(tmp_path, 4)[0] == read[10].position.file
    assert not (tmp_path / "paging" / "8").exists()
    assert [m.seq for m in again.read_pages(4, read[10].position, 1 << 20)] == list(range(11, 20))
    again.close()


def test_a_read_does_not_pass_a_file_whose_last_records_are_still_being_written(tmp_path):
    """A read that found the end of file 1 not yet written went on to file 2, whose records the
    writer had meanwhile written: the cursor then moved past the rest of file 1, lost."""
    pages = PageStore(tmp_path, page_size=4096, datasync=False)
    pages.recover()  # the writer is not started: this test writes the batch itself, in part
    positions = [pages.append(2, i, message(i)) for i in range(6)]
    assert positions[-1].file > positions[0].file
    first_file = positions[0].file
    fds = {}
    for fd, data, _qid in pages._pending:
        if data:
            fds.setdefault(fd, []).append(data)
    # the writer wrote the first record of file 1 and everything of file 2, not yet the rest of file 1
    (fd1, records1), (fd2, records2) = list(fds.items())[:2]
    os.write(fd1, records1[0])
    for data in records2:
        os.write(fd2, data)
    got = pages.read(2, PagePosition(0, 0), 1 << 20)
    assert [m.seq for m in got] == [0]
    assert got[-1].position.file == first_file
    for data in records1[1:]:
        os.write(fd1, data)
    rest = pages.read(2, got[-1].position, 1 << 20)
    assert [m.seq for m in rest] == list(range(1, 1 + len(records1) - 1 + len(records2)))
    for fd in fds:
        os.close(fd)
