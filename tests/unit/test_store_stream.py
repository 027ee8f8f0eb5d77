"""The store stream: every change to the data directory, in order, and the initial copy made
while the live serves; applied to a `ReplicaDirectory`, the copy is the live's directory.

A real FileStore runs a workload (queues, messages with references, acks, delivery counts,
transactions, duplicate IDs, paging with page cursors, large messages, forced compactions);
the initial sync starts in the middle of it, with a compaction, page deletions and large
message deletions while the copy runs. Both directories are then byte for byte the same, and
recover to the same state. Cut anywhere after the copy is complete, the replica recovers (as
after a crash) with every message whose sync the gate let through at or before the cut.
"""

from __future__ import annotations

import os
import queue
import random
import shutil
import threading
import time
from pathlib import Path

import pytest

from petrel.core.message import LargeBody, Message
from petrel.storage.file_store import FileStore
from petrel.storage.large import LargeMessageStore
from petrel.storage.paging import PagePosition
from petrel.storage.replica import ReplicaDirectory
from petrel.storage.store import AddressRecord, QueueRecord
from petrel.storage.stream import SyncDone

STORE = dict(file_size=16 * 1024, page_size=4096, datasync=False, compact_percentage=0)  # compactions: forced ones


def wait_for(condition, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


class Link:
    """The replication link: the sink puts batches on a thread-safe queue; a thread applies
    them to the replica. Every batch is also kept (the prefix test cuts them)."""

    def __init__(self, directory: Path, *, sync: bool = False) -> None:
        self.replica = ReplicaDirectory(directory, sync=sync)
        self.queue: queue.Queue = queue.Queue()
        self.log: list[tuple[int, object]] = []
        self.sync_done_seq = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def sink(self, first: int, ops: list) -> None:
        for i, op in enumerate(ops):
            self.log.append((first + i, op))
            if isinstance(op, SyncDone):
                self.sync_done_seq = first + i
        self.queue.put((first, ops))

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is None:
                    return
                if self.error is None:
                    self.replica.apply(*item)
            except BaseException as e:
                self.error = e
            finally:
                self.queue.task_done()

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join(10)
        self.replica.close()
        if self.error is not None:
            raise self.error


class Waiter:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.error: BaseException | None = None

    def done(self) -> None:
        self.event.set()

    def failed(self, error: BaseException) -> None:
        self.error = error
        self.event.set()


def durable(store: FileStore) -> None:
    w = Waiter()
    store.sync(w.done, failed=w.failed)
    assert w.event.wait(10), "sync never completed"
    assert w.error is None, w.error


def tree(root: Path) -> dict[str, bytes]:
    out = {}
    for top, _dirs, files in os.walk(root):
        for name in files:
            path = Path(top) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


class Workload:
    """A seeded mix of everything FileStore and the large-message store do to the directory."""

    def __init__(self, store: FileStore, large: LargeMessageStore, rng: random.Random) -> None:
        self.store = store
        self.large = large
        self.rng = rng
        self.queues: list[int] = []
        self.live: dict[int, set[int]] = {}  # message id -> queues still referencing it
        self.seq = 0
        self.paging_queues: dict[int, list] = {}  # queue id -> [cursor record, position]
        self.large_ids: list[int] = []
        self.acked: set[int] = set()

    def setup(self) -> None:
        s = self.store
        s.add_address(AddressRecord(s.next_id(), "a", [0]))
        for name in ("q1", "q2", "q3"):
            qid = s.next_id()
            s.add_queue(QueueRecord(qid, name, "a", 0))
            self.queues.append(qid)
        for name in ("p1", "p2"):
            qid = s.next_id()
            s.add_queue(QueueRecord(qid, name, "a", 0))
            self.paging_queues[qid] = [s.create_page_cursor(qid), PagePosition(0, 0)]

    def message(self, size: int | None = None) -> Message:
        size = size if size is not None else self.rng.randint(10, 600)
        mid = self.store.next_id()
        return Message(id=mid, address="a", body=self.rng.randbytes(size), durable=True)

    def send(self) -> None:
        s, rng = self.store, self.rng
        m = self.message()
        qids = rng.sample(self.queues, rng.randint(1, 2))
        refs = []
        for qid in qids:
            self.seq += 1
            refs.append((qid, self.seq))
        tx = s.begin() if rng.random() < 0.3 else 0
        s.add_message(tx, m, refs)
        if rng.random() < 0.3:
            s.add_duplicate_id(tx, s.next_id(), "a", f"dup-{m.id}")
        if tx:
            if rng.random() < 0.8:
                s.commit(tx)
                self.live[m.id] = set(qids)
            else:
                s.rollback(tx)
        else:
            self.live[m.id] = set(qids)

    def ack(self) -> None:
        if not self.live:
            return
        s, rng = self.store, self.rng
        mid = rng.choice(sorted(self.live))
        qid = rng.choice(sorted(self.live[mid]))
        if rng.random() < 0.3:
            s.update_delivery_count(mid, qid, rng.randint(1, 5))
            return
        tx = s.begin() if rng.random() < 0.3 else 0
        s.ack(tx, mid, qid)
        self.live[mid].discard(qid)
        self.acked.add(mid)
        if not self.live[mid]:
            del self.live[mid]
            s.delete_message(tx, mid)
        if tx:
            s.commit(tx)

    def page(self) -> None:
        qid = self.rng.choice(sorted(self.paging_queues))
        for _ in range(self.rng.randint(1, 6)):
            self.seq += 1
            self.store.page(qid, self.seq, self.message())

    def depage(self) -> None:
        """Move a batch of paged messages into the journal, with the cursor, in one transaction."""
        s = self.store
        qid = self.rng.choice(sorted(self.paging_queues))
        durable(s)  # written and durable: a read sees them
        wait_for(lambda: not s.pages_in_flight(qid), what="page writes")
        record, position = self.paging_queues[qid]
        read = s.read_pages(qid, position, self.rng.randint(200, 3000))
        if not read:
            return
        tx = s.begin()
        for paged in read:
            s.add_message(tx, paged.message, [(qid, paged.seq)])
            self.live[paged.message.id] = {qid}
        new_position = read[-1].position
        self.paging_queues[qid] = [s.update_page_cursor(tx, record, qid, new_position), new_position]
        s.commit(tx)
        s.release_pages(qid, new_position)

    def drop_paging_queue(self) -> None:
        """A paging queue deleted: its cursor and every page file go."""
        s = self.store
        qid = self.rng.choice(sorted(self.paging_queues))
        record, _ = self.paging_queues.pop(qid)
        s.delete_pages(qid, record)
        s.delete_queue(qid)

    def send_large(self) -> None:
        s, rng = self.store, self.rng
        m = self.message(0)
        chunks = [rng.randbytes(rng.randint(1000, 9000)) for _ in range(rng.randint(1, 4))]
        m.large = self.large.write(m.id, chunks)
        qid = rng.choice(self.queues)
        self.seq += 1
        s.add_message(0, m, [(qid, self.seq)])
        self.live[m.id] = {qid}
        self.large_ids.append(m.id)
        if rng.random() < 0.4:  # a copy (a divert, say): a hard link under its own id
            copy = self.message(0)
            copy.large = self.large.link(m.large, copy.id)
            self.seq += 1
            s.add_message(0, copy, [(qid, self.seq)])
            self.live[copy.id] = {qid}
            self.large_ids.append(copy.id)

    def drop_large(self) -> None:
        """Acknowledge a large message: its record goes, then (once durable) its file."""
        live = [mid for mid in self.large_ids if mid in self.live]
        if not live:
            return
        mid = self.rng.choice(live)
        s = self.store
        for qid in sorted(self.live.pop(mid)):
            s.ack(0, mid, qid)
        s.delete_message(0, mid)
        self.acked.add(mid)
        durable(s)
        self.large.delete(LargeBody.for_message(mid, 0))

    def drain(self, fraction: float) -> None:
        """Acknowledge most messages: old segments become mostly dead, worth compacting."""
        for _ in range(int(len(self.live) * fraction)):
            mid = self.rng.choice(sorted(self.live))
            for qid in sorted(self.live.pop(mid)):
                self.store.ack(0, mid, qid)
            self.store.delete_message(0, mid)
            self.acked.add(mid)

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.40:
            self.send()
        elif r < 0.62:
            self.ack()
        elif r < 0.75:
            self.page()
        elif r < 0.82:
            self.depage()
        elif r < 0.90:
            self.send_large()
        elif r < 0.95:
            self.drop_large()
        else:
            durable(self.store)


def compact_beside(store: FileStore, copier, workload: Workload) -> None:
    """A forced compaction of the message journal while the copy goes on and appends continue."""
    result: list = []
    assert not copier.done
    thread = threading.Thread(target=lambda: result.append(store.messages.compact()), daemon=True)
    thread.start()
    while thread.is_alive():
        copier.step()
        workload.send()
        thread.join(0.001)
    assert result and result[0] > 0, "the compaction did nothing"


def recovered_state(directory: Path) -> dict:
    store = FileStore(directory, **STORE)
    rec = store.recover()
    try:
        messages = sorted(
            (m.id, m.address, m.body, m.large, sorted((r.queue_id, r.seq, r.delivery_count) for r in refs))
            for m, refs in rec.messages)
        paged = {}
        for qid, (_record, position) in rec.page_cursors.items():
            paged[qid] = [(p.seq, p.message.id, p.message.body, p.position)
                          for p in store.read_pages(qid, position, 1 << 30)]
        return {
            "queues": sorted((q.id, q.name, q.seq_reserved) for q in rec.queues),
            "addresses": sorted((a.id, a.name) for a in rec.addresses),
            "messages": messages,
            "duplicate_ids": rec.duplicate_ids,
            "page_cursors": {qid: pos for qid, (_r, pos) in rec.page_cursors.items()},
            "paged": paged,
        }
    finally:
        store.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_initial_sync_in_the_middle_of_a_workload_gives_the_same_directory(tmp_path, seed):
    rng = random.Random(seed)
    live_dir, replica_dir = tmp_path / "live", tmp_path / "replica"
    live_dir.mkdir()
    (live_dir / "server.lock").write_bytes(b"PTRLOCK1" + bytes(range(16)))  # the node ID travels too
    store = FileStore(live_dir, **STORE)
    store.recover()
    large = LargeMessageStore(live_dir / "large-messages", sync=False, stream=store.stream)
    work = Workload(store, large, rng)
    work.setup()
    for _ in range(rng.randint(300, 500)):
        work.step()
    work.drain(0.8)
    for _ in range(3):
        work.send_large()
    work.page()
    durable(store)

    link = Link(replica_dir)
    copier = store.stream.start_sync(link.sink, chunk_size=rng.choice([512, 4096, 16384]))
    assert "server.lock" in copier.manifest
    for _ in range(3):
        copier.step()
    # while the copy runs: a compaction, page files deleted, large files deleted
    compact_beside(store, copier, work)
    work.depage()
    copier.step()
    work.drop_paging_queue()
    work.drop_large()
    work.drop_large()
    while copier.step():
        if rng.random() < 0.5:
            work.step()
    assert link.sync_done_seq
    for _ in range(rng.randint(50, 150)):
        work.step()
    store.messages.compact()
    for _ in range(20):
        work.step()
    durable(store)
    store.close()
    copier.subscription.close()
    link.queue.join()
    link.close()

    live_files, replica_files = tree(live_dir), tree(replica_dir)
    assert sorted(live_files) == sorted(replica_files)
    for name in live_files:
        assert live_files[name] == replica_files[name], f"{name} differs"
    assert any(name.startswith("paging/") for name in live_files)
    assert any(name.startswith("large-messages/") for name in live_files)

    live_state, replica_state = recovered_state(live_dir), recovered_state(replica_dir)
    assert live_state == replica_state
    assert live_state["messages"] and live_state["paged"] and live_state["duplicate_ids"]
    assert tree(live_dir / "large-messages") == tree(replica_dir / "large-messages")


class RecordingGate:
    """Lets every sync through at once, noting the stream's seq at that moment."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.seq_of: dict[int, int] = {}

    def after(self, done, failed) -> None:
        with self.lock:
            self.seq_of[id(done)] = self.store.stream.seq
        done()


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_a_cut_anywhere_after_the_sync_keeps_every_message_the_gate_let_through(tmp_path, seed):
    rng = random.Random(seed)
    live_dir = tmp_path / "live"
    store = FileStore(live_dir, **STORE)
    store.recover()
    large = LargeMessageStore(live_dir / "large-messages", sync=False, stream=store.stream)
    work = Workload(store, large, rng)
    work.setup()
    for _ in range(300):
        work.step()
    work.drain(0.7)
    link = Link(tmp_path / "replica")
    copier = store.stream.start_sync(link.sink, chunk_size=8192)
    while copier.step():
        work.step()
    link.queue.join()
    assert link.replica.synced
    start = link.sync_done_seq

    gate = RecordingGate(store)
    store.set_gate(gate)
    confirmed: list[tuple[int, int]] = []  # (message id, the gate's seq when its sync went through)
    for i in range(120):
        m = work.message()
        qid = rng.choice(work.queues)
        work.seq += 1
        store.add_message(0, m, [(qid, work.seq)])
        work.live[m.id] = {qid}
        w = Waiter()
        done = w.done  # one bound method: the gate knows it by its id
        store.sync(done, failed=w.failed)
        assert w.event.wait(10) and w.error is None
        confirmed.append((m.id, gate.seq_of[id(done)]))
        for _ in range(rng.randint(0, 3)):
            work.step()
        if i == 60:
            work.drain(0.9)
            compacted: list[int] = []
            compact_thread = threading.Thread(target=lambda: compacted.append(store.messages.compact()),
                                              daemon=True)
            compact_thread.start()
    compact_thread.join(10)
    assert compacted and compacted[0] > 0, "the compaction did nothing"
    store.close()
    copier.subscription.close()
    link.queue.join()
    link.close()

    base = tmp_path / "base"  # the copy as it was when complete
    first = link.log[0][0]
    replica = ReplicaDirectory(base, sync=False)
    replica.apply(first, [op for seq, op in link.log if seq <= start])
    replica.close()
    assert replica.synced
    ops = [(seq, op) for seq, op in link.log if seq > start]
    assert ops and ops[0][0] == start + 1
    last = ops[-1][0]
    cuts = sorted({rng.randint(start, last) for _ in range(5)} | {seq for _mid, seq in confirmed[::40]})
    for k in cuts:
        cut = tmp_path / f"cut-{k}"
        shutil.copytree(base, cut)
        replica = ReplicaDirectory(cut, sync=False)
        prefix = [op for seq, op in ops if seq <= k]
        if prefix:
            replica.apply(start + 1, prefix)
        replica.close()
        recovered = FileStore(cut, **STORE)
        rec = recovered.recover()
        ids = {m.id for m, _refs in rec.messages}
        recovered.close()
        expected = {mid for mid, seq in confirmed if seq <= k and mid not in work.acked}
        assert expected <= ids, f"cut at {k}: lost {sorted(expected - ids)[:10]}"
        shutil.rmtree(cut)


class HoldingGate:
    def __init__(self) -> None:
        self.held: list = []

    def after(self, done, failed) -> None:
        self.held.append((done, failed))


def test_the_gate_holds_a_confirmation_until_it_releases_it(tmp_path):
    store = FileStore(tmp_path, **STORE)
    store.recover()
    gate = HoldingGate()
    store.set_gate(gate)
    try:
        qid = store.next_id()
        store.add_queue(QueueRecord(qid, "q", "q", 0))
        store.add_message(0, Message(id=store.next_id(), address="q", body=b"x", durable=True), [(qid, 1)])
        w = Waiter()
        store.sync(w.done, failed=w.failed)
        wait_for(lambda: gate.held, what="the gate to be asked")
        assert not w.event.is_set(), "confirmed while the gate withheld it"
        done, failed = gate.held.pop()
        assert failed == w.failed
        done()
        assert w.event.is_set() and w.error is None

        # a paged send's duplicate ID waits for its page, then the journal, then the gate
        m = Message(id=store.next_id(), address="q", body=b"p", durable=True)
        store.page(qid, 2, m, home=True)
        store.add_duplicate_id_after_pages(store.next_id(), "q", "dup-1")
        w2 = Waiter()
        store.sync(w2.done, failed=w2.failed)
        wait_for(lambda: gate.held, what="the gate to be asked after the pages")
        assert not w2.event.is_set()
        _done, failed = gate.held.pop()
        failed(OSError("the backup went away"))  # the gate's failure reaches the caller
        assert w2.event.is_set() and isinstance(w2.error, OSError)

        store.set_gate(None)  # no gate: done at once, as before
        w3 = Waiter()
        store.sync(w3.done, failed=w3.failed)
        assert w3.event.wait(10) and w3.error is None
    finally:
        store.close()


def test_a_local_failure_reaches_failed_without_the_gate(tmp_path, monkeypatch):
    from petrel.storage.journal import writer as writer_module

    store = FileStore(tmp_path, file_size=32 * 1024, page_size=4096, datasync=True)
    store.recover()
    gate = HoldingGate()
    store.set_gate(gate)
    real = writer_module._datasync

    def failing(fd):
        raise OSError(5, "EIO")

    monkeypatch.setattr(writer_module, "_datasync", failing)
    try:
        store.add_message(0, Message(id=store.next_id(), address="q", body=b"x", durable=True), [])
        w = Waiter()
        store.sync(w.done, failed=w.failed)
        assert w.event.wait(10)
        assert isinstance(w.error, OSError) and not gate.held
    finally:
        monkeypatch.setattr(writer_module, "_datasync", real)
        store.close()
