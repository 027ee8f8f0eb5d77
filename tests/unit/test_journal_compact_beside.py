"""Compaction beside the writer: syncs are confirmed while it runs, the compacted
journal equals the live state, and a crash at any of its steps loads that state.

No timings: a checkpoint hook holds the compaction at a step while the test
appends and waits for its syncs, then lets it go.
"""

import copy
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.storage.journal import FileJournal, JournalError

from journal_harness import reload, run_all, started, wait_for
from test_journal_property import OPTIONS, Model, loaded_state, make_ops, op_specs, perform

BIG = 64 * 1024
THREAD_STEPS = ["compacted files written", "control file written"]  # in the compaction thread
WRITER_STEPS = ["snapshot taken", "renamed 1", "dropped 1"]  # in the writer thread


class Hold:
    """A checkpoint hook that stops the compaction at ``step`` until released."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, name: str) -> None:
        if name == self.step and not self.reached.is_set():
            self.reached.set()
            assert self.release.wait(60)


class Background:
    """``journal.compact()`` in a thread of its own (it blocks its caller)."""

    def __init__(self, journal: FileJournal) -> None:
        self.result: list = []
        self.thread = threading.Thread(target=lambda: self.result.append(journal.compact()))
        self.thread.start()

    def finish(self) -> int:
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.result[0]


def do(journal, model, op, done=None):
    perform(journal, op, done)
    model.apply(op)


def fill(journal, model, live: int) -> None:
    """``live`` records (every fifth updated) among twice as many that come and go."""
    dead = 10_000_000
    for rid in range(1, live + 1):
        do(journal, model, ("add", rid, 1, b"m%d" % rid * 4))
        if rid % 5 == 0:
            do(journal, model, ("update", rid, 2, b"delivered"))
        for _ in range(2):
            dead += 1
            do(journal, model, ("add", dead, 0, b"g" * 60))
            do(journal, model, ("delete", dead))


def churn(journal, model, records: int, first: int = 20_000_000) -> None:
    """Records that come and go: later segments fill, and whatever the ledger says
    holds nothing live is reclaimed."""
    for rid in range(first, first + records):
        do(journal, model, ("add", rid, 0, b"c" * 400))
        do(journal, model, ("delete", rid))


def synced(journal, timeout: float = 60) -> None:
    done = threading.Event()
    journal.sync(done.set)
    assert done.wait(timeout)


def idle(journal) -> None:
    """Wait until the writer has nothing pending and sleeps (nothing half written)."""
    synced(journal)
    p = journal._pending
    wait_for(lambda: p.waiting and not p.busy(), timeout=60)


def crash_image(live: Path, image: Path) -> None:
    """The directory as a crash now would leave it (the writer is idle or held)."""
    image.mkdir()
    for entry in os.scandir(live):
        try:
            shutil.copy2(entry.path, image / entry.name)
        except FileNotFoundError:  # a spare file being made: a crash leaves a stray .tmp at most
            pass


def accounting(journal) -> tuple[dict, dict]:
    ledger = journal._ledger
    segments = {seg: (st.live, st.live_bytes) for seg, st in ledger.segments.items()}
    return dict(ledger.live), segments


def assert_ledger_matches_disk(journal, live: Path, scratch: Path, segments: bool = True) -> None:
    """What the writer believes is live (per record and per segment, which decides
    what gets reclaimed) is what a load of the directory finds."""
    idle(journal)
    crash_image(live, scratch)
    fresh = FileJournal(scratch, file_size=journal.file_size)
    fresh.load()
    running, found = accounting(journal), accounting(fresh)
    fresh.stop()
    shutil.rmtree(scratch)
    assert running[0] == found[0]
    if segments:  # (open transactions are rolled back by that load: counts differ)
        assert running[1] == found[1]


def touch_compacted(journal, model, first: int, last: int, confirmed: list) -> int:
    """Updates, deletes and re-adds of records being compacted, and new records, each with
    a sync callback; returns how many callbacks to expect."""
    tick = lambda: confirmed.append(1)  # noqa: E731
    n = 0
    for rid in range(first, last, 7):
        do(journal, model, ("update", rid, 3, b"during"), tick)
        do(journal, model, ("delete", rid + 1), tick)
        do(journal, model, ("add", rid + 1, 4, b"re-added"), tick)
        do(journal, model, ("delete", rid + 2), tick)
        do(journal, model, ("add", 5_000_000 + rid, 5, b"new"), tick)
        n += 5
    do(journal, model, ("add_tx", 42, 6_000_000, 1, b"in a tx"))
    do(journal, model, ("delete_tx", 42, last + 3))
    do(journal, model, ("commit", 42), tick)
    # segments holding nothing but deletes of compacted records: reclaimable, once
    # the compacted copies of what they delete are gone
    for rid in range(last + 4, last + 2004):
        do(journal, model, ("delete", rid))
    churn(journal, model, 300, first=30_000_000)
    do(journal, model, ("add", 6_000_001, 1, b"last"), tick)
    return n + 2


def update_early(journal, model) -> None:
    """Updates of the oldest records in the current segment: outside what gets compacted."""
    for rid in range(3, 300, 11):
        do(journal, model, ("update", rid, 8, b"before the compaction"))


@pytest.mark.parametrize("step", THREAD_STEPS)
def test_syncs_are_confirmed_while_compaction_runs(tmp_path, step):
    journal, _ = started(tmp_path / "live", file_size=BIG, compact_percentage=0)
    model = Model()
    fill(journal, model, live=20_000)
    update_early(journal, model)
    synced(journal)
    hold = Hold(step)
    journal._writer.checkpoint = hold
    compaction = Background(journal)
    assert hold.reached.wait(60)
    confirmed: list = []
    expected = touch_compacted(journal, model, 1, 3_000, confirmed)
    # every sync asked for while the compaction is held completes: the writer goes on
    wait_for(lambda: len(confirmed) == expected, timeout=60)
    assert compaction.thread.is_alive() and not compaction.result
    hold.release.set()
    assert compaction.finish() > 10
    assert_ledger_matches_disk(journal, tmp_path / "live", tmp_path / "scratch")
    do(journal, model, ("update", 10, 7, b"after"))
    do(journal, model, ("delete", 20))
    churn(journal, model, 2_000)
    journal.stop()
    assert loaded_state(reload(tmp_path / "live", file_size=BIG)) == model.state()
    assert not [p for p in os.listdir(tmp_path / "live") if p.endswith((".cmp", ".ctr", ".tmp"))]


@pytest.mark.parametrize("step", THREAD_STEPS + WRITER_STEPS)
def test_a_crash_at_each_step_of_a_compaction_beside_the_writer_loads_the_live_state(tmp_path, step):
    live = tmp_path / "live"
    journal, _ = started(live, file_size=BIG, compact_percentage=0)
    model = Model()
    fill(journal, model, live=3_000)
    update_early(journal, model)
    synced(journal)
    hold = Hold(step)
    journal._writer.checkpoint = hold
    compaction = Background(journal)
    assert hold.reached.wait(60)
    if step in THREAD_STEPS:  # the writer is free: records come and go meanwhile
        confirmed: list = []
        expected = touch_compacted(journal, model, 1, 600, confirmed)
        wait_for(lambda: len(confirmed) == expected, timeout=60)
        idle(journal)
    crash_image(live, tmp_path / "image")
    at_crash = copy.deepcopy(model)
    hold.release.set()
    assert compaction.finish() > 0
    assert_ledger_matches_disk(journal, live, tmp_path / "scratch")
    do(journal, model, ("add", 9_999_999, 0, b"later"))
    churn(journal, model, 2_000)
    journal.stop()
    assert loaded_state(reload(live, file_size=BIG)) == model.state()

    image = tmp_path / "image"
    assert loaded_state(reload(image, file_size=BIG)) == at_crash.state()
    assert not [p for p in os.listdir(image) if p.endswith((".cmp", ".ctr", ".tmp"))]
    # and it carries on: more records, another compaction
    journal, _ = started(image, file_size=BIG, compact_percentage=0)
    do(journal, at_crash, ("add", 9_999_998, 0, b"after the crash"))
    journal.compact()
    journal.stop()
    assert loaded_state(reload(image, file_size=BIG)) == at_crash.state()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=op_specs, second=op_specs, cuts=st.tuples(st.floats(0, 1), st.floats(0, 1)),
       step=st.sampled_from(THREAD_STEPS))
def test_operations_interleaved_with_compaction_leave_the_live_state(first, second, cuts, step):
    """Random operations before, during (the compaction held mid-way, the writer free)
    and after a compaction: a crash image taken mid-way and the final journal both load
    exactly the model's state."""
    ops = make_ops(first + second)
    a, b = sorted(int(c * len(ops)) for c in cuts)
    before, during, after = ops[:a], ops[a:b], ops[b:]
    with tempfile.TemporaryDirectory() as tmp:
        live, image = Path(tmp) / "live", Path(tmp) / "image"
        journal = FileJournal(live, **dict(OPTIONS, compact_percentage=0))
        journal.load()
        journal.start(run_all)
        model = Model()
        for rid in range(1_000_000, 1_000_020):  # segments holding a live record each: worth compacting
            do(journal, model, ("add", rid, 1, b"kept"))
            for dead in range(rid * 10, rid * 10 + 9):
                do(journal, model, ("add", dead, 0, b"g" * 400))
                do(journal, model, ("delete", dead))
        for op in before:
            if op[0] != "sync":
                do(journal, model, op)
        synced(journal)
        hold = Hold(step)
        journal._writer.checkpoint = hold
        compaction = Background(journal)
        wait_for(lambda: hold.reached.is_set() or not compaction.thread.is_alive(), timeout=60)
        confirmed: list = []
        asked = 0
        for op in during:
            if op[0] == "sync":
                journal.sync(lambda: confirmed.append(1))
                asked += 1
            else:
                do(journal, model, op)
        if hold.reached.is_set():
            wait_for(lambda: len(confirmed) == asked, timeout=60)  # confirmed while held
            idle(journal)
            crash_image(live, image)
            at_crash = copy.deepcopy(model)
        hold.release.set()
        compaction.finish()
        assert_ledger_matches_disk(journal, live, Path(tmp) / "scratch", segments=not model.txs)
        for op in after:
            if op[0] != "sync":
                do(journal, model, op)
        churn(journal, model, 60)
        journal.stop()
        again = FileJournal(live, **OPTIONS)
        assert loaded_state(again.load()) == model.state()
        again.stop()
        if hold.reached.is_set():
            crashed = FileJournal(image, **OPTIONS)
            assert loaded_state(crashed.load()) == at_crash.state()
            crashed.stop()



