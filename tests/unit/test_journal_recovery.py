"""Load after crashes and damage: torn tails, flipped bits, unfinished transactions."""

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from petrel.storage.journal import DamagedJournal, FileJournal, Record, RecordType, encode, read_segments
from petrel.storage.journal.records import HEADER_SIZE, decode, encode_segment_header, encode_tx_counts

from journal_harness import SIZE, reload, run_all, started


def write(path, ops, *, crash: bool = False, **options):
    """Run ``ops(journal)`` on a started journal, then stop it.

    ``crash``: as if the process died after the last sync: everything is written, but without
    the MARK a clean stop appends to vouch for it (see recovery.py), so damage after the last
    MARK of the run reads as a torn tail, as after a real crash."""
    journal, _ = started(path, **options)
    ops(journal)
    if crash:
        journal._final_mark = lambda: None
    journal.stop()
    return journal


def layout(path):
    """[(segment id, file path, [(offset, record), ...])] as on disk now."""
    return [(info.id, info.path, list(recs)) for info, recs in read_segments(path, "petrel-data", "pj")]


def record_end(rec, seg):
    return len(encode(rec, seg))


def adds(count, size=200, start=1):
    def ops(journal):
        for rid in range(start, start + count):
            journal.add(rid, 1, bytes([rid % 251]) * size)
    return ops


def flip(path, offset, bit=0):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ (1 << bit)]))


def test_truncated_tail_drops_only_the_torn_record_and_appending_resumes(tmp_path):
    write(tmp_path, adds(10), crash=True)
    seg, path, recs = layout(tmp_path)[-1]
    off, last = recs[-1]
    os.truncate(path, off + 30)  # cut inside the last record
    loaded = reload(tmp_path)
    assert list(loaded.records) == list(range(1, 10))
    write(tmp_path, adds(5, start=100))
    loaded = reload(tmp_path)
    assert list(loaded.records) == list(range(1, 10)) + list(range(100, 105))
    assert os.path.getsize(path) == SIZE  # the cut file got its size back


@pytest.mark.parametrize("damage", ["garbage", "zeros", "flipped"])
def test_damaged_last_record_of_newest_segment_is_a_torn_tail(tmp_path, damage):
    write(tmp_path, adds(12), crash=True)
    seg, path, recs = layout(tmp_path)[-1]
    off, last = recs[-1]
    end = off + record_end(last, seg)
    with open(path, "r+b") as f:
        if damage == "garbage":
            f.seek(end - 20)
            f.write(os.urandom(20))
        elif damage == "zeros":
            f.seek(off + 50)
            f.write(bytes(end - off - 50))
    if damage == "flipped":
        flip(path, off + 100, 3)
    loaded = reload(tmp_path)
    assert list(loaded.records) == list(range(1, 12))
    assert loaded.skipped == []


def test_torn_tail_leftovers_do_not_look_like_damage_later(tmp_path):
    # the last batch is torn: two records of ours that fail their CRC
    write(tmp_path, lambda j: (adds(3)(j), j.add(50, 1, b"L" * 1000), j.add(51, 1, b"M" * 1000)), crash=True)
    seg, path, recs = layout(tmp_path)[-1]
    (off50, _), (off51, _) = recs[-2:]
    flip(path, off50 + 500)
    flip(path, off51 + 500)
    assert list(reload(tmp_path).records) == [1, 2, 3]
    # a record of the same size ends exactly where the second torn one starts; then roll over
    write(tmp_path, lambda j: (j.add(60, 1, b"N" * 1000), j.add(61, 1, b"O" * 15000)))
    assert layout(tmp_path)[0][2][-1][0] == off50
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1, 2, 3, 60, 61]
    assert loaded.skipped == []


def test_flipped_bit_in_the_middle_is_damage_naming_file_and_offset(tmp_path):
    write(tmp_path, adds(10))
    seg, path, recs = layout(tmp_path)[-1]
    off, _ = recs[4]
    flip(path, off + 40)
    with pytest.raises(DamagedJournal) as info:
        reload(tmp_path)
    message = str(info.value)
    assert str(path) in message and f"offset {off}" in message and "--skip-damaged" in message
    assert info.value.offset == off
    loaded = reload(tmp_path, skip_damaged=True)
    assert list(loaded.records) == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert len(loaded.skipped) == 1 and str(path) in loaded.skipped[0]


