"""Cross-site protection of the management API (in-process broker, real HTTP): a foreign Origin
is refused, operations take JSON only, a malformed or deeply nested body is a 400."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from petrel.config import BrokerConfig
from petrel.server.broker import Broker

JSON = {"Content-Type": "application/json"}


@contextlib.asynccontextmanager
async def running(tmp_path):
    config = BrokerConfig(max_disk_usage=100, data_dir=tmp_path / "data", host="127.0.0.1", port=0, stomp_port=-1,
                          http_port=0, message_expiry_scan_period=-1, security_enabled=False)
    broker = Broker(config)
    await broker.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{broker.ports['http']}") as http:
            yield broker, http
    finally:
        await broker.stop()


async def status_of(http, method: str, path: str, **kwargs) -> tuple[int, dict]:
    async with http.request(method, path, **kwargs) as resp:
        return resp.status, await resp.json()


def run(tmp_path, fn):
    async def main():
        async with running(tmp_path) as (broker, http):
            await fn(broker, http)

    asyncio.run(main())


def test_a_foreign_origin_is_refused_for_operations_and_reads(tmp_path):
    async def check(broker, http):
        port = broker.ports["http"]
        status, body = await status_of(http, "POST", "/api/v1/queues", json={"name": "evil"},
                                       headers={"Origin": "http://evil.example"})
        assert status == 403 and "cross-origin" in body["error"] and "evil.example" in body["error"]
        assert "evil" not in broker.office.queues
        status, _ = await status_of(http, "GET", "/api/v1/queues", headers={"Origin": "null"})
        assert status == 403
        # a page served by this server itself may call it
        status, _ = await status_of(http, "POST", "/api/v1/queues", json={"name": "mine"},
                                    headers={"Origin": f"http://127.0.0.1:{port}"})
        assert status == 201 and "mine" in broker.office.queues
        # probes are left alone
        status, body = await status_of(http, "GET", "/health", headers={"Origin": "http://evil.example"})
        assert status == 200 and body["status"] == "ok"

    run(tmp_path, check)


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_operations_need_json_content_type(tmp_path, ctype):
    async def check(broker, http):
        headers = {"Content-Type": ctype} if ctype else {}
        status, body = await status_of(http, "POST", "/api/v1/queues", data=b'{"name": "formed"}', headers=headers)
        assert status == 415 and "Content-Type: application/json" in body["error"]
        assert "formed" not in broker.office.queues
        status, body = await status_of(http, "DELETE", "/api/v1/queues/DLQ", headers=headers)
        assert status == 415 and "DLQ" in broker.office.queues
        status, _ = await status_of(http, "POST", "/api/v1/queues", data=b'{"name": "ok"}',
                                    headers={"Content-Type": "application/json; charset=utf-8"})
        assert status == 201

    run(tmp_path, check)


def test_deep_and_malformed_json_are_400_never_500(tmp_path):
    async def check(broker, http):
        for path in ("/api/v1/queues", "/api/v1/addresses", "/api/v1/broker/scale-down",
                     "/api/v1/queues/DLQ/purge"):
            deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
            status, body = await status_of(http, "POST", path, data=deep, headers=JSON)
            assert status == 400 and "nested too deeply" in body["error"], (path, status, body)
            status, body = await status_of(http, "POST", path, data=b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}",
                                           headers=JSON)
            assert status == 400 and "nested too deeply" in body["error"], (path, status, body)
            status, body = await status_of(http, "POST", path, data=b'{"name": ', headers=JSON)
            assert status == 400 and "not valid JSON" in body["error"], (path, status, body)
            status, body = await status_of(http, "POST", path, data=b"\xff\xfe", headers=JSON)
            assert status == 400, (path, status, body)
        status, body = await status_of(http, "GET", "/health")
        assert status == 200

    run(tmp_path, check)


def test_unknown_routes_and_methods_stay_404_and_405(tmp_path):
    async def check(broker, http):
        assert (await status_of(http, "PUT", "/api/v1/queues"))[0] == 405
        assert (await status_of(http, "DELETE", "/api/v1/nothing"))[0] == 404

    run(tmp_path, check)
