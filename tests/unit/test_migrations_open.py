"""A migration to this node that began and has not said MIGRATION_DONE stays open across a
restart of this node (core/migrations_open.py): the mark is a journal record written in the
store transaction of the origin's first migrated messages (or at its first MIGRATE_QUEUE),
deleted at MIGRATION_DONE. Crashes are a copy of the data directory taken while the store is
open (what ``kill -9`` leaves)."""

from __future__ import annotations

import asyncio
import shutil
import sys
import threading
from pathlib import Path

import pytest

from petrel.client.link import open_link
from petrel.codec.core import CreateSession
from petrel.codec.core.cluster import MigrateBatch, Migrated, MigrateQueue, MigrationBegin, MigrationDone
from petrel.config import BrokerConfig
from petrel.core.message import Message
from petrel.core.migrations_open import OpenMigrations
from petrel.server.broker import Broker
from petrel.storage.file_store import FileStore, RecordKind, pack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_migrate_batch_frames import QUEUE, Owner  # noqa: E402  (a link's owner that records its events)

ORIGIN = "origin-node"


def flush(store: FileStore) -> None:
    done = threading.Event()
    store.sync(done.set)
    assert done.wait(10)


def crashed(store: FileStore, path, to) -> FileStore:
    """The directory as a kill -9 now would leave it, opened by a new store."""
    flush(store)
    shutil.copytree(path, to)
    return FileStore(to, file_size=256 * 1024, datasync=False)


def test_the_mark_is_kept_with_the_messages_of_its_transaction_and_not_without_them(tmp_path):
    store = FileStore(tmp_path / "a", file_size=256 * 1024, datasync=False)
    store.recover()
    marks = OpenMigrations(store)
    tx = store.begin()
    marks.open(ORIGIN, tx)
    marks.open(ORIGIN, tx)  # (once per origin)
    store.add_message(tx, Message(store.next_id(), QUEUE, b"m", {}, True), [(1, 0)])
    uncommitted = crashed(store, tmp_path / "a", tmp_path / "before-commit").recover()
    assert uncommitted.migrations_open == [] and uncommitted.messages == []
    store.commit(tx)
    recovered = crashed(store, tmp_path / "a", tmp_path / "after-commit").recover()
    assert [origin for _, origin in recovered.migrations_open] == [ORIGIN] and len(recovered.messages) == 1
    assert ORIGIN in OpenMigrations(store, recovered.migrations_open)
    assert marks.close(ORIGIN) and not marks.close(ORIGIN)
    assert crashed(store, tmp_path / "a", tmp_path / "after-done").recover().migrations_open == []
    store.close()


def test_a_record_of_another_format_version_is_refused(tmp_path):
    store = FileStore(tmp_path, file_size=256 * 1024, datasync=False)
    store.recover()
    store.messages.add(store.next_id(), RecordKind.MIGRATION_OPEN, pack((9, ORIGIN, 0)))
    flush(store)
    store.close()
    with pytest.raises(ValueError, match="format version 9"):
        FileStore(tmp_path, file_size=256 * 1024, datasync=False).recover()


def test_a_second_record_for_one_origin_is_dropped_at_recovery(tmp_path):
    store = FileStore(tmp_path, file_size=256 * 1024, datasync=False)
    store.recover()
    first, second = store.add_migration_open(0, ORIGIN), store.add_migration_open(0, ORIGIN)
    flush(store)
    marks = OpenMigrations(store, [(first, ORIGIN), (second, ORIGIN)])
    assert list(marks) == [ORIGIN]
    flush(store)
    store.close()
    assert [rid for rid, _ in FileStore(tmp_path, file_size=256 * 1024, datasync=False).recover().migrations_open] \
        == [first]


# -- on a broker, over the migration protocol ---------------------------------------------------


def migrated(n: int) -> Migrated:
    return Migrated(QUEUE, True, 4, 0, 0, 0, {}, b"m%d" % n, 0, f"{ORIGIN}:{n}@3")


async def session(broker: Broker, steps: list) -> None:
    """A migration link from ORIGIN doing `steps`: "begin", "queue", ("batch", [n...]), "done"."""
    config = broker.config
    owner = Owner()
    link = await open_link(owner, f"127.0.0.1:{broker.ports['all']}", user="", password="", ttl_ms=60_000,
                           client="test", max_frame_size=config.max_frame_size, timeout=10)
    await owner.wait(lambda: owner.events or owner.lost)
    asked = 0
    for step in steps:
        if step == "begin":
            link.send(MigrationBegin(1, ORIGIN, config.cluster_user, config.cluster_password))
            link.send(CreateSession(2, 1, False))
            asked += 2
        elif step == "queue":
            link.send(MigrateQueue(3, QUEUE, QUEUE, 0, True))
            asked += 1
        elif step == "done":
            link.send(MigrationDone(4))
            asked += 1
        else:
            numbers = step[1]
            link.send(MigrateBatch(1, 0, [QUEUE], [migrated(n) for n in numbers]))
            await owner.wait(lambda: owner.lost or any(type(e).__name__ == "SendConfirm" and e.count >= len(numbers)
                                                       for e in owner.events))
        await owner.wait(lambda: len(owner.named("Result")) >= asked or owner.lost)
    assert owner.lost is None
    link.close("done")


async def on_broker(tmp_path, steps: list) -> tuple[list[str], list[str]]:
    """Start a broker on `tmp_path`, note what it recovered open, run `steps`; what was open at
    the start and at the end."""
    config = BrokerConfig.model_validate({"data_dir": tmp_path / "data", "host": "127.0.0.1", "port": 0,
                                          "stomp_port": -1, "http_port": -1, "security_enabled": False})
    broker = Broker(config)
    await broker.start()
    try:
        before = list(broker.migrations_open)
        if steps:
            await session(broker, steps)
        return before, list(broker.migrations_open)
    finally:
        await broker.stop()


def test_a_migration_stays_open_across_restarts_until_it_is_done(tmp_path):
    # a probe (MIGRATION_BEGIN and nothing else) opens nothing
    assert asyncio.run(on_broker(tmp_path, ["begin"])) == ([], [])
    # a migration killed after some messages: open, and still open after a restart
    assert asyncio.run(on_broker(tmp_path, ["begin", "queue", ("batch", range(5))])) == ([], [ORIGIN])
    assert asyncio.run(on_broker(tmp_path, [])) == ([ORIGIN], [ORIGIN])
    # resumed to the end: closed, and still closed after a restart
    assert asyncio.run(on_broker(tmp_path, ["begin", "queue", ("batch", range(5, 9)), "done"])) == ([ORIGIN], [])
    assert asyncio.run(on_broker(tmp_path, [])) == ([], [])
    # the same origin migrating again (a second drain): open again until done
    assert asyncio.run(on_broker(tmp_path, ["begin", ("batch", range(9, 12))])) == ([], [ORIGIN])
    assert asyncio.run(on_broker(tmp_path, ["begin", "done"])) == ([ORIGIN], [])