def pipelined_sends(journal, model, first: int, count: int, confirmed: list | None = None) -> None:
    """What a broker writes for pipelined sends with duplicate IDs: each send a transaction
    (message + duplicate ID) committed only after the next one has begun, so a transaction
    is open across every segment boundary; older messages acknowledged (deleted)."""
    tick = None if confirmed is None else (lambda: confirmed.append(1))
    for i in range(first, first + count):
        do(journal, model, ("add_tx", i, 2 * i, 1, b"message %d" % i + b"m" * 300))
        do(journal, model, ("add_tx", i, 2 * i + 1, 2, b"dup-%d" % i))
        if i - 10 >= first:  # a redelivery counted in the transaction
            do(journal, model, ("update_tx", i, 2 * (i - 10), 3, b"delivery"))
        if i > first:
            do(journal, model, ("commit", i - 1), tick)
        if i % 3 and i - 40 >= first:  # two in three messages consumed
            do(journal, model, ("delete", 2 * (i - 40)))
    do(journal, model, ("commit", first + count - 1), tick)


def straddled(path: Path, segments: int = 0) -> bool:
    """Whether some transaction is open across every boundary between the data segments."""
    from petrel.storage.journal import read_segments
    from petrel.storage.journal.records import RecordType
    spans: dict[int, list[int]] = {}
    ids = []
    for info, records in read_segments(path):
        ids.append(info.id)
        for _off, rec in records:
            if rec.type in (RecordType.ADD_TX, RecordType.UPDATE_TX, RecordType.DELETE_TX):
                spans.setdefault(rec.tx_id, [info.id, None])
            elif rec.type in (RecordType.COMMIT, RecordType.ROLLBACK) and rec.tx_id in spans:
                spans[rec.tx_id][1] = info.id
    open_at = {s for first, end in spans.values() if end is not None for s in range(first, end)}
    return all(s in open_at for s in ids[:-1])


