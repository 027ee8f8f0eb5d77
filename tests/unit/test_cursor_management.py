"""Named cursors through the management API, and the asyncio client's range and cursor requests,
against an in-process broker."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from petrel.client import Message, NotFound, RequestFailed, connect
from petrel.config import BrokerConfig
from petrel.server.broker import Broker


@contextlib.asynccontextmanager
async def running(tmp_path):
    config = BrokerConfig(max_disk_usage=100, security_enabled=False, data_dir=tmp_path / "data", host="127.0.0.1", port=0, stomp_port=-1, http_port=0,
                          message_expiry_scan_period=-1)
    broker = Broker(config)
    await broker.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{broker.ports['http']}") as http:
            async with await connect(f"tcp://127.0.0.1:{broker.ports['all']}") as conn:
                yield broker, http, conn
    finally:
        await broker.stop()


async def call(http, method: str, path: str, expect: int):
    async with http.request(method, path, headers={"Content-Type": "application/json"}) as resp:
        body = await resp.json()
        assert resp.status == expect, (method, path, resp.status, body)
        return body


def test_cursors_through_the_asyncio_client_and_the_management_api(tmp_path):
    async def main():
        async with running(tmp_path) as (broker, http, conn):
            await conn.create_queue("orders")
            session = await conn.session()
            producer = session.producer("queue://orders")
            for i in range(6):
                await producer.send(Message(f"m{i}", duplicate_id=f"o-{i}"))
            await session.flush()
            seqs = await conn.queue_seqs("orders")
            assert seqs.node_id == broker.node_id == conn.node_id
            assert seqs.tail_seq - seqs.earliest_seq == 6
            part = await conn.browse_range("queue://orders", seqs.earliest_seq, seqs.tail_seq, 4)
            assert [r.text for r in part.messages] == ["m0", "m1", "m2", "m3"]
            assert [r.dup_id for r in part.messages] == ["o-0", "o-1", "o-2", "o-3"]
            assert part.next_seq == seqs.earliest_seq + 4 and part.gaps == []
            cursor = await conn.ack_upto("orders", "spark", part.next_seq - 1)
            assert cursor.acked == part.next_seq and cursor.node_id == broker.node_id
            await conn.create_cursor("orders", "audit")
            view = await call(http, "GET", "/api/v1/queues/orders/cursors", 200)
            assert view["node_id"] == broker.node_id and view["count"] == 2
            assert view["cursors"] == [{"name": "audit", "acked": part.next_seq}, {"name": "spark", "acked": part.next_seq}]
            assert view["earliest_seq"] == part.next_seq and view["tail_seq"] == seqs.tail_seq
            await call(http, "DELETE", "/api/v1/queues/orders/cursors/audit", 200)
            await call(http, "DELETE", "/api/v1/queues/orders/cursors/audit", 404)
            await call(http, "GET", "/api/v1/queues/nope/cursors", 404)
            assert [c.name for c in await conn.cursors("orders")] == ["spark"]
            try:
                await conn.cursor("orders", "audit")
                raise AssertionError("a deleted cursor was found")
            except NotFound:
                pass
            try:
                await conn.browse_range("orders", 9, 3)
                raise AssertionError("a reversed range was answered")
            except RequestFailed as exc:
                assert "after" in str(exc)
            assert await conn.earliest_seq("orders") == part.next_seq
            assert await conn.tail_seq("orders") == seqs.tail_seq

    asyncio.run(asyncio.wait_for(main(), 60))
