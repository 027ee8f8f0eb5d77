"""Property: after a crash at any point, load gives exactly the state of a prefix of the
operations, never less than what was confirmed, with transactions whole.

A crash is taken from inside the writer's ``before_durable`` hook: the batch has just
been written, its callbacks have not fired, nothing else touches the files.  The
directory is copied there, and the copy's copy of that batch is torn at a random byte
(truncated, zeroed, or garbage then zeros).
"""

import os
import random
import shutil
import tempfile
import threading
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from petrel.storage.journal import FileJournal

from journal_harness import run_all

SIZE = 4096
OPTIONS = dict(file_size=SIZE, datasync=False, pool_files=2, compact_min_files=2, compact_percentage=40)


class Model:
    """What load should give after applying ``ops`` in order."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[int, bytes, list]] = {}
        self.txs: dict[int, list] = {}

    def apply(self, op) -> None:
        kind = op[0]
        if kind in ("add_tx", "update_tx", "delete_tx"):
            self.txs.setdefault(op[1], []).append(op)
        elif kind == "prepare":
            self.txs.setdefault(op[1], [])
        elif kind == "commit":
            for tx_op in self.txs.pop(op[1], []):
                self.apply((tx_op[0][:-3],) + tx_op[2:])
        elif kind == "rollback":
            self.txs.pop(op[1], None)
        elif kind == "add":
            _, rid, user_type, body = op
            self.records.pop(rid, None)
            self.records[rid] = (user_type, body, [])
        elif kind == "update":
            _, rid, user_type, body = op
            if rid in self.records:
                self.records[rid][2].append((user_type, body))
        elif kind == "delete":
            self.records.pop(op[1], None)

    def state(self):
        return [(rid, ut, body, list(ups)) for rid, (ut, body, ups) in self.records.items()]


def loaded_state(loaded):
    return [(rid, r.user_type, r.body, list(r.updates)) for rid, r in loaded.records.items()]


KINDS = ["add", "add", "update", "delete", "add_tx", "update_tx", "delete_tx", "commit", "rollback", "prepare",
         "sync", "churn"]
# one draw per operation: (kind, tx id, user type, body, a number to pick with)
op_specs = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(1, 3), st.integers(0, 255), st.binary(max_size=700),
              st.integers(0, 2**16)),
    min_size=1, max_size=50)


def make_ops(specs):
    """A valid sequence: deletes only of records the journal knows, fresh ids for adds."""
    ops = []
    known: list[int] = []
    tx_added: dict[int, list] = {}
    tx_ops: dict[int, list] = {}
    next_id = 1
    for kind, tx, user_type, body, pick in specs:
        if kind == "churn":  # records that come and go: segments fill up and get reclaimed
            for _ in range(3 + pick % 13):
                ops.append(("add", next_id, 0, b"c" * 400))
                ops.append(("delete", next_id))
                next_id += 1
            continue
        if kind == "add":
            op = ("add", next_id, user_type, body)
            known.append(next_id)
            next_id += 1
        elif kind == "add_tx":
            op = ("add_tx", tx, next_id, user_type, body)
            tx_added.setdefault(tx, []).append(next_id)
            tx_ops.setdefault(tx, []).append(op)
            next_id += 1
        elif kind == "update":
            op = ("update", 1 + pick % next_id, user_type, body)  # may name a record that is gone
        elif kind == "update_tx":
            op = ("update_tx", tx, 1 + pick % next_id, user_type, body)
            tx_ops.setdefault(tx, []).append(op)
        elif kind == "delete":
            if not known:
                continue
            op = ("delete", known.pop(pick % len(known)))
        elif kind == "delete_tx":
            choices = known + tx_added.get(tx, [])
            if not choices:
                continue
            op = ("delete_tx", tx, choices[pick % len(choices)])
            tx_ops.setdefault(tx, []).append(op)
        elif kind == "commit":
            op = ("commit", tx)
            for tx_op in tx_ops.pop(tx, []):
                if tx_op[0] == "add_tx":
                    known.append(tx_op[2])
                elif tx_op[0] == "delete_tx" and tx_op[2] in known:
                    known.remove(tx_op[2])
            tx_added.pop(tx, None)
        elif kind == "rollback":
            op = ("rollback", tx)
            tx_ops.pop(tx, None)
            tx_added.pop(tx, None)
        elif kind == "prepare":
            op = ("prepare", tx, b"xid")
        else:
            op = ("sync",)
        ops.append(op)
    return ops


def perform(journal, op, done):
    kind = op[0]
    if kind == "add":
        journal.add(op[1], op[2], op[3], done=done)
    elif kind == "update":
        journal.update(op[1], op[2], op[3], done=done)
    elif kind == "delete":
        journal.delete(op[1], done=done)
    elif kind == "add_tx":
        journal.add_tx(op[1], op[2], op[3], op[4])
    elif kind == "update_tx":
        journal.update_tx(op[1], op[2], op[3], op[4])
    elif kind == "delete_tx":
        journal.delete_tx(op[1], op[2])
    elif kind == "prepare":
        journal.prepare(op[1], op[2], done=done)
    elif kind == "commit":
        journal.commit(op[1], done=done)
    elif kind == "rollback":
        journal.rollback(op[1], done=done)


def crash_copy(live: Path, crashed: Path) -> None:
    """What a crash now leaves.  A compaction may be writing beside the writer: its
    control file is written only once its compacted files are synced, so the control
    file is taken first (then they are complete, or it is absent and they are strays)."""
    crashed.mkdir()
    names = sorted(os.listdir(live), key=lambda name: name != "journal-rename-control.ctr")
    for name in names:
        try:
            shutil.copy2(live / name, crashed / name)
        except FileNotFoundError:  # a spare file being made, renamed meanwhile
            pass


def tear(directory: Path, batch, cut: int, mode: str, rng: random.Random) -> tuple[int, int]:
    """Undo the bytes of ``batch`` from its ``cut``-th byte on; returns the cut position."""
    seen = 0
    position = None
    for seg, off, data in batch:
        path = directory / f"petrel-data-{seg}.pj"
        if position is None and cut <= seen + len(data):
            local = cut - seen
            position = (seg, off + local)
            start, length = off + local, len(data) - local
        elif position is None:
            seen += len(data)
            continue
        else:
            start, length = off, len(data)
        if mode == "truncate" and (seg, start) == position:
            os.truncate(path, start)
            continue
        junk = bytearray(length)
        if mode == "garbage" and (seg, start) == position:
            n = min(length, rng.randint(1, 64))
            junk[:n] = rng.randbytes(n)
        with open(path, "r+b") as f:
            f.seek(start)
            f.write(junk)
    assert position is not None
    return position


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=op_specs, crash_at=st.floats(0, 1), mode=st.sampled_from(["truncate", "zeros", "garbage"]),
       fraction=st.floats(0, 1), seed=st.integers(0, 2**32))
def test_crash_anywhere_loads_a_confirmed_prefix(specs, crash_at, mode, fraction, seed):
    ops = make_ops(specs) or [("sync",)]
    crash_after = int(crash_at * (len(ops) - 1))
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        live, crashed = Path(tmp) / "live", Path(tmp) / "crashed"
        journal = FileJournal(live, **OPTIONS)
        journal.load()
        armed = threading.Event()
        snapshot = []

        def hook(batch):
            if armed.is_set() and not snapshot:
                crash_copy(live, crashed)
                snapshot.append(batch)

        journal.before_durable = hook
        journal.start(run_all)
        ends = []  # (segment, offset) just past each op's record
        confirmed = []
        for i, op in enumerate(ops):
            if op[0] == "sync":
                synced = threading.Event()
                journal.sync(synced.set)
                assert synced.wait(10)
                if not snapshot:  # confirmed before the crash
                    confirmed.append(i - 1)
            else:
                perform(journal, op, None)
            ends.append(journal.position)
            if i == crash_after:
                armed.set()
        journal.stop()

        if snapshot:
            batch = snapshot[0]
            total = sum(len(d) for _s, _o, d in batch)
            cut = int(total * fraction)
            position = tear(crashed, batch, cut, mode, rng)
            batch_start = (batch[0][0], batch[0][1])
        else:  # nothing was written after arming: the crash leaves everything
            shutil.copytree(live, crashed)
            position = ends[-1]
            batch_start = position
        survivors = [op for op, end in zip(ops, ends) if end <= position]
        model = Model()
        for op in survivors:
            model.apply(op)
        last_confirmed = max(confirmed, default=-1)
        assert last_confirmed < 0 or ends[last_confirmed] <= batch_start  # confirmed ops are all kept

        recovered = FileJournal(crashed, **OPTIONS)
        loaded = recovered.load()
        assert loaded.skipped == []
        assert loaded_state(loaded) == model.state()
        # open transactions with records are rolled back and reported; one that only
        # has a PREPARE may have had it reclaimed (it changes nothing either way)
        with_records = {tx for tx, tx_ops in model.txs.items() if tx_ops}
        assert with_records <= set(loaded.rolled_back) <= set(model.txs)
        # the journal goes on from there
        recovered.start(run_all)
        recovered.add(10_000, 1, b"after the crash")
        recovered.stop()
        model.records[10_000] = (1, b"after the crash", [])
        again = FileJournal(crashed, **OPTIONS)
        assert loaded_state(again.load()) == model.state()
        again.stop()