def test_zeroed_hole_followed_by_valid_records_is_damage(tmp_path):
    write(tmp_path, adds(10))
    seg, path, recs = layout(tmp_path)[-1]
    off, rec = recs[3]
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(bytes(record_end(rec, seg)))
    with pytest.raises(DamagedJournal):
        reload(tmp_path)
    assert list(reload(tmp_path, skip_damaged=True).records) == [1, 2, 3, 5, 6, 7, 8, 9, 10]


def test_flipped_bit_in_an_older_segments_last_record_is_damage(tmp_path):
    write(tmp_path, adds(200))
    segments = layout(tmp_path)
    assert len(segments) >= 3
    seg, path, recs = segments[0]
    off, last = recs[-1]
    flip(path, off + 2, 1)  # in the length field
    with pytest.raises(DamagedJournal) as info:
        reload(tmp_path)
    assert str(path) in str(info.value)
    loaded = reload(tmp_path, skip_damaged=True)
    assert last.id not in loaded.records
    assert len(loaded.records) == 199


def test_torn_record_at_the_end_of_an_older_segment_is_damage(tmp_path):
    write(tmp_path, adds(200))
    seg, path, recs = layout(tmp_path)[0]
    off, last = recs[-1]
    with open(path, "r+b") as f:
        f.seek(off + 30)
        f.write(bytes(50))
    with pytest.raises(DamagedJournal):
        reload(tmp_path)


def test_bad_segment_header_is_damage(tmp_path):
    write(tmp_path, adds(200))
    seg, path, recs = layout(tmp_path)[1]
    with open(path, "r+b") as f:
        f.write(b"JUNK")
    with pytest.raises(DamagedJournal) as info:
        reload(tmp_path)
    assert "offset 0" in str(info.value)
    loaded = reload(tmp_path, skip_damaged=True)
    assert len(loaded.records) == 200 - len(recs)
    assert not path.exists() and path.with_name(path.name + ".damaged").exists()  # moved aside
    assert list(reload(tmp_path).records) == list(loaded.records)


def test_transaction_without_commit_is_rolled_back_and_stays_dead(tmp_path):
    def ops(journal):
        journal.add(1, 0, b"plain")
        journal.add_tx(40, 2, 0, b"never committed")
        journal.delete_tx(40, 1)
    write(tmp_path, ops)
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1]
    assert loaded.rolled_back == [40]
    again = reload(tmp_path)
    assert list(again.records) == [1] and again.rolled_back == []


def test_prepared_transaction_is_rolled_back_and_reported(tmp_path):
    def ops(journal):
        journal.add_tx(41, 2, 0, b"prepared")
        journal.prepare(41, b"xid")
    write(tmp_path, ops)
    loaded = reload(tmp_path)
    assert loaded.records == {} and loaded.rolled_back == [41]
    assert reload(tmp_path).rolled_back == []


def test_torn_commit_rolls_the_transaction_back(tmp_path):
    def ops(journal):
        journal.add(1, 0, b"x")
        journal.add_tx(9, 2, 0, b"a")
        journal.add_tx(9, 3, 0, b"b")
        journal.commit(9)
    write(tmp_path, ops, crash=True)
    seg, path, recs = layout(tmp_path)[-1]
    off, commit = recs[-1]
    assert commit.type == RecordType.COMMIT and commit.count == 2
    os.truncate(path, off + 10)
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1] and loaded.rolled_back == [9]


def test_commit_count_mismatch_drops_the_transaction(tmp_path):
    def ops(journal):
        journal.add(1, 0, b"x")
        for rid in (2, 3, 4):
            journal.add_tx(9, rid, 0, b"tx")
        journal.commit(9)
        journal.add(5, 0, b"y")
    write(tmp_path, ops)
    seg, path, recs = layout(tmp_path)[-1]
    off, rec = recs[2]
    assert rec.type == RecordType.ADD_TX
    flip(path, off + 30)
    loaded = reload(tmp_path, skip_damaged=True)
    assert list(loaded.records) == [1, 5]  # the whole transaction, not two thirds of it
    assert len(loaded.skipped) == 1


