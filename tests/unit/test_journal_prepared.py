"""Prepared transactions kept across loads (``keep_prepared``, what XA needs): found open,
with their records and PREPARE data, finished later by a COMMIT or ROLLBACK that a next
load honours; the PREPARE pins its segment against reclaim and compaction."""

from __future__ import annotations

from journal_harness import reload, started, wait_for

from petrel.storage.journal import RecordType


def synced(journal) -> None:
    done = []
    journal.sync(lambda: done.append(1))
    wait_for(lambda: done)


def prepare_one(path) -> None:
    journal, _ = started(path, keep_prepared=True)
    journal.add(1, 1, b"committed before")
    journal.add_tx(7, 2, 1, b"sent in the branch")
    journal.update_tx(7, 1, 2, b"acked in the branch")
    journal.prepare(7, b"xid-7")
    synced(journal)
    journal.stop()


def test_a_prepared_transaction_survives_loads_and_its_commit_applies(tmp_path):
    prepare_one(tmp_path)
    for _ in range(2):  # a load that does not finish it keeps it as it was
        loaded = reload(tmp_path, keep_prepared=True)
        assert loaded.rolled_back == [] and list(loaded.records) == [1]
        assert loaded.records[1].updates == []
        (tx,) = loaded.prepared
        assert (tx.tx_id, tx.data) == (7, b"xid-7")
        assert [(code, rid, body) for code, rid, _ut, body in tx.records] == [
            (RecordType.ADD_TX, 2, b"sent in the branch"), (RecordType.UPDATE_TX, 1, b"acked in the branch")]
    journal, loaded = started(tmp_path, keep_prepared=True)
    assert [tx.tx_id for tx in loaded.prepared] == [7]
    journal.commit(7)
    journal.delete(2)  # the committed add is known to the appender now
    synced(journal)
    journal.stop()
    loaded = reload(tmp_path, keep_prepared=True)
    assert loaded.prepared == [] and loaded.rolled_back == []
    assert list(loaded.records) == [1] and loaded.records[1].updates == [(2, b"acked in the branch")]


def test_a_prepared_transaction_rolled_back_after_a_load_is_gone(tmp_path):
    prepare_one(tmp_path)
    journal, loaded = started(tmp_path, keep_prepared=True)
    journal.rollback(7)
    synced(journal)
    journal.stop()
    loaded = reload(tmp_path, keep_prepared=True)
    assert loaded.prepared == [] and list(loaded.records) == [1] and loaded.records[1].updates == []


def test_without_keep_prepared_a_prepared_transaction_rolls_back(tmp_path):
    prepare_one(tmp_path)
    loaded = reload(tmp_path)
    assert loaded.prepared == [] and loaded.rolled_back == [7]
    assert reload(tmp_path, keep_prepared=True).prepared == []


def test_the_prepare_pins_its_segment_against_reclaim_and_compaction(tmp_path):
    """A branch with no records of its own (only its PREPARE) in an old segment: the segments
    around it empty out and are compacted, and a load still finds it prepared."""
    journal, _ = started(tmp_path, keep_prepared=True, pool_files=2, compact_percentage=0)
    journal.prepare(9, b"lonely")
    for rid in range(1, 201):  # ~13 segments of 16 KiB, all deleted again
        journal.add(rid, 1, b"x" * 1000)
    synced(journal)
    for rid in range(1, 201):
        journal.delete(rid)
    synced(journal)
    journal.compact()
    synced(journal)
    journal.stop()
    loaded = reload(tmp_path, keep_prepared=True)
    assert [(tx.tx_id, tx.data) for tx in loaded.prepared] == [(9, b"lonely")]
    assert loaded.records == {}
