"""The initial copy on its own: random changes through a `StoreStream` to a few files (writes,
zeros, truncates, renames, deletes, hard links, before and during the copy) while the copy
steps in tiny chunks; applied to a `ReplicaDirectory`, the copy equals the directory. And
`set_aside` keeps the newest old replicas.

STREAM_SEEDS=3000 runs more seeds (20 by default).
"""

from __future__ import annotations

import os
import random

import pytest

from petrel.storage.replica import ReplicaDirectory
from petrel.storage.stream import StoreStream

from test_store_stream import Link, tree


@pytest.mark.parametrize("seed", range(int(os.environ.get("STREAM_SEEDS", 20))))
def test_the_copy_follows_renames_truncates_links_and_deletes_made_during_it(tmp_path, seed):
    """Random changes through the stream to a few files while the copy steps, tiny chunks."""
    rng = random.Random(seed)
    live, copy = tmp_path / "live", tmp_path / "copy"
    (live / "d").mkdir(parents=True)
    stream = StoreStream(live)
    names = [f"f{i}" for i in range(5)] + [f"d/g{i}" for i in range(3)]

    def write(name: str) -> None:
        path = live / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            stream.pwrite(fd, path, rng.randbytes(rng.randint(1, 300)), rng.randint(0, size + 50))
        finally:
            os.close(fd)

    for name in names:
        if rng.random() < 0.8:
            write(name)
            if rng.random() < 0.3:  # zeros in the middle: skipped by the copy
                fd = os.open(live / name, os.O_RDWR)
                stream.pwrite(fd, live / name, bytes(700), 100)
                os.close(fd)
    if rng.random() < 0.5 and (live / "f0").exists() and not (live / "d/g2").exists():
        os.link(live / "f0", live / "d/g2")  # hard links before the copy: copied as links
    link = Link(copy, sync=seed % 5 == 0)
    copier = stream.start_sync(link.sink, chunk_size=rng.choice([16, 64, 256]))
    running = True
    while running:
        for _ in range(rng.randint(0, 3)):
            running = copier.step()
        existing = [n for n in names if (live / n).exists()]
        r = rng.random()
        if r < 0.35 or not existing:
            write(rng.choice(names))
        elif r < 0.5:
            name = rng.choice(existing)
            fd = os.open(live / name, os.O_RDWR)
            stream.truncate(fd, live / name, rng.randint(0, os.fstat(fd).st_size + 100))
            os.close(fd)
        elif r < 0.7:
            stream.rename(live / rng.choice(existing), live / rng.choice(names))
        elif r < 0.85:
            stream.unlink(live / rng.choice(existing))
        else:
            dst = rng.choice(names)
            if not (live / dst).exists():
                stream.link(live / rng.choice(existing), live / dst)
    link.queue.join()
    assert link.replica.synced
    assert tree(live) == tree(copy)
    for _ in range(10):  # and it stays so
        write(rng.choice(names))
    link.queue.join()
    link.close()
    assert tree(live) == tree(copy)


def test_set_aside_keeps_the_newest_old_replicas(tmp_path):
    data = tmp_path / "node" / "data"
    replica = ReplicaDirectory(data)
    for i in range(4):
        (data / "journal").mkdir()
        (data / "journal" / "seg").write_bytes(b"run %d" % i)
        (data / "server.lock").write_bytes(b"lock")
        saved = replica.set_aside(2, keep=("server.lock",))
        assert saved is not None and (saved / "journal" / "seg").read_bytes() == b"run %d" % i
        assert sorted(os.listdir(data)) == ["server.lock"]
    old = sorted(p.name for p in (tmp_path / "node").iterdir() if p.name.startswith("oldreplica."))
    assert old == ["oldreplica.3", "oldreplica.4"]
    assert (tmp_path / "node" / "oldreplica.4" / "journal" / "seg").read_bytes() == b"run 3"
    assert replica.set_aside(2, keep=("server.lock",)) is None  # nothing to move
    replica.close()


def test_one_initial_sync_at_a_time(tmp_path):
    stream = StoreStream(tmp_path)
    (tmp_path / "f").write_bytes(b"x" * 100)
    first = stream.start_sync(lambda first, ops: None, chunk_size=10)
    with pytest.raises(RuntimeError, match="already running"):
        stream.start_sync(lambda first, ops: None)
    first.run()
    second = stream.start_sync(lambda first, ops: None)  # the first is done
    second.cancel()
    stream.start_sync(lambda first, ops: None).cancel()  # the second was cancelled
