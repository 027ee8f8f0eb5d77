"""FileJournal: appends, group commit, callbacks, persistence across stop and load."""

import functools
import threading
import time

import pytest

from petrel.storage.journal import FileJournal, JournalError, RecordType, read_segments
from petrel.storage.journal import writer as writer_module

import journal_harness
from journal_harness import run_all, wait_for

SIZE = 64 * 1024  # larger segments than the other journal tests use
started = functools.partial(journal_harness.started, file_size=SIZE)
reload = functools.partial(journal_harness.reload, file_size=SIZE)


def state(loaded):
    return {rid: (r.user_type, r.body, list(r.updates)) for rid, r in loaded.records.items()}


def test_load_creates_the_directory_and_an_empty_journal(tmp_path):
    path = tmp_path / "a" / "journal"
    journal, loaded = started(path)
    journal.stop()
    assert path.is_dir()
    assert loaded.records == {} and loaded.rolled_back == [] and loaded.skipped == [] and loaded.max_id == 0
    assert (path / "petrel-data-1.pj").stat().st_size == SIZE
    assert len(list(path.iterdir())) >= 2  # min_files: the first segment and a spare


def test_records_updates_and_deletes_survive_a_restart(tmp_path):
    journal, _ = started(tmp_path)
    journal.add(10, 1, b"ten")
    journal.add(3, 2, b"three")
    journal.update(10, 5, b"ten-a")
    journal.add(7, 1, b"seven")
    journal.update(10, 6, b"ten-b")
    journal.update(3, 5, b"three-a")
    journal.delete(7)
    journal.add(50, 9, b"")
    journal.stop()
    loaded = reload(tmp_path)
    assert list(loaded.records) == [10, 3, 50]
    assert state(loaded) == {
        10: (1, b"ten", [(5, b"ten-a"), (6, b"ten-b")]),
        3: (2, b"three", [(5, b"three-a")]),
        50: (9, b"", []),
    }
    assert loaded.max_id == 50


def test_max_id_counts_deleted_and_rolled_back_records(tmp_path):
    journal, _ = started(tmp_path)
    journal.add(900, 0, b"x")
    journal.delete(900)
    journal.add_tx(1, 1200, 0, b"y")
    journal.rollback(1)
    journal.add(5, 0, b"z")
    journal.stop()
    loaded = reload(tmp_path)
    assert list(loaded.records) == [5]
    assert loaded.max_id == 1200


def test_transactions_apply_at_commit_in_order(tmp_path):
    journal, _ = started(tmp_path)
    journal.add(1, 1, b"one")
    journal.add(2, 1, b"two")
    journal.add_tx(77, 3, 1, b"three")
    journal.update_tx(77, 1, 4, b"one-acked")
    journal.delete_tx(77, 2)
    journal.add(4, 1, b"four")  # outside the tx, before its commit
    journal.add_tx(78, 5, 1, b"five")  # rolled back
    journal.delete_tx(78, 1)
    journal.add_tx(79, 6, 1, b"six")  # added and deleted in one tx
    journal.delete_tx(79, 6)
    journal.commit(77)
    journal.rollback(78)
    journal.commit(79)
    journal.stop()
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1, 4, 3]
    assert state(loaded) == {
        1: (1, b"one", [(4, b"one-acked")]),
        4: (1, b"four", []),
        3: (1, b"three", []),
    }
    assert loaded.rolled_back == []


def test_prepared_then_committed_transaction_applies(tmp_path):
    journal, _ = started(tmp_path)
    journal.add_tx(5, 1, 0, b"a")
    journal.prepare(5, b"xid-5")
    journal.commit(5)
    journal.stop()
    assert list(reload(tmp_path).records) == [1]


def test_misuse_raises_journal_error(tmp_path):
    journal, _ = started(tmp_path)
    journal.add(1, 0, b"")
    with pytest.raises(JournalError):
        journal.delete(2)
    with pytest.raises(JournalError):
        journal.add(1, 0, b"again")
    with pytest.raises(JournalError):
        journal.delete_tx(9, 2)
    with pytest.raises(JournalError):
        journal.add(3, 0, b"x" * SIZE)
    journal.delete(1)
    with pytest.raises(JournalError):
        journal.delete(1)
    journal.stop()
    with pytest.raises(JournalError):
        journal.add(4, 0, b"")
    unloaded = FileJournal(tmp_path / "other", file_size=SIZE)
    with pytest.raises(JournalError):
        unloaded.add(1, 0, b"")


def test_callbacks_fire_in_order_after_the_data_is_on_disk(tmp_path):
    journal, _ = started(tmp_path, file_size=8 * 1024)
    seen = []
    problems = []

    def check(rid):
        def done():
            on_disk = {rec.id for _info, recs in read_segments(tmp_path, "petrel-data", "pj")
                       for _off, rec in recs if rec.type == RecordType.ADD}
            if rid not in on_disk:
                problems.append(rid)
            seen.append(rid)
        return done

    for rid in range(1, 41):
        journal.add(rid, 0, b"p" * 300, done=check(rid))
    wait_for(lambda: len(seen) == 40)
    journal.stop()
    assert seen == list(range(1, 41))
    assert problems == []


