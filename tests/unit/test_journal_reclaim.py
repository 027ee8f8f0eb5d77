"""Rollover, reclaim and the pool of free files."""

from journal_harness import reload, started, wait_for


def files(path):
    names = [p.name for p in path.iterdir()]
    data = [n for n in names if n.startswith("petrel-data-") and n[12:-3].isdigit()]
    free = [n for n in names if n.startswith("petrel-data-free-")]
    return data, free


def test_min_files_are_there_after_load(tmp_path):
    journal, _ = started(tmp_path, min_files=4)
    wait_for(lambda: sum(map(len, files(tmp_path))) >= 4)
    journal.stop()
    data, free = files(tmp_path)
    assert len(data) == 1 and len(data) + len(free) >= 4


def test_steady_add_delete_load_keeps_the_file_count_bounded(tmp_path):
    journal, _ = started(tmp_path, pool_files=3, compact_percentage=0)
    window = 10
    counts = []
    fired = []
    for rid in range(1, 2001):
        journal.add(rid, 1, rid.to_bytes(4, "little") * 100, done=lambda: fired.append(1))
        if rid > window:
            journal.delete(rid - window)
        if rid % 100 == 0:
            wait_for(lambda: len(fired) == rid)
            data, free = files(tmp_path)
            counts.append(len(data) + len(free))
    journal.stop()
    stats = journal.stats()
    assert stats["reclaimed"] > 50  # 2000 records of ~430 bytes went through ~55 segments
    assert stats["files_reused"] > 40 and stats["files_created"] <= 8
    assert max(counts) <= 8
    data, free = files(tmp_path)
    assert len(free) <= 3
    loaded = reload(tmp_path)
    assert list(loaded.records) == list(range(1991, 2001))
    assert loaded.records[1995].body == (1995).to_bytes(4, "little") * 100


def test_free_files_above_pool_files_are_deleted(tmp_path):
    journal, _ = started(tmp_path, pool_files=2, compact_percentage=0)
    for rid in range(1, 301):
        journal.add(rid, 0, b"x" * 400)
    journal.stop()
    journal, _ = started(tmp_path, pool_files=2, compact_percentage=0)
    for rid in range(1, 301):
        journal.delete(rid)
    journal.add(1000, 0, b"y" * 8000)
    journal.add(1001, 0, b"y" * 8000)  # move on to a new segment so the old ones can all go
    journal.stop()
    data, free = files(tmp_path)
    assert len(free) <= 2 and len(data) <= 3
    assert list(reload(tmp_path).records) == [1000, 1001]


def test_a_long_lived_record_keeps_its_segment_and_needed_deletes(tmp_path):
    journal, _ = started(tmp_path, compact_percentage=0)
    journal.add(1, 0, b"old" * 10)
    for rid in range(2, 400):
        journal.add(rid, 0, b"z" * 300)
        journal.delete(rid)
    journal.stop()
    segs = journal.segments()
    assert segs[0].live == 1  # the first segment stays for record 1
    assert len(segs) <= 4  # everything between went
    assert list(reload(tmp_path).records) == [1]
    journal, _ = started(tmp_path, compact_percentage=0)
    journal.delete(1)
    for rid in range(400, 460):
        journal.add(rid, 0, b"z" * 300)
        journal.delete(rid)
    journal.stop()
    assert reload(tmp_path).records == {}


def test_transaction_records_survive_reclaim_of_their_older_segments(tmp_path):
    journal, _ = started(tmp_path, compact_percentage=0)
    journal.add_tx(5, 1, 0, b"a" * 9000)  # segment 1
    journal.add_tx(5, 2, 0, b"b" * 9000)  # segment 2
    for rid in range(10, 60):  # the open transaction pins its segments meanwhile
        journal.add(rid, 0, b"c" * 400)
        journal.delete(rid)
    journal.commit(5)
    journal.delete(1)  # segment 1 is now empty and goes; the COMMIT lists it
    for rid in range(60, 120):
        journal.add(rid, 0, b"c" * 400)
        journal.delete(rid)
    journal.stop()
    assert 1 not in [s.id for s in journal.segments()]
    assert list(reload(tmp_path).records) == [2]


def test_open_transaction_pins_its_segment(tmp_path):
    journal, _ = started(tmp_path, compact_percentage=0)
    journal.add_tx(6, 1, 0, b"a" * 2000)
    for rid in range(10, 200):
        journal.add(rid, 0, b"c" * 400)
        journal.delete(rid)
    fired = []
    journal.sync(lambda: fired.append(1))
    wait_for(lambda: fired)
    assert journal.segments()[0].id == 1
    journal.commit(6)
    journal.stop()
    assert list(reload(tmp_path).records) == [1]


def test_a_delete_is_kept_while_the_segment_of_its_record_is(tmp_path):
    journal, _ = started(tmp_path, compact_percentage=0)
    journal.add(1, 0, b"a" * 100)
    journal.add(2, 0, b"b" * 100)  # keeps segment 1 alive
    journal.add(3, 0, b"c" * 16070)  # fills the rest: segment 2 starts next
    journal.delete(3)
    journal.delete(1)  # this DELETE lands in segment 2
    for rid in range(10, 100):  # segments 2.. hold nothing live any more
        journal.add(rid, 0, b"d" * 400)
        journal.delete(rid)
    journal.stop()
    ids = [s.id for s in journal.segments()]
    assert ids[0] == 1 and 2 in ids
    assert list(reload(tmp_path).records) == [2]
