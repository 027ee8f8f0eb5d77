"""Power loss, simulated at the journal level.

A ``kill -9`` leaves the OS page cache intact, so it cannot show a missing or misplaced
``fdatasync``.  Here the disk itself is simulated: every ``fsync``/``fdatasync`` of a file
snapshots what is then durable; a crash keeps, of everything written after a file's last
completed sync, a random subset of its 4 KiB pages (some of them torn at a 512-byte sector),
the rest reading as they were at that sync (zeros or a reused file's stale records).  The crash
lands at a random sync, before it completes: the batch being synced is written but not durable.
Some batches are written as nobody waits on them (the writer syncs those with a later batch):
a crash may lose them too, never a record synced before them.

After each crash the journal is loaded again, strictly (no ``skip_damaged``): recovery must
never refuse a state a power loss can produce, must keep every confirmed (synced) record, and
what it gives back must be exactly the journal after some prefix of the appends, no shorter
than what was confirmed.  Then the run goes on from there, crashing again, over many seeds.
"""

from __future__ import annotations

import os
import random
import stat

import pytest

from petrel.storage.journal import DamagedJournal, FileJournal
from petrel.storage.journal import writer as writer_module

SIZE = 16 * 1024  # small segments: rollovers, reused files
PAGE = 4096
SECTOR = 512
SEEDS = int(os.environ.get("PETREL_POWERLOSS_SEEDS", "150"))


class Crash(BaseException):
    """The power goes out (not an OSError: nothing may handle it)."""