def handmade(path, segment_id, records):
    data = bytearray(SIZE)
    data[:HEADER_SIZE] = encode_segment_header(segment_id)
    off = HEADER_SIZE
    for rec in records:
        blob = encode(rec, segment_id)
        data[off:off + len(blob)] = blob
        off += len(blob)
    path.mkdir(exist_ok=True)
    (path / f"petrel-data-{segment_id}.pj").write_bytes(bytes(data))


def test_commit_counts_are_checked_on_a_handmade_journal(tmp_path):
    handmade(tmp_path, 3, [
        Record(RecordType.ADD_TX, id=1, tx_id=7, body=b"a"),
        Record(RecordType.ADD_TX, id=2, tx_id=7, body=b"b"),
        Record(RecordType.COMMIT, tx_id=7, count=3),  # says 3, there are 2
        Record(RecordType.ADD_TX, id=3, tx_id=8, body=b"c"),
        Record(RecordType.COMMIT, tx_id=8, count=1),
        Record(RecordType.ADD_TX, id=4, tx_id=9, body=b"d"),
        Record(RecordType.COMMIT, tx_id=9, count=2, body=encode_tx_counts({3: 2})),  # wrong per segment
        Record(RecordType.ADD_TX, id=5, tx_id=10, body=b"e"),
        Record(RecordType.COMMIT, tx_id=10, count=5, body=encode_tx_counts({3: 1, 1: 4})),  # 1 is gone
    ])
    loaded = reload(tmp_path)
    assert list(loaded.records) == [3, 5]
    assert loaded.max_id == 5


def test_stray_files_are_cleaned_and_a_torn_control_file_is_discarded(tmp_path):
    write(tmp_path, adds(5))
    (tmp_path / "petrel-data-free-99.pj.tmp").write_bytes(b"partial")
    (tmp_path / "petrel-data-1.pj.cmp").write_bytes(b"half a compaction")
    (tmp_path / "journal-rename-control.ctr").write_bytes(b"petrel-journal-rename-control 1\nrename a")
    assert list(reload(tmp_path).records) == [1, 2, 3, 4, 5]
    names = {p.name for p in tmp_path.iterdir()}
    assert "petrel-data-free-99.pj.tmp" not in names
    assert "petrel-data-1.pj.cmp" not in names
    assert "journal-rename-control.ctr" not in names


def test_empty_segment_after_the_newest_data_is_where_appends_resume(tmp_path):
    write(tmp_path, adds(5))
    handmade(tmp_path, 9, [])  # a segment put in service just before a crash
    write(tmp_path, adds(3, start=10))
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1, 2, 3, 4, 5, 10, 11, 12]
    assert layout(tmp_path)[-1][0] == 9


_BASE = {}


def _base_journal():
    """One journal with a bit of everything, built once and copied per example."""
    if "path" not in _BASE:
        import tempfile
        path = Path(tempfile.mkdtemp(prefix="petrel-journal-fuzz-")) / "j"

        def ops(journal):
            for rid in range(1, 80):
                journal.add(rid, rid % 5, bytes([rid]) * (rid * 7 % 500))
                if rid % 3 == 0:
                    journal.update(rid, 9, b"u" * 20)
                if rid % 4 == 0:
                    journal.delete(rid - 2)
                if rid % 10 == 0:
                    journal.add_tx(rid, 1000 + rid, 1, b"t" * 100)
                    journal.update_tx(rid, rid - 1, 2, b"tu")
                    journal.commit(rid)
        write(path, ops, compact_percentage=0)
        _BASE["path"] = path
        _BASE["state"] = reload(path, compact_percentage=0).records.keys()
    return _BASE["path"]


@settings(max_examples=100, deadline=None)
@given(hits=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 7)), min_size=1, max_size=4),
       lives=st.lists(st.booleans(), min_size=1, max_size=3))