def test_group_commit_batches_appends_made_during_a_slow_sync(tmp_path, monkeypatch):
    entered = threading.Event()
    release = threading.Event()
    real = writer_module._datasync

    def slow_sync(fd):
        entered.set()
        assert release.wait(10)
        real(fd)

    monkeypatch.setattr(writer_module, "_datasync", slow_sync)
    batches = []

    def on_batch(callbacks):
        batches.append(len(callbacks))
        run_all(callbacks)

    journal = FileJournal(tmp_path, file_size=1 << 20)
    journal.load()
    journal.start(on_batch)
    fired = []
    journal.add(0, 0, b"first", done=lambda: fired.append(0))
    assert entered.wait(10)  # the writer is inside the first sync
    for rid in range(1, 1001):
        journal.add(rid, 0, b"m" * 100, done=lambda rid=rid: fired.append(rid))
    assert fired == []  # nothing is durable yet
    release.set()
    wait_for(lambda: len(fired) == 1001)
    journal.stop()
    assert fired == list(range(1001))
    assert len(batches) <= 3
    assert sum(batches) == 1001
    stats = journal.stats()
    assert stats["batches"] <= 3 and stats["max_batch"] >= 900
    assert len(reload(tmp_path, file_size=1 << 20).records) == 1001


def test_sync_with_nothing_pending_still_goes_through_on_batch_durable(tmp_path):
    calls = []
    journal = FileJournal(tmp_path, file_size=SIZE)
    journal.load()

    def on_batch(callbacks):
        calls.append(len(callbacks))
        run_all(callbacks)

    journal.start(on_batch)
    journal.add(1, 0, b"x")
    synced = threading.Event()
    journal.sync(synced.set)
    assert synced.wait(10)
    written = journal.stats()["bytes"]
    again = threading.Event()
    journal.sync(again.set)
    assert again.wait(10)
    assert journal.stats()["bytes"] == written
    journal.stop()
    assert calls and calls[-1] == 1


def test_stop_flushes_pending_callbacks(tmp_path):
    journal, _ = started(tmp_path)
    fired = []
    for rid in range(100):
        journal.add(rid, 0, b"x" * 50, done=lambda rid=rid: fired.append(rid))
    journal.stop()
    assert fired == list(range(100))


def test_appends_before_start_are_written_once_started(tmp_path):
    journal = FileJournal(tmp_path, file_size=SIZE)
    journal.load()
    fired = []
    journal.add(1, 0, b"early", done=lambda: fired.append(1))
    journal.start(run_all)
    wait_for(lambda: fired == [1])
    journal.stop()
    assert list(reload(tmp_path).records) == [1]


def test_before_durable_sees_each_batch_before_its_callbacks(tmp_path):
    journal = FileJournal(tmp_path, file_size=8 * 1024)
    journal.load()
    events = []
    shipped = []

    def replicate(batch):
        shipped.extend(batch)
        events.append(("replicated", len(batch)))

    journal.before_durable = replicate
    journal.start(lambda callbacks: (events.append(("confirmed", len(callbacks))), run_all(callbacks)))
    done = []
    for rid in range(1, 61):
        journal.add(rid, 1, bytes([rid]) * 200, done=lambda rid=rid: done.append(rid))
    wait_for(lambda: len(done) == 60)
    journal.stop()
    assert events[0][0] == "replicated"
    for first, second in zip(events, events[1:]):
        assert not (first[0] == "confirmed" and second[0] == "confirmed")
    # the shipped bytes are exactly what is in the files, and decode to the records
    seen = []
    for seg, off, data in shipped:
        with open(tmp_path / f"petrel-data-{seg}.pj", "rb") as f:
            f.seek(off)
            assert f.read(len(data)) == data
    for info, recs in read_segments(tmp_path, "petrel-data", "pj"):
        seen += [rec.id for _off, rec in recs]
    assert seen == list(range(1, 61))


def test_buffer_timeout_rate_limits_flushes(tmp_path):
    journal, _ = started(tmp_path, buffer_timeout_ns=300_000_000)
    first = threading.Event()
    t0 = time.monotonic()
    journal.add(0, 0, b"x", done=first.set)
    assert first.wait(10)
    fired = []
    for rid in range(1, 200):
        journal.add(rid, 0, b"x", done=lambda rid=rid: fired.append((rid, time.monotonic())))
    wait_for(lambda: len(fired) == 199)
    journal.stop()
    assert [rid for rid, _ in fired] == list(range(1, 200))
    assert fired[0][1] - t0 >= 0.29  # not flushed before the timeout since the first flush
    assert journal.stats()["batches"] <= 3


def test_no_sync_calls_without_datasync(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(writer_module, "_datasync", lambda fd: calls.append(fd))
    journal, _ = started(tmp_path, datasync=False)
    for rid in range(300):
        journal.add(rid, 0, b"x" * 500)
    journal.stop()
    assert calls == [] and journal.stats()["syncs"] == 0
    assert len(reload(tmp_path).records) == 300


def test_segments_stats_and_read_segments_agree(tmp_path):
    journal, _ = started(tmp_path, file_size=16 * 1024)
    for rid in range(1, 101):
        journal.add(rid, 0, b"s" * 400)
    for rid in range(1, 101, 2):
        journal.delete(rid)
    journal.stop()
    segments = journal.segments()
    assert [s.id for s in segments] == sorted(s.id for s in segments)
    assert sum(s.live for s in segments) == 50
    stats = journal.stats()
    assert stats["records"] == 150 and stats["segments"] == len(segments)
    assert 0 < stats["live_ratio"] < 1
    offline = list(read_segments(tmp_path, "petrel-data", "pj"))
    assert [info.id for info, _ in offline] == [s.id for s in segments]
    total = 0
    for (info, recs), seg in zip(offline, segments):
        recs = list(recs)
        total += len(recs)
        assert info.used == seg.used
        assert all(off >= 16 for off, _ in recs)
    assert total == 150