def test_transactions_open_across_every_segment_boundary_do_not_stop_compaction(tmp_path):
    live = tmp_path / "live"
    journal, _ = started(live, compact_percentage=0)
    model = Model()
    pipelined_sends(journal, model, 1, 1500)
    synced(journal)
    idle(journal)
    crash_image(live, tmp_path / "before")
    assert straddled(tmp_path / "before"), "the workload left a boundary no transaction crosses"
    hold = Hold("control file written")
    journal._writer.checkpoint = hold
    compaction = Background(journal)
    assert hold.reached.wait(60)
    confirmed: list = []
    pipelined_sends(journal, model, 5000, 200, confirmed)  # confirmed while the compaction is held
    wait_for(lambda: len(confirmed) == 200, timeout=60)
    hold.release.set()
    assert compaction.finish() > 10
    assert_ledger_matches_disk(journal, live, tmp_path / "scratch")
    churn(journal, model, 300)
    journal.stop()
    assert loaded_state(reload(live)) == model.state()


class Filler:
    """Records that come and go, written until the journal reaches a given place."""

    def __init__(self, journal, model) -> None:
        self.journal, self.model, self.next = journal, model, 40_000_000

    def one(self) -> None:
        self.next += 1
        do(self.journal, self.model, ("add", self.next, 0, b"f" * 200))
        do(self.journal, self.model, ("delete", self.next))

    def to_next_segment(self) -> None:
        seg = self.journal.position[0]
        while self.journal.position[0] == seg:
            self.one()

    def until_room_left(self, room: int) -> None:
        while self.journal.position[1] < self.journal.file_size - room:
            self.one()