# the first record header of both data segments: the second load dropped what the first kept
@example(hits=[(16, 0), (17, 0), (7659, 0)], lives=[False])
def test_flipped_bits_anywhere_give_damage_or_a_load_never_anything_else(tmp_path_factory, hits, lives):
    target = tmp_path_factory.mktemp("fuzz") / "j"
    shutil.copytree(_base_journal(), target)
    files = sorted(p for p in target.iterdir() if p.name.startswith("petrel-data-") and p.suffix == ".pj"
                   and "free" not in p.name)
    for where, bit in hits:
        path = files[where % len(files)]
        used = max(HEADER_SIZE, os.path.getsize(path) // 2)  # the data is in the first part
        flip(path, where % used, bit)
    try:
        strict = reload(target, compact_percentage=0, datasync=False)
    except DamagedJournal:
        strict = None
    loaded = reload(target, skip_damaged=True, compact_percentage=0, datasync=False)
    assert set(loaded.records) <= set(range(1, 80)) | {1000 + r for r in range(10, 80, 10)}
    if strict is not None:
        assert list(strict.records) == list(loaded.records) and loaded.skipped == []
        return
    # every later load gives what the first kept (recovery never drops what an earlier one kept),
    # also after a life in which the journal ran (its housekeeping reclaims segments)
    for life in lives:
        if life:
            again = _start_and_stop(target, compact_percentage=0, datasync=False)
        else:
            again = reload(target, skip_damaged=True, compact_percentage=0, datasync=False)
        assert list(again.records) == list(loaded.records)
    # compaction rewrites the damaged segments (all but the current one)
    journal = FileJournal(target, file_size=SIZE, compact_percentage=0, datasync=False)
    journal.load(skip_damaged=True)
    journal.start(run_all)
    journal.add(5000, 0, b"x" * (SIZE - 100))  # a segment of its own: all the others can be compacted
    journal.compact()
    journal.stop()
    # Compaction rewrites the oldest run of segments up to an unfinished transaction; damage in
    # a segment it could not take stays there (and is skipped again), but never changes the data.
    try:
        after = reload(target, compact_percentage=0, datasync=False)
    except DamagedJournal:
        after = reload(target, skip_damaged=True, compact_percentage=0, datasync=False)
    assert list(after.records) == list(loaded.records) + [5000]


def _first_headers_flipped(path):
    """Flip a bit in the header of the first record of every data segment; their ids."""
    segments = layout(path)
    for seg, file, recs in segments:
        flip(file, HEADER_SIZE + 1)  # in the record's user type: its header check fails
    return [seg for seg, _, _ in segments]


@pytest.mark.parametrize("segments", [2, 3])
def test_loads_after_damage_in_every_segment_keep_what_the_first_kept(tmp_path, segments):
    # Holes in older segments followed by data in a later one are damage (their records after
    # the hole kept); the newest segment's hole, vouched for by no MARK, is a torn tail. Dropping
    # it must not leave that segment empty: the next load would take the older segment for the
    # newest holding data and drop its records after the hole as a torn tail.
    write(tmp_path, adds(60 * segments, size=200), crash=True)
    before = layout(tmp_path)
    assert len(before) == segments
    # kept: the records of the older segments after their damaged first one
    expected = [rec.id for _, _, recs in before[:-1] for _, rec in recs[1:] if rec.type == RecordType.ADD]
    _first_headers_flipped(tmp_path)
    with pytest.raises(DamagedJournal):
        reload(tmp_path)
    first = reload(tmp_path, skip_damaged=True)
    assert len(first.skipped) == segments - 1
    kept = list(first.records)
    assert kept == expected
    for _ in range(3):
        again = reload(tmp_path, skip_damaged=True)
        assert list(again.records) == kept
        assert len(again.skipped) == segments - 1  # the same damage, reported again
    # appends resume after the dropped tail's MARK, and everything stays
    journal = FileJournal(tmp_path, file_size=SIZE)
    journal.load(skip_damaged=True)
    journal.start(run_all)
    adds(3, start=1000)(journal)
    journal.stop()
    assert list(reload(tmp_path, skip_damaged=True).records) == kept + [1000, 1001, 1002]


def test_a_dropped_torn_tail_leaves_a_mark_where_appends_resume(tmp_path):
    write(tmp_path, adds(10), crash=True)
    seg, path, recs = layout(tmp_path)[-1]
    off, _ = recs[6]
    flip(path, off + 40)  # a hole after the last MARK, records after it: a torn tail
    loaded = reload(tmp_path)
    assert list(loaded.records) == [1, 2, 3, 4, 5, 6] and loaded.skipped == []
    buf = path.read_bytes()
    mark, end = decode(buf, off, seg)
    assert mark.type == RecordType.MARK and mark.id == off
    assert not any(buf[end:])  # the dropped records are zeroed
    assert list(reload(tmp_path).records) == [1, 2, 3, 4, 5, 6]
    write(tmp_path, adds(2, start=20))
    assert layout(tmp_path)[-1][2][-2][0] == end  # the first append lands just after the MARK
    assert list(reload(tmp_path).records) == [1, 2, 3, 4, 5, 6, 20, 21]


def _start_and_stop(path, **options):
    """A broker's life with nothing appended: load (skipping damage), start, stop; housekeeping
    (reclaim) runs meanwhile."""
    journal = FileJournal(path, file_size=SIZE, **options)
    loaded = journal.load(skip_damaged=True)
    journal.start(run_all)
    journal.stop()
    return loaded


@pytest.mark.parametrize("later", ["empty segment", "unreadable segment"])
def test_kept_damage_stays_kept_when_appends_resume_in_an_empty_segment(tmp_path, later):
    # The segment whose data proved the older hole damage holds nothing live, so it is
    # reclaimed once appends resume in a later segment; if that one held no record either,
    # the next load would take the damaged segment for the newest holding data.
    write(tmp_path, adds(120, size=200), crash=True)
    before = layout(tmp_path)
    assert len(before) == 2
    expected = [rec.id for _, rec in before[0][2][1:] if rec.type == RecordType.ADD]
    _first_headers_flipped(tmp_path)
    if later == "empty segment":
        handmade(tmp_path, 3, [])  # put in service just before the crash
    else:
        handmade(tmp_path, 3, [Record(RecordType.ADD, id=500, body=b"z")])
        with open(tmp_path / "petrel-data-3.pj", "r+b") as f:
            f.write(b"JUNK")
    for _ in range(3):
        assert list(_start_and_stop(tmp_path).records) == expected
    assert list(reload(tmp_path, skip_damaged=True).records) == expected
    seg, path, _ = layout(tmp_path)[-1]  # where appends resume holds the evidence: a MARK
    assert seg == (3 if later == "empty segment" else 4)
    assert decode(path.read_bytes(), HEADER_SIZE, seg)[0].type == RecordType.MARK


def test_compacting_a_damaged_segment_whose_transaction_straddles_keeps_its_records(tmp_path):
    # A damaged COMMIT leaves its transaction open: load rolls it back with a ROLLBACK in the
    # current segment, so the transaction straddles the end of any compaction run that takes
    # its segment. The copy of the live records and the carried transaction records both
    # wanted that segment's id; the second file overwrote the first (all the records lost).
    def ops(journal):
        adds(30)(journal)
        journal.add_tx(7, 500, 1, b"t" * 100)
        journal.commit(7)
        adds(150, start=31)(journal)
    write(tmp_path, ops, crash=True)
    segments = layout(tmp_path)
    assert len(segments) >= 3
    seg, path, recs = segments[0]
    commit = next(off for off, rec in recs if rec.type == RecordType.COMMIT)
    flip(path, commit + 3)  # in its length: the header check fails
    first = reload(tmp_path, skip_damaged=True)
    assert 500 not in first.records and first.rolled_back == [7]
    journal = FileJournal(tmp_path, file_size=SIZE)
    assert list(journal.load(skip_damaged=True).records) == list(first.records)
    journal.start(run_all)
    journal.compact()
    journal.stop()
    for _ in range(2):
        assert list(reload(tmp_path, skip_damaged=True).records) == list(first.records)