class Disk:
    """Durable contents by inode, kept at each sync; a crash at the ``crash_at``-th batch sync."""

    def __init__(self, monkeypatch, rng: random.Random) -> None:
        self.rng = rng
        self.durable: dict[int, bytes] = {}
        self.batch_syncs = 0
        self.crash_at = -1

        def snapshot(fd: int) -> None:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                self.durable[st.st_ino] = os.pread(fd, st.st_size, 0)

        def fsync(fd: int) -> None:  # files, directories: what they hold is durable now
            snapshot(fd)

        def batch_sync(fd: int) -> None:
            self.batch_syncs += 1
            if self.batch_syncs == self.crash_at:
                raise Crash()
            snapshot(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fsync)
        monkeypatch.setattr(writer_module, "_datasync", batch_sync)

    def power_loss(self, directory) -> int:
        """Rewrite every file as a power loss may leave it; returns the pages that differed."""
        changed = 0
        for entry in os.scandir(directory):
            if not entry.is_file():
                continue
            with open(entry.path, "r+b") as f:
                current = f.read()
                old = self.durable.get(os.fstat(f.fileno()).st_ino)
                if old is None:
                    continue  # never synced: a pool file being made (its name was never synced)
                old = old.ljust(len(current), b"\0")[:len(current)]
                out = bytearray(current)
                for start in range(0, len(current), PAGE):
                    page = slice(start, start + PAGE)
                    if current[page] == old[page]:
                        continue
                    changed += 1
                    fate = self.rng.random()
                    if fate < 0.45:
                        out[page] = old[page]  # this page never reached the disk
                    elif fate < 0.6:  # torn: the first sectors made it
                        cut = start + self.rng.randrange(1, PAGE // SECTOR) * SECTOR
                        out[cut:start + PAGE] = old[cut:start + PAGE]
                    # else: the page made it
                f.seek(0)
                f.write(out)
                self.durable[os.fstat(f.fileno()).st_ino] = bytes(out)  # after the reboot, this is the disk
        return changed


def state_after(ops: list, n: int, base: dict) -> dict:
    """The journal's records after the first ``n`` appends (transactions apply at COMMIT)."""
    records = {rid: (ut, body, list(ups)) for rid, (ut, body, ups) in base.items()}
    txs: dict[int, list] = {}
    for op in ops[:n]:
        kind = op[0]
        if kind == "add":
            _, rid, ut, body = op
            records.pop(rid, None)
            records[rid] = (ut, body, [])
        elif kind == "update":
            _, rid, ut, body = op
            if rid in records:
                records[rid][2].append((ut, body))
        elif kind == "delete":
            records.pop(op[1], None)
        elif kind == "tx":
            txs.setdefault(op[1], []).append(op[2])
        elif kind == "commit":
            for inner in txs.pop(op[1], []):
                if inner[0] == "add":
                    records.pop(inner[1], None)
                    records[inner[1]] = (inner[2], inner[3], [])
                elif inner[0] == "update" and inner[1] in records:
                    records[inner[1]][2].append((inner[2], inner[3]))
                elif inner[0] == "delete":
                    records.pop(inner[1], None)
    return records


def loaded_state(loaded) -> dict:
    return {rid: (r.user_type, r.body, list(r.updates)) for rid, r in loaded.records.items()}


class Run:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_id = 1
        self.next_tx = 1_000_000

    def body(self) -> bytes:
        size = self.rng.choice([0, 10, 200, 1500, 3000, 6000])
        return self.rng.randbytes(size)

    def step(self, journal: FileJournal, live: set, ops: list) -> None:
        """Append a few random records, mirroring them in ``ops``."""
        rng = self.rng
        for _ in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.45 or not live:
                rid, body, ut = self.next_id, self.body(), rng.randrange(5)
                self.next_id += 1
                journal.add(rid, ut, body)
                live.add(rid)
                ops.append(("add", rid, ut, body))
            elif roll < 0.65:
                rid, body = rng.choice(sorted(live)), self.body()
                journal.update(rid, 7, body)
                ops.append(("update", rid, 7, body))
            elif roll < 0.8:
                rid = rng.choice(sorted(live))
                journal.delete(rid)
                live.discard(rid)
                ops.append(("delete", rid))
            else:
                tx = self.next_tx
                self.next_tx += 1
                for _ in range(rng.randint(1, 3)):
                    rid, body = self.next_id, self.body()
                    self.next_id += 1
                    journal.add_tx(tx, rid, 1, body)
                    ops.append(("tx", tx, ("add", rid, 1, body)))
                    live.add(rid)
                if live and rng.random() < 0.5:
                    rid = rng.choice(sorted(live))
                    journal.update_tx(tx, rid, 8, b"tx-update")
                    ops.append(("tx", tx, ("update", rid, 8, b"tx-update")))
                journal.commit(tx)
                ops.append(("commit", tx))


def one_seed(path, monkeypatch, seed: int) -> None:
    rng = random.Random(seed)
    disk = Disk(monkeypatch, rng)
    run = Run(rng)
    base: dict = {}
    for _cycle in range(3):
        journal = FileJournal(path, file_size=SIZE, min_files=2, pool_files=2, compact_percentage=0)
        try:
            loaded = journal.load()  # strict: a power loss never needs --skip-damaged
        except DamagedJournal as e:
            pytest.fail(f"seed {seed}: recovery refused a state a power loss can leave: {e}")
        got = loaded_state(loaded)
        if _cycle:
            assert any(got == state_after(ops, n, base) for n in range(confirmed, len(ops) + 1)), (
                f"seed {seed}: recovered state is no prefix of the appends at least as long as the "
                f"{confirmed} confirmed ones (of {len(ops)})")
        base = got
        run.next_id = max([run.next_id, *got]) + 1 if got else run.next_id
        live = set(got)
        ops: list = []
        confirmed = 0
        disk.batch_syncs = 0
        disk.crash_at = rng.randint(1, 12)
        try:
            while True:
                run.step(journal, live, ops)
                roll = rng.random()
                if roll < 0.55:  # a sync: what it covers is confirmed once it returns
                    journal._writer.flush_now()
                    confirmed = len(ops)
                    if rng.random() < 0.5:  # reclaim dead segments: their files come back with stale records
                        journal._writer._housekeeping()
                elif roll < 0.8:  # a batch nobody waits on: written, not synced, confirmed by nothing
                    journal._writer.flush_now(lazy=True)
        except Crash:
            pass
        journal._writer.close()
        disk.power_loss(path)


@pytest.mark.parametrize("block", range(5))
def test_power_loss_never_loses_a_synced_record_nor_refuses_to_start(tmp_path, monkeypatch, block):
    for seed in range(block, SEEDS, 5):
        directory = tmp_path / f"seed-{seed}"
        with monkeypatch.context() as m:
            one_seed(directory, m, seed)


def test_real_damage_to_synced_data_of_the_newest_segment_still_stops_the_broker(tmp_path):
    """A hole before the last MARK of the newest segment is in data that was synced: damage."""
    journal = FileJournal(tmp_path, file_size=SIZE)
    journal.load()
    for rid in range(1, 6):
        journal.add(rid, 0, bytes([rid]) * 300)
        journal._writer.flush_now()  # each its own synced batch: MARKs follow
    journal._final_mark = lambda: None  # a crash: no closing MARK
    journal.stop()
    path = tmp_path / "petrel-data-1.pj"
    data = bytearray(path.read_bytes())
    at = data.find(bytes([2]) * 300)
    data[at + 10] ^= 0x40  # record 2: synced, and MARKs after it say so
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedJournal) as info:
        FileJournal(tmp_path, file_size=SIZE).load()
    assert str(path) in str(info.value) and "offset" in str(info.value)


def test_a_hole_after_the_last_sync_point_is_a_torn_tail_and_appends_resume_there(tmp_path):
    journal = FileJournal(tmp_path, file_size=SIZE)
    journal.load()
    journal.add(1, 0, b"a" * 300)
    journal._writer.flush_now()
    journal.add(2, 0, b"b" * 300)  # one unsynced batch: 2, 3, 4 (after a MARK)
    journal.add(3, 0, b"c" * 300)
    journal.add(4, 0, b"d" * 300)
    journal._final_mark = lambda: None
    journal.stop()
    path = tmp_path / "petrel-data-1.pj"
    data = bytearray(path.read_bytes())
    at = data.find(b"c" * 300)
    data[at:at + 300] = bytes(300)  # record 3 lost, 4 made it: a reordered write
    path.write_bytes(bytes(data))
    again = FileJournal(tmp_path, file_size=SIZE)
    loaded = again.load()
    assert list(loaded.records) in ([1], [1, 2])
    again.start(lambda cbs: [cb() for cb in cbs])
    again.add(9, 0, b"z" * 50)
    again.stop()
    final = FileJournal(tmp_path, file_size=SIZE)
    assert list(final.load().records) == list(loaded.records) + [9]  # 4 never comes back
    final.stop()
