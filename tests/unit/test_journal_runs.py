"""FileJournal.add_tx_many: the records of one transaction placed and handed to the writer in runs,
across segment ends and the MARKs a sync brings, read back as `add_tx` one by one would be."""

import threading

import pytest

from petrel.storage.journal import JournalError

from journal_harness import reload, started


def records(first, count, size=1000):
    return [(rid, bytes([rid % 251]) * size) for rid in range(first, first + count)]


def synced(journal):
    done = threading.Event()
    journal.sync(done.set)
    assert done.wait(10)


def test_a_run_larger_than_a_segment_is_split_where_segments_end(tmp_path):
    journal, _ = started(tmp_path)
    many = records(1, 60)  # about 60 KiB in 16 KiB segments
    journal.add(1000, 2, b"before")
    journal.add_tx_many(7, 3, many)
    journal.add_tx(7, 2000, 4, b"one more")
    journal.commit(7)
    synced(journal)
    assert len(journal.segments()) >= 4
    journal.stop()
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1000] + [rid for rid, _ in many] + [2000]
    assert all(loaded.records[rid].body == body and loaded.records[rid].user_type == 3 for rid, body in many)


def test_runs_between_syncs_and_a_rollback(tmp_path):
    journal, _ = started(tmp_path)
    for n in range(5):
        journal.add_tx_many(10 + n, 1, records(100 * n + 1, 7))
        synced(journal)  # the next placement starts with a MARK of what this sync made durable
        journal.commit(10 + n)
    journal.add_tx_many(99, 1, records(900, 20))
    journal.rollback(99)
    journal.stop()
    loaded = reload(tmp_path)
    assert sorted(loaded.records) == sorted(rid for n in range(5) for rid, _ in records(100 * n + 1, 7))
    assert loaded.rolled_back == []


def test_an_id_already_known_is_refused_before_anything_is_written(tmp_path):
    journal, _ = started(tmp_path)
    journal.add(5, 1, b"five")
    with pytest.raises(JournalError):
        journal.add_tx_many(3, 1, [(4, b"four"), (5, b"again")])
    journal.commit(3)  # nothing of it
    journal.stop()
    assert list(reload(tmp_path).records) == [5]


def test_the_ledger_counts_the_records_of_runs_live_until_deleted(tmp_path):
    journal, _ = started(tmp_path, pool_files=2, compact_percentage=0)
    for n in range(10):  # ten transactions of 30 x 1,000 bytes: ~19 segments of 16 KiB
        journal.add_tx_many(n + 1, 1, records(1000 * n + 1, 30))
        journal.commit(n + 1)
    journal.add_tx_many(99, 1, records(50_000, 30))  # rolled back: pins nothing afterwards
    journal.rollback(99)
    synced(journal)
    assert sum(info.live for info in journal.segments()) == 300  # the rolled back run counts no more
    stats = journal.stats()
    assert stats["records"] >= 330  # a run counts its records
    for n in range(10):
        for rid, _ in records(1000 * n + 1, 30):
            journal.delete(rid)
    for rid in range(90_000, 90_040):
        journal.add(rid, 0, b"z" * 1000)
    synced(journal)
    assert sum(info.live for info in journal.segments()) == 40
    journal.stop()
    assert list(reload(tmp_path).records) == list(range(90_000, 90_040))
