"""Metrics (scraped from an in-process broker and parsed back), memory estimates, the journal hook."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from petrel.config import BrokerConfig
from petrel.core.message import DUPLICATE_ID, Message, RoutingType, now_ms
from petrel.core.postoffice import PostOffice
from petrel.core.queue import Consumer
from petrel.core.settings import AddressSettingsRepository
from petrel.management.usage import address_memory_bytes, directory_bytes
from petrel.server.broker import Broker
from petrel.storage.journal import FileJournal
from petrel.storage.store import NullStore


class NoTimers:
    def call_at_ms(self, when_ms, fn):
        return self

    def cancel(self) -> None:
        pass


def office() -> PostOffice:
    return PostOffice(NullStore(), AddressSettingsRepository({}), NoTimers())


def message(o: PostOffice, address: str, body: bytes, **kw) -> Message:
    return Message(id=o.store.next_id(), address=address, body=body, timestamp=now_ms(), **kw)


@contextlib.asynccontextmanager
async def running(path, **settings):
    config = BrokerConfig(max_disk_usage=100, security_enabled=False, data_dir=path, host="127.0.0.1", port=0, stomp_port=-1, http_port=0,
                          message_expiry_scan_period=-1, **settings)
    async with Broker(config) as broker:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{broker.ports['http']}") as http:
            yield broker, http


async def scrape(http) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}}"""
    async with http.get("/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def q(address: str, queue: str) -> tuple:
    return (("address", address), ("queue", queue))


async def synced(broker: Broker) -> None:
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    broker.store.sync(lambda: loop.call_soon_threadsafe(done.set))
    await asyncio.wait_for(done.wait(), 10)


def test_queue_broker_and_address_metrics(tmp_path):
    async def main():
        async with running(tmp_path / "data", address_settings={"#": {"max_delivery_attempts": 1}}) as (broker, http):
            o = broker.office
            o.create_queue("work", "work", RoutingType.ANYCAST)
            o.create_queue("s1", "news", RoutingType.MULTICAST)
            o.create_queue("s2", "news", RoutingType.MULTICAST)
            for body in (b"a" * 10, b"b" * 20, b"c" * 30):
                o.send(message(o, "work", body, durable=True), RoutingType.ANYCAST)
            o.send(message(o, "news", b"n" * 100), RoutingType.MULTICAST)
            o.send(message(o, "work", b"later", scheduled=now_ms() + 3_600_000), RoutingType.ANYCAST)
            o.create_address("void", {RoutingType.MULTICAST})
            o.send(message(o, "void", b"lost"), RoutingType.MULTICAST)
            o.send(message(o, "work", b"d1", properties={DUPLICATE_ID: "k"}), RoutingType.ANYCAST)
            o.send(message(o, "work", b"d1", properties={DUPLICATE_ID: "k"}), RoutingType.ANYCAST)
            received: list = []
            work = o.queues["work"]
            c = Consumer(work, lambda _c, ref: received.append(ref), window=2)
            o.add_consumer(work, c)
            work.acknowledge(received[0])  # a (10 bytes) done
            work.cancel(received[1])  # b: one attempt too many, to the DLQ
            await synced(broker)
            m = await scrape(http)
            assert m["petrel_message_count"][q("work", "work")] == 3  # c and d1 delivering, one scheduled
            assert m["petrel_message_count"][q("news", "s1")] == 1
            assert m["petrel_message_count"][q("DLQ", "DLQ")] == 1
            assert m["petrel_messages_added_total"][q("work", "work")] == 5
            assert m["petrel_messages_acknowledged_total"][q("work", "work")] == 1
            assert m["petrel_messages_killed_total"][q("work", "work")] == 1
            assert m["petrel_messages_expired_total"][q("work", "work")] == 0
            assert m["petrel_delivering_message_count"][q("work", "work")] == 2
            assert m["petrel_scheduled_message_count"][q("work", "work")] == 1
            assert m["petrel_consumer_count"][q("work", "work")] == 1
            assert m["petrel_consumer_count"][q("news", "s2")] == 0
            memory = m["petrel_address_memory_usage_bytes"]
            assert memory[(("address", "news"),)] == 100  # shared by two queues, counted once
            assert memory[(("address", "work"),)] == 30 + 2 + 5 + 0  # c, d1, later (delivering included)
            assert memory[(("address", "void"),)] == 0
            assert m["petrel_connection_count"][()] == 0
            assert m["petrel_routed_message_count"][()] == o.messages_routed >= 6
            assert m["petrel_unrouted_message_count"][()] == 1
            assert m["petrel_duplicate_message_count"][()] == 1
            info = m["petrel_broker_info"]
            ((labels, value),) = info.items()
            assert dict(labels)["node_id"] == broker.node_id and value == 1
            assert m["petrel_process_resident_memory_bytes"][()] > 0
            assert m["petrel_journal_live_bytes"][(("journal", "messages"),)] > 0
            records = m["petrel_journal_batch_records_count"][(("journal", "messages"),)]
            total = m["petrel_journal_batch_records_sum"][(("journal", "messages"),)]
            assert records >= 1 and total >= 4
            assert m["petrel_journal_batch_size_bytes_sum"][(("journal", "messages"),)] > 60
            assert m["petrel_journal_sync_latency_seconds_count"][(("journal", "messages"),)] >= 1
            assert m["petrel_journal_sync_latency_seconds_sum"][(("journal", "messages"),)] > 0

    asyncio.run(main())


def test_each_broker_has_its_own_registry(tmp_path):
    async def main():
        async with running(tmp_path / "a", name="a") as (a, http_a), running(tmp_path / "b", name="b") as (b, http_b):
            a.office.create_queue("only.a", "only.a", RoutingType.ANYCAST)
            a.office.send(message(a.office, "only.a", b"x"), RoutingType.ANYCAST)
            ma, mb = await scrape(http_a), await scrape(http_b)
            assert ma["petrel_message_count"][q("only.a", "only.a")] == 1
            assert q("only.a", "only.a") not in mb["petrel_message_count"]
            assert {dict(k)["name"] for k in ma["petrel_broker_info"]} == {"a"}
            assert {dict(k)["name"] for k in mb["petrel_broker_info"]} == {"b"}

    asyncio.run(main())


def test_journal_hook_is_detached_on_stop(tmp_path):
    async def main():
        async with running(tmp_path / "d") as (broker, _http):
            journal = broker.store.messages
            assert journal.on_batch_stats is not None
        assert journal.on_batch_stats is None

    asyncio.run(main())


def test_without_persistence_there_are_no_journal_metrics(tmp_path):
    async def main():
        async with running(tmp_path / "m", persistence_enabled=False) as (_broker, http):
            m = await scrape(http)
            assert "petrel_journal_live_bytes" not in m
            assert "petrel_journal_batch_records_count" not in m

    asyncio.run(main())


# -- memory estimate ------------------------------------------------------------------------

def test_address_memory_counts_waiting_delivering_and_scheduled_once():
    o = office()
    o.create_queue("q", "q", RoutingType.ANYCAST)
    for size in (1, 2, 4, 8):
        o.send(message(o, "q", b"x" * size), RoutingType.ANYCAST)
    o.send(message(o, "q", b"x" * 16, scheduled=now_ms() + 60_000), RoutingType.ANYCAST)
    queue = o.queues["q"]
    got: list = []
    o.add_consumer(queue, Consumer(queue, lambda _c, r: got.append(r), window=1))
    assert address_memory_bytes(o.addresses["q"]) == 31
    queue.acknowledge(got[0])
    assert address_memory_bytes(o.addresses["q"]) == 30
    o.create_address("empty", {RoutingType.ANYCAST})
    assert address_memory_bytes(o.addresses["empty"]) == 0


def test_address_memory_is_extrapolated_past_the_sample():
    o = office()
    o.create_queue("big", "big", RoutingType.ANYCAST)
    for _ in range(1000):
        o.send(message(o, "big", b"y" * 7), RoutingType.ANYCAST)
    assert address_memory_bytes(o.addresses["big"], sample=100) == 7000
    assert address_memory_bytes(o.addresses["big"]) == 7000


def test_directory_bytes_sums_nested_files(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one").write_bytes(b"1" * 100)
    (tmp_path / "a" / "b" / "two").write_bytes(b"2" * 23)
    assert directory_bytes(tmp_path) == 123
    assert directory_bytes(tmp_path / "missing") == 0


# -- the journal's per-batch hook --------------------------------------------------------------

def _journal(tmp_path, **kw) -> FileJournal:
    j = FileJournal(tmp_path / "j", file_size=1 << 20, **kw)
    j.load()
    return j


def _write_and_wait(j: FileJournal, ids: range, size: int) -> None:
    done = threading.Event()
    for i in ids:
        j.add(i, 1, b"z" * size)
    j.sync(done.set)
    assert done.wait(10)


def test_journal_reports_each_batch(tmp_path):
    j = _journal(tmp_path)
    seen: list = []
    j.on_batch_stats = lambda records, nbytes, seconds: seen.append((records, nbytes, seconds,
                                                                    threading.current_thread().name))
    j.start(lambda callbacks: [cb() for cb in callbacks])
    try:
        _write_and_wait(j, range(1, 6), 100)
    finally:
        j.stop()
    assert sum(r for r, _, _, _ in seen) == 5
    assert sum(b for _, b, _, _ in seen) >= 500
    assert any(s > 0 for _, _, s, _ in seen)
    assert {t for *_, t in seen} == {"petrel-journal-writer"}


def test_journal_batch_without_sync_reports_zero_seconds(tmp_path):
    j = _journal(tmp_path, datasync=False)
    seen: list = []
    j.on_batch_stats = lambda records, nbytes, seconds: seen.append(seconds)
    j.start(lambda callbacks: [cb() for cb in callbacks])
    try:
        _write_and_wait(j, range(1, 3), 10)
    finally:
        j.stop()
    assert seen and set(seen) == {0.0}


def test_a_failing_hook_is_logged_and_the_journal_goes_on(tmp_path, caplog):
    j = _journal(tmp_path)

    def broken(*_args) -> None:
        raise RuntimeError("boom")

    j.on_batch_stats = broken
    j.start(lambda callbacks: [cb() for cb in callbacks])
    try:
        with caplog.at_level(logging.ERROR, logger="petrel.storage.journal"):
            _write_and_wait(j, range(1, 3), 10)
            _write_and_wait(j, range(3, 5), 10)
    finally:
        j.stop()
    assert "on_batch_stats failed" in caplog.text


# -- HA -------------------------------------------------------------------------------------------

def ha_samples(view: dict) -> dict[str, dict[tuple, float]]:
    """{sample name: {label items: value}} of the HA families for an /api/v1/ha view."""
    from petrel.management.metrics import _ha

    samples: dict[str, dict[tuple, float]] = {}
    for family in _ha(view):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def _replication(state: str, role: str, **links) -> dict:
    return {"policy": "replication", "role": role, "state": state, "failovers": 2, "node_id": "n1",
            "replication": {"group_name": "pair-1", "lock_manager": None, **links}}


def test_ha_metrics_of_a_live_only_broker_scraped(tmp_path):
    async def main():
        async with running(tmp_path / "data") as (_broker, http):
            m = await scrape(http)
            assert m["petrel_ha_live"] == {(): 1.0}
            assert m["petrel_ha_failovers_total"] == {(): 0.0}
            assert "petrel_ha_replication_lag_operations" not in m and "petrel_ha_replica_in_sync" not in m

    asyncio.run(main())


def test_ha_metrics_of_a_replicating_live_and_its_backup():
    live = ha_samples(_replication("live", "primary", backup={
        "backup_node_id": "n2", "backup_connector": "h:2", "state": "in-sync", "operations_sent": 10,
        "bytes_sent": 100, "lag_operations": 3, "waiting_confirmations": 1, "synced_at": "t"}))
    assert live["petrel_ha_live"] == {(): 1.0}
    assert live["petrel_ha_failovers_total"] == {(): 2.0}
    assert live["petrel_ha_replication_lag_operations"] == {(("peer", "backup"),): 3.0}
    assert live["petrel_ha_replica_in_sync"] == {(("peer", "backup"),): 1.0}

    backup = ha_samples(_replication("backup", "backup", live={
        "live_node_id": "n1", "live_connector": "h:1", "state": "syncing", "received_seq": 9, "applied_seq": 4,
        "lag_operations": 5, "bytes_received": 90}))
    assert backup["petrel_ha_live"] == {(): 0.0}
    assert backup["petrel_ha_replication_lag_operations"] == {(("peer", "live"),): 5.0}
    assert backup["petrel_ha_replica_in_sync"] == {(("peer", "live"),): 0.0}


def test_ha_metrics_invent_no_lag_without_a_copy_under_way():
    # a live whose backup was lost: not in sync, and the lost link's last lag is not reported
    lost = ha_samples(_replication("live", "primary", backup={"state": "lost", "lag_operations": 7}))
    assert lost["petrel_ha_replica_in_sync"] == {(("peer", "backup"),): 0.0}
    assert "petrel_ha_replication_lag_operations" not in lost
    # a live that never had a backup
    alone = ha_samples(_replication("live", "primary"))
    assert alone["petrel_ha_replica_in_sync"] == {(("peer", "backup"),): 0.0}
    assert "petrel_ha_replication_lag_operations" not in alone
    # a stopped node says nothing about a copy
    stopped = ha_samples(_replication("stopped", "backup"))
    assert stopped["petrel_ha_live"] == {(): 0.0}
    assert "petrel_ha_replica_in_sync" not in stopped
    # shared store: no replication figures at all
    shared = ha_samples({"policy": "shared_store", "role": "backup", "state": "backup", "failovers": 0})
    assert shared == {"petrel_ha_live": {(): 0.0}, "petrel_ha_failovers_total": {(): 0.0}}
