"""FileJournal.delete_many: DELETE records placed, encoded and handed to the writer in runs (a
migration removing a confirmed batch), the same bytes `delete` writes one by one: read back after
restarts, across segment ends and syncs, after a torn tail, and accounted for compaction."""

import os
import threading

import pytest

from petrel.storage.journal import JournalError, read_segments
from petrel.storage.journal.records import DELETE, encode_data, encode_delete_run

from journal_harness import reload, started


def synced(journal):
    done = threading.Event()
    journal.sync(done.set)
    assert done.wait(10)


def layout(path):
    return [(info.id, info.path, list(recs)) for info, recs in read_segments(path, "petrel-data", "pj")]


def test_a_run_is_the_bytes_of_deletes_one_by_one():
    ids = [1, 2, 300, 2**40 + 7, 5]
    out = bytearray()
    encode_delete_run(9, ids, out)
    assert bytes(out) == b"".join(encode_data(DELETE, 9, 0, rid, b"") for rid in ids)


def test_runs_across_segment_ends_and_syncs_survive_a_restart(tmp_path):
    journal, _ = started(tmp_path)
    for rid in range(1, 3001):
        journal.add(rid, 1, b"m")
    synced(journal)
    first = max(info.id for info in journal.segments())
    journal.delete_many(list(range(1, 1201)))  # ~33 KiB of DELETEs in 16 KiB segments
    synced(journal)  # the next run starts with a MARK
    journal.delete_many([rid for rid in range(1201, 2401) if rid % 3])
    journal.delete(2999)
    journal.add(5000, 2, b"after")
    journal.stop()
    assert layout(tmp_path)[-1][0] >= first + 2  # the runs went on into new segments
    kept = [rid for rid in range(1201, 2401) if rid % 3 == 0] + list(range(2401, 2999)) + [3000, 5000]
    assert list(reload(tmp_path).records) == kept


def test_an_unknown_id_is_refused_before_anything_is_written(tmp_path):
    journal, _ = started(tmp_path)
    journal.add(5, 1, b"five")
    journal.add(6, 1, b"six")
    with pytest.raises(JournalError):
        journal.delete_many([5, 7])
    journal.delete_many([])
    journal.stop()
    assert list(reload(tmp_path).records) == [5, 6]


def test_a_torn_run_keeps_what_its_lost_deletes_named(tmp_path):
    journal, _ = started(tmp_path)
    for rid in range(1, 101):
        journal.add(rid, 1, b"x" * 100)
    synced(journal)
    journal.delete_many(list(range(1, 51)))
    synced(journal)
    journal._final_mark = lambda: None  # a crash after the sync: no closing MARK vouches for the tail
    journal.stop()
    seg, path, recs = layout(tmp_path)[-1]
    deletes = [off for off, rec in recs if rec.type == DELETE]
    assert len(deletes) == 50
    os.truncate(path, deletes[40] + 10)  # torn inside the 41st DELETE
    loaded = reload(tmp_path)
    assert list(loaded.records) == list(range(41, 101))
    journal, _ = started(tmp_path)  # appending resumes where the torn one was
    journal.delete_many(list(range(41, 61)))
    journal.stop()
    assert list(reload(tmp_path).records) == list(range(61, 101))


def test_the_ledger_frees_what_runs_delete_and_compaction_keeps_the_rest(tmp_path):
    journal, _ = started(tmp_path, pool_files=2, compact_percentage=0)
    for rid in range(1, 301):
        journal.add(rid, 1, bytes([rid % 251]) * 1000)  # ~19 segments of 16 KiB
    synced(journal)
    records = journal.stats()["records"]
    journal.delete_many(list(range(1, 281)))
    for rid in range(90_000, 90_040):
        journal.add(rid, 0, b"z" * 1000)
    synced(journal)
    assert sum(info.live for info in journal.segments()) == 60
    assert journal.stats()["records"] >= records + 280 + 40  # a run counts each of its records
    journal.compact()
    synced(journal)
    journal.stop()
    assert list(reload(tmp_path).records) == list(range(281, 301)) + list(range(90_000, 90_040))
