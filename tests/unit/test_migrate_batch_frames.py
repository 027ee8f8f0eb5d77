"""MIGRATE_BATCH on a real in-process broker over a real socket: a batch is confirmed as its
messages, which the queue then holds in order; a message property that is not a scalar ends the
migration's connection with a PROTOCOL error and leaves nothing of its batch behind."""

from __future__ import annotations

import asyncio

from petrel.client.link import open_link
from petrel.codec.core import CreateSession, ErrorCode
from petrel.codec.core.cluster import MigrateBatch, Migrated, MigrateQueue, MigrationBegin
from petrel.config import BrokerConfig
from petrel.server.broker import Broker

QUEUE = "moved"


class Owner:
    def __init__(self) -> None:
        self.events: list[object] = []
        self.lost: str | None = None
        self.changed = asyncio.Event()

    def link_event(self, link, event) -> None:
        self.events.append(event)
        self.changed.set()

    def link_lost(self, link, reason: str) -> None:
        self.lost = reason
        self.changed.set()

    def link_writable(self, link, writable: bool) -> None:
        pass

    async def wait(self, condition, timeout: float = 10.0):
        async def until():
            while not condition():
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(until(), timeout)

    def named(self, name: str) -> list:
        return [e for e in self.events if type(e).__name__ == name]


def migrated(n: int, properties: dict) -> Migrated:
    return Migrated(QUEUE, True, 4, 0, 0, 0, properties, b"m%d" % n, 0, f"origin-node:{n}@3")


async def migrate(tmp_path, batches: list[list[Migrated]]) -> tuple[Owner, int]:
    config = BrokerConfig.model_validate({"data_dir": tmp_path / "data", "host": "127.0.0.1", "port": 0,
                                          "stomp_port": -1, "http_port": -1, "security_enabled": False})
    broker = Broker(config)
    await broker.start()
    try:
        owner = Owner()
        link = await open_link(owner, f"127.0.0.1:{broker.ports['all']}", user="", password="", ttl_ms=60_000,
                               client="test", max_frame_size=config.max_frame_size, timeout=10)
        await owner.wait(lambda: owner.named("Connected") or owner.lost)
        link.send(MigrationBegin(1, "origin-node", config.cluster_user, config.cluster_password))
        link.send(MigrateQueue(2, QUEUE, QUEUE, 0, True))
        link.send(CreateSession(3, 1, False))
        await owner.wait(lambda: len(owner.named("Result")) >= 3 or owner.lost)
        for batch in batches:
            link.send(MigrateBatch(1, 0, [QUEUE], batch))
        await owner.wait(lambda: owner.named("Error") or owner.lost
                         or sum(len(b) for b in batches) in [e.count for e in owner.named("SendConfirm")])
        count = broker.office.queues[QUEUE].message_count
        link.close("done")
        return owner, count
    finally:
        await broker.stop()


def test_a_batch_is_confirmed_and_held_in_order(tmp_path):
    owner, count = asyncio.run(migrate(tmp_path, [[migrated(n, {"n": n, "s": "x", "f": 1.5, "b": b"y", "z": None,
                                                                "t": True}) for n in range(50)]]))
    assert not owner.named("Error") and count == 50
    assert [e.count for e in owner.named("SendConfirm")][-1] == 50


def test_a_property_that_is_not_a_scalar_is_a_protocol_error(tmp_path):
    batch = [migrated(0, {"ok": 1}), migrated(1, {"bad": [1, 2]})]
    owner, count = asyncio.run(migrate(tmp_path, [batch]))
    (error,) = owner.named("Error")
    assert error.code == ErrorCode.PROTOCOL and "scalars" in error.message
    assert count == 0  # nothing of the batch is kept
