"""Compaction: live data kept exactly, and an interrupted compaction recovers."""

import pytest

from petrel.storage.journal import FileJournal

from journal_harness import SIZE, reload, started


def state(loaded):
    return [(rid, r.user_type, r.body, list(r.updates)) for rid, r in loaded.records.items()]


def names(path):
    return sorted(p.name for p in path.iterdir())


def build(journal, rounds=12, keep_size=300):
    """Each round leaves one survivor among many deleted records; some get updates,
    one arrives through a transaction committed rounds later."""
    rid = 1000
    journal.add_tx(77, 500, 3, b"tx-record" * 20)
    for r in range(rounds):
        journal.add(r + 1, r % 4, bytes([r]) * keep_size)
        if r % 3 == 0:
            journal.update(r + 1, 9, b"upd-%d" % r)
        for _ in range(30):
            rid += 1
            journal.add(rid, 0, b"g" * 400)
            journal.delete(rid)
        if r == 4:
            journal.commit(77)
    journal.update(1, 8, b"late update")  # in the current segment, outside what gets compacted


def test_compaction_keeps_live_data_exactly(tmp_path):
    journal, _ = started(tmp_path, compact_percentage=0)
    build(journal)
    journal.stop()
    before = state(reload(tmp_path, compact_percentage=0))
    assert [r[0] for r in before] == [1, 2, 3, 4, 5, 500, 6, 7, 8, 9, 10, 11, 12]
    journal, _ = started(tmp_path, compact_percentage=0)
    segments_before = len(journal.segments())
    replaced = journal.compact()
    assert replaced >= 5
    segs = journal.segments()
    assert len(segs) < segments_before
    current = journal.position[0]
    assert all(s.id <= current for s in segs) and segs[-1].id == current
    journal.add(5000, 0, b"after compaction")
    journal.update(2, 7, b"after compaction")
    journal.stop()
    after = state(reload(tmp_path, compact_percentage=0))
    expected = [(rid, ut, body, ups + ([(7, b"after compaction")] if rid == 2 else []))
                for rid, ut, body, ups in before] + [(5000, 0, b"after compaction", [])]
    assert after == expected
    assert not [n for n in names(tmp_path) if n.endswith((".cmp", ".ctr", ".tmp"))]


def test_record_order_follows_commits_across_compaction(tmp_path):
    journal, _ = started(tmp_path, compact_percentage=0)
    build(journal)
    journal.stop()
    order = [r[0] for r in state(reload(tmp_path))]
    assert order.index(500) == order.index(5) + 1  # it came in with the commit after round 4
    journal, _ = started(tmp_path, compact_percentage=0)
    assert journal.compact() > 0
    journal.stop()
    assert [r[0] for r in state(reload(tmp_path))] == order


def test_compaction_runs_by_itself_past_the_thresholds(tmp_path):
    journal, _ = started(tmp_path, compact_min_files=3, compact_percentage=30)
    build(journal, rounds=20)
    journal.stop()
    assert journal.stats()["compactions"] >= 1
    loaded = reload(tmp_path)
    assert sorted(loaded.records) == list(range(1, 21)) + [500]


def test_an_open_transaction_is_not_broken_by_compaction(tmp_path):
    journal, _ = started(tmp_path, compact_percentage=0)
    journal.add(1, 0, b"early")
    journal.add_tx(9, 2, 0, b"open while compacting")
    for rid in range(100, 400):
        journal.add(rid, 0, b"g" * 400)
        journal.delete(rid)
    journal.compact()
    journal.update_tx(9, 1, 4, b"in tx")
    journal.commit(9)
    journal.stop()
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1, 2]
    assert loaded.records[1].updates == [(4, b"in tx")]


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", [
    "compacted files written", "control file written", "renamed 1", "renamed 2", "dropped 1", "dropped 3",
])
def test_interrupted_compaction_recovers_to_the_same_state(tmp_path, step):
    journal, _ = started(tmp_path, compact_percentage=0)
    build(journal, rounds=14, keep_size=3000)
    journal.stop()
    expected = state(reload(tmp_path, compact_percentage=0))
    journal = FileJournal(tmp_path, file_size=SIZE, compact_percentage=0)
    journal.load()
    reached = []

    def checkpoint(name):
        reached.append(name)
        if name == step:
            raise Crash(name)

    journal._writer.checkpoint = checkpoint
    with pytest.raises(Crash):
        journal.compact()
    journal._writer.close()  # the process dies here
    assert reached[-1] == step
    assert "journal-rename-control.ctr" in names(tmp_path) or step == "compacted files written"
    assert state(reload(tmp_path, compact_percentage=0)) == expected
    assert not [n for n in names(tmp_path) if n.endswith((".cmp", ".ctr", ".tmp"))]
    # and the journal carries on: more writes, another compaction
    journal, _ = started(tmp_path, compact_percentage=0)
    journal.add(9999, 0, b"later")
    journal.compact()
    journal.stop()
    assert state(reload(tmp_path)) == expected + [(9999, 0, b"later", [])]