def test_the_commit_of_a_carried_transaction_outlives_the_segment_it_was_carried_in(tmp_path):
    """A transaction straddling the end of what is compacted is carried in a file that keeps
    its segment id; the later segment holding its COMMIT (nothing else live there) must not
    be reclaimed before that file, or a load would roll the transaction back."""
    journal, _ = started(tmp_path / "live", compact_percentage=0)
    model = Model()
    fill = Filler(journal, model)
    for rid in range(1, 5):  # segments with one live record each: worth compacting
        do(journal, model, ("add", rid, 1, b"kept %d" % rid))
        fill.to_next_segment()
    do(journal, model, ("add", 5, 1, b"kept 5"))
    fill.until_room_left(600)
    carried_in = journal.position[0]
    do(journal, model, ("add_tx", 77, 500, 1, b"carried"))  # T starts at the end of segment L
    fill.to_next_segment()
    do(journal, model, ("add_tx", 88, 600, 1, b"open"))  # U, open through the compaction: it stops at L
    fill.to_next_segment()
    do(journal, model, ("commit", 77))  # T's COMMIT, in a segment holding nothing else live
    fill.to_next_segment()
    fill.to_next_segment()
    synced(journal)
    assert journal.compact() == carried_in
    assert carried_in in [s.id for s in journal.segments()]
    fill.to_next_segment()  # what can be reclaimed is, now
    synced(journal)
    idle(journal)
    crash_image(tmp_path / "live", tmp_path / "image")
    assert loaded_state(reload(tmp_path / "image")) == model.state()
    do(journal, model, ("commit", 88))
    journal.stop()
    assert loaded_state(reload(tmp_path / "live")) == model.state()


@pytest.mark.parametrize("step", THREAD_STEPS)
def test_a_compaction_that_fails_beside_the_writer_leaves_the_journal_as_it_was(tmp_path, step):
    journal, _ = started(tmp_path, file_size=BIG, compact_percentage=0)
    model = Model()
    fill(journal, model, live=3_000)
    synced(journal)

    def fail(name):
        if name == step:
            raise OSError(5, "Input/output error")

    journal._writer.checkpoint = fail
    with pytest.raises(JournalError, match="compaction failed"):
        journal.compact()
    assert not [p for p in os.listdir(tmp_path) if p.endswith((".cmp", ".ctr"))]
    journal._writer.checkpoint = lambda name: None
    do(journal, model, ("add", 9_999_999, 0, b"after"))
    synced(journal)
    assert journal.compact() > 0  # the next one goes through
    journal.stop()
    assert loaded_state(reload(tmp_path, file_size=BIG)) == model.state()
