"""The management API against an in-process broker (its loop, its post office), endpoint by endpoint."""

from __future__ import annotations

import asyncio
import base64
import contextlib

import aiohttp
import pytest

from petrel.config import BrokerConfig
from petrel.core.message import Message, RoutingType, now_ms
from petrel.core.queue import Consumer
from petrel.server.broker import Broker


@contextlib.asynccontextmanager
async def running(tmp_path, **settings):
    config = BrokerConfig(max_disk_usage=100, security_enabled=False, data_dir=tmp_path / "data", host="127.0.0.1", port=0, stomp_port=-1, http_port=0,
                          message_expiry_scan_period=-1, **settings)
    broker = Broker(config)
    await broker.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{broker.ports['http']}") as http:
            yield broker, http
    finally:
        await broker.stop()


def in_broker(**settings):
    """Run `async def test(broker, http)` against a fresh broker; the test itself takes tmp_path."""

    def wrap(fn):
        def test(tmp_path):
            async def main():
                async with running(tmp_path, **settings) as (broker, http):
                    await fn(broker, http)

            asyncio.run(main())

        test.__name__ = fn.__name__
        test.__doc__ = fn.__doc__
        return test

    return wrap


async def call(http: aiohttp.ClientSession, method: str, path: str, expect: int, **kwargs):
    if method != "GET" and "json" not in kwargs and "data" not in kwargs:
        kwargs.setdefault("headers", {"Content-Type": "application/json"})  # operations take JSON only
    async with http.request(method, path, **kwargs) as resp:
        body = await resp.json()
        assert resp.status == expect, (method, path, resp.status, body)
        assert resp.content_type == "application/json"
        return body


def send(broker: Broker, address: str, body: bytes | str, *, durable: bool = True, **props) -> Message:
    if isinstance(body, str):
        body = body.encode()
    office = broker.office
    message = Message(id=office.store.next_id(), address=address, body=body, properties=props, durable=durable,
                      timestamp=now_ms())
    office.send(message, RoutingType.ANYCAST)
    return message


def consumer(queue, received: list) -> Consumer:
    c = Consumer(queue, lambda _c, ref: received.append(ref))
    queue.office.add_consumer(queue, c)
    return c


# -- health and broker ------------------------------------------------------------------------

@in_broker()
async def test_health_is_ready_while_serving(broker, http):
    body = await call(http, "GET", "/health", 200)
    assert body["ready"] is True and body["live"] is True and body["status"] == "ok"
    assert body["node_id"] == broker.node_id


def test_health_answers_503_while_stopping(tmp_path):
    async def main():
        async with running(tmp_path) as (broker, http):
            stopping = asyncio.create_task(broker.management.stop(grace=5.0))
            deadline = asyncio.get_running_loop().time() + 5
            while True:
                async with http.get("/health") as resp:
                    if resp.status == 503:
                        body = await resp.json()
                        break
                assert asyncio.get_running_loop().time() < deadline, "health never went 503"
                await asyncio.sleep(0.01)
            assert body["ready"] is False and body["status"] == "stopping"
            await broker.stop()  # cuts the grace period short
            stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopping
            with pytest.raises(aiohttp.ClientConnectionError):
                async with http.get("/health"):
                    pass

    asyncio.run(main())


@in_broker(name="alpha")
async def test_broker_status(broker, http):
    send(broker, "orders", "x" * 50)
    body = await call(http, "GET", "/api/v1/broker", 200)
    assert body["name"] == "alpha"
    assert body["version"] == broker.version
    assert body["node_id"] == broker.node_id and body["node_id"]
    assert body["ha_role"] == "live-only"
    assert body["state"] == "active"
    assert body["connection_count"] == 0
    assert body["uptime_seconds"] >= 0
    assert body["ports"]["http"] == broker.ports["http"]
    assert body["message_count"] == 1 and body["messages_routed"] == 1
    assert body["memory"]["rss_bytes"] > 1 << 20
    assert body["disk"]["used_bytes"] > 0 and body["disk"]["fs_total_bytes"] > 0
    assert set(body["journal"]) == {"messages", "bindings"}
    assert body["journal"]["messages"]["segments"] >= 1


@in_broker(persistence_enabled=False)
async def test_broker_status_without_persistence_has_no_journal(broker, http):
    body = await call(http, "GET", "/api/v1/broker", 200)
    assert body["journal"] == {} and body["persistence_enabled"] is False


@in_broker()
async def test_scale_down_without_a_target_is_400_and_a_bad_target_too(broker, http):
    body = await call(http, "POST", "/api/v1/broker/scale-down", 400)
    assert "no target" in body["error"]
    body = await call(http, "POST", "/api/v1/broker/scale-down", 400, json={"target": "nowhere"})
    assert "target" in body["error"]


@in_broker()
async def test_unknown_route_and_method_are_json_errors(broker, http):
    body = await call(http, "GET", "/api/v1/nothing", 404)
    assert "/api/v1/nothing" in body["error"]
    body = await call(http, "PUT", "/api/v1/queues", 405)
    assert "PUT" in body["error"]


# -- addresses --------------------------------------------------------------------------------

@in_broker()
async def test_address_create_show_list_delete(broker, http):
    created = await call(http, "POST", "/api/v1/addresses", 201,
                         json={"name": "news", "routing_types": ["MULTICAST", "anycast"]})
    assert created["routing_types"] == ["ANYCAST", "MULTICAST"] and created["queues"] == []
    assert "news" in broker.office.addresses
    listed = await call(http, "GET", "/api/v1/addresses", 200)
    assert "news" in [a["name"] for a in listed["addresses"]] and listed["count"] == len(listed["addresses"])
    shown = await call(http, "GET", "/api/v1/addresses/news", 200)
    assert shown["name"] == "news" and shown["queue_count"] == 0
    await call(http, "DELETE", "/api/v1/addresses/news", 200)
    assert "news" not in broker.office.addresses
    await call(http, "GET", "/api/v1/addresses/news", 404)


@in_broker()
async def test_address_errors(broker, http):
    await call(http, "POST", "/api/v1/addresses", 201, json={"name": "a1"})
    assert (await call(http, "POST", "/api/v1/addresses", 409, json={"name": "a1"}))["error"].endswith("already exists")
    assert "required" in (await call(http, "POST", "/api/v1/addresses", 400, json={}))["error"]
    body = await call(http, "POST", "/api/v1/addresses", 400, json={"name": "a2", "routing_types": ["BROADCAST"]})
    assert "ANYCAST or MULTICAST" in body["error"]
    await call(http, "POST", "/api/v1/addresses", 400, json={"name": "a2", "routing_types": []})
    await call(http, "POST", "/api/v1/addresses", 400, data=b"{not json", headers={"Content-Type": "application/json"})
    await call(http, "POST", "/api/v1/addresses", 400, json=["a2"])
    await call(http, "POST", "/api/v1/addresses", 400, json={"name": 7})
    await call(http, "DELETE", "/api/v1/addresses/missing", 404)
    assert "a2" not in broker.office.addresses


@in_broker()
async def test_address_with_queues_needs_force(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "q1", "address": "shared"})
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "q2", "address": "shared"})
    send(broker, "shared", "m")
    shown = await call(http, "GET", "/api/v1/addresses/shared", 200)
    assert sorted(q["name"] for q in shown["queues"]) == ["q1", "q2"] and shown["message_count"] == 1
    body = await call(http, "DELETE", "/api/v1/addresses/shared", 409)
    assert "q1" in body["error"] and "force" in body["error"]
    await call(http, "DELETE", "/api/v1/addresses/shared?force=bogus", 400)
    deleted = await call(http, "DELETE", "/api/v1/addresses/shared?force=true", 200)
    assert sorted(deleted["queues_deleted"]) == ["q1", "q2"]
    assert "q1" not in broker.office.queues and "shared" not in broker.office.addresses


# -- queues -----------------------------------------------------------------------------------

@in_broker()
async def test_queue_create_defaults_and_options(broker, http):
    q = await call(http, "POST", "/api/v1/queues", 201, json={"name": "work"})
    assert (q["address"], q["routing_type"], q["durable"], q["filter"], q["paused"]) == ("work", "ANYCAST", True, None,
                                                                                         False)
    q = await call(http, "POST", "/api/v1/queues", 201, json={
        "name": "sub", "address": "events", "routing_type": "MULTICAST", "durable": False, "filter": "kind = 'a'"})
    assert (q["address"], q["routing_type"], q["durable"], q["filter"]) == ("events", "MULTICAST", False, "kind = 'a'")
    queue = broker.office.queues["sub"]
    assert queue.durable is False and queue.selector.text == "kind = 'a'"
    assert RoutingType.MULTICAST in broker.office.addresses["events"].routing_types


@in_broker()
async def test_queue_create_errors(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "work"})
    assert "already exists" in (await call(http, "POST", "/api/v1/queues", 409, json={"name": "work"}))["error"]
    body = await call(http, "POST", "/api/v1/queues", 400, json={"name": "bad", "filter": "a >"})
    assert "column" in body["error"]
    await call(http, "POST", "/api/v1/queues", 400, json={"name": "bad", "routing_type": "SIDEWAYS"})
    await call(http, "POST", "/api/v1/queues", 400, json={"name": "bad", "durable": "yes"})
    await call(http, "POST", "/api/v1/queues", 400, json={"name": ""})
    assert "bad" not in broker.office.queues


@in_broker()
async def test_queue_list_carries_the_stat_attributes(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "orders.eu", "address": "orders"})
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "audit", "address": "audit"})
    for i in range(3):
        send(broker, "orders", f"m{i}")
    send(broker, "orders", "later", durable=False)
    queue = broker.office.queues["orders.eu"]
    received: list = []
    c = consumer(queue, received)
    queue.acknowledge(received[0])
    body = await call(http, "GET", "/api/v1/queues", 200)
    by_name = {q["name"]: q for q in body["queues"]}
    assert [q["name"] for q in body["queues"]] == sorted(by_name)
    q = by_name["orders.eu"]
    assert q["consumer_count"] == 1 and q["messages_added"] == 4 and q["messages_acked"] == 1
    assert q["delivering_count"] == 3 and q["message_count"] == 3 and q["scheduled_count"] == 0
    assert q["messages_expired"] == 0 and q["messages_killed"] == 0 and q["routing_type"] == "ANYCAST"
    assert len(c.delivering) == 3
    only = await call(http, "GET", "/api/v1/queues?name=s.e", 200)
    assert [q["name"] for q in only["queues"]] == ["orders.eu"]
    by_address = await call(http, "GET", "/api/v1/queues?address=audit", 200)
    assert [q["name"] for q in by_address["queues"]] == ["audit"]
    shown = await call(http, "GET", "/api/v1/queues/orders.eu", 200)
    assert shown == q
    await call(http, "GET", "/api/v1/queues/nope", 404)


@in_broker()
async def test_temporary_queues_can_be_left_out(broker, http):
    address, _ = broker.office.ensure_address_for("topic.t", RoutingType.MULTICAST)
    temp = broker.office.subscribe_multicast(address, filter=None)
    names = [q["name"] for q in (await call(http, "GET", "/api/v1/queues", 200))["queues"]]
    assert temp.name in names
    names = [q["name"] for q in (await call(http, "GET", "/api/v1/queues?temporary=false", 200))["queues"]]
    assert temp.name not in names and "DLQ" in names


@in_broker()
async def test_queue_delete_and_consumers(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "busy"})
    send(broker, "busy", "a")
    send(broker, "busy", "b")
    consumer(broker.office.queues["busy"], [])
    body = await call(http, "DELETE", "/api/v1/queues/busy", 409)
    assert "consumer" in body["error"]
    deleted = await call(http, "DELETE", "/api/v1/queues/busy?remove_consumers=true", 200)
    assert deleted == {"deleted": "busy", "messages_removed": 2}
    assert "busy" not in broker.office.queues
    await call(http, "DELETE", "/api/v1/queues/busy", 404)


@in_broker()
async def test_pause_stops_dispatch_and_resume_restarts_it(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "p"})
    received: list = []
    consumer(broker.office.queues["p"], received)
    paused = await call(http, "POST", "/api/v1/queues/p/pause", 200)
    assert paused["paused"] is True
    send(broker, "p", "held")
    assert received == [] and broker.office.queues["p"].message_count == 1
    resumed = await call(http, "POST", "/api/v1/queues/p/resume", 200)
    assert resumed["paused"] is False and resumed["delivering_count"] == 1
    assert [r.message.body for r in received] == [b"held"]
    await call(http, "POST", "/api/v1/queues/zz/pause", 404)
    await call(http, "POST", "/api/v1/queues/zz/resume", 404)


# -- messages ---------------------------------------------------------------------------------

@in_broker()
async def test_browse_pages_filters_and_body_modes(broker, http):
    for i in range(7):
        send(broker, "b", f"msg-{i}", n=i, kind="even" if i % 2 == 0 else "odd")
    send(broker, "b", b"\xff\x00\x01", n=99, kind="bin")
    page = await call(http, "GET", "/api/v1/queues/b/messages?limit=3", 200)
    assert [m["body"] for m in page["messages"]] == ["msg-0", "msg-1", "msg-2"]
    assert page["more"] is True and page["count"] == 3 and page["offset"] == 0
    seqs = [m["seq"] for m in page["messages"]]
    assert seqs == sorted(seqs)
    page = await call(http, "GET", "/api/v1/queues/b/messages?limit=3&offset=6", 200)
    assert [m["properties"]["n"] for m in page["messages"]] == [6, 99]
    assert page["more"] is False
    binary = page["messages"][1]
    assert binary["body_encoding"] == "base64" and base64.b64decode(binary["body"]) == b"\xff\x00\x01"
    assert binary["body_size"] == 3
    evens = await call(http, "GET", "/api/v1/queues/b/messages", 200, params={"filter": "kind = 'even'"})
    assert [m["body"] for m in evens["messages"]] == ["msg-0", "msg-2", "msg-4", "msg-6"]
    b64 = await call(http, "GET", "/api/v1/queues/b/messages?limit=1&body=base64", 200)
    assert base64.b64decode(b64["messages"][0]["body"]) == b"msg-0"
    none = await call(http, "GET", "/api/v1/queues/b/messages?limit=1&body=none", 200)
    assert "body" not in none["messages"][0] and none["messages"][0]["body_size"] == 5
    text = await call(http, "GET", "/api/v1/queues/b/messages?offset=7&body=text", 200)
    assert text["messages"][0]["body_encoding"] == "text"
    assert broker.office.queues["b"].message_count == 8  # browsing consumed nothing


@in_broker()
async def test_browse_and_count_errors(broker, http):
    send(broker, "c", "x")
    for query in ("limit=0", "limit=5000", "offset=-1", "limit=abc", "body=hex"):
        body = await call(http, "GET", f"/api/v1/queues/c/messages?{query}", 400)
        assert query.split("=")[0] in body["error"]
    body = await call(http, "GET", "/api/v1/queues/c/messages", 400, params={"filter": "(a = 1"})
    assert "invalid selector" in body["error"]
    await call(http, "GET", "/api/v1/queues/c/count", 400, params={"filter": "a ="})
    await call(http, "GET", "/api/v1/queues/none/messages", 404)
    await call(http, "GET", "/api/v1/queues/none/count", 404)


@in_broker()
async def test_count_with_and_without_filter(broker, http):
    for i in range(5):
        send(broker, "cnt", "x", color="red" if i < 2 else "blue")
    assert (await call(http, "GET", "/api/v1/queues/cnt/count", 200))["count"] == 5
    red = await call(http, "GET", "/api/v1/queues/cnt/count", 200, params={"filter": "color = 'red'"})
    assert red["count"] == 2 and red["filter"] == "color = 'red'"


@in_broker()
async def test_purge_all_or_matching(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "pg"})
    for i in range(6):
        send(broker, "pg", "x", n=i)
    body = await call(http, "POST", "/api/v1/queues/pg/purge", 200, json={"filter": "n < 2"})
    assert body["removed"] == 2 and broker.office.queues["pg"].message_count == 4
    body = await call(http, "POST", "/api/v1/queues/pg/purge", 200)
    assert body["removed"] == 4 and broker.office.queues["pg"].message_count == 0
    assert broker.office.queues["pg"].messages_acked == 6
    await call(http, "POST", "/api/v1/queues/pg/purge", 400, json={"filter": "n <"})
    await call(http, "POST", "/api/v1/queues/gone/purge", 404)


@in_broker()
async def test_move_to_another_queue(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "src"})
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "dst"})
    for i in range(4):
        send(broker, "src", f"m{i}", n=i)
    body = await call(http, "POST", "/api/v1/queues/src/move", 200, json={"to": "dst", "filter": "n >= 2"})
    assert body == {"queue": "src", "to": "dst", "moved": 2}
    office = broker.office
    assert office.queues["src"].message_count == 2 and office.queues["dst"].message_count == 2
    moved = await call(http, "GET", "/api/v1/queues/dst/messages", 200)
    assert [m["body"] for m in moved["messages"]] == ["m2", "m3"]
    assert moved["messages"][0]["properties"]["_AMQ_ORIG_QUEUE"] == "src"
    assert (await call(http, "POST", "/api/v1/queues/src/move", 200, json={"to": "dst"}))["moved"] == 2
    assert office.queues["src"].message_count == 0 and office.queues["dst"].message_count == 4


@in_broker()
async def test_move_errors(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "src"})
    send(broker, "src", "m")
    assert "does not exist" in (await call(http, "POST", "/api/v1/queues/src/move", 404, json={"to": "nowhere"}))["error"]
    await call(http, "POST", "/api/v1/queues/src/move", 400, json={"to": "src"})
    await call(http, "POST", "/api/v1/queues/src/move", 400, json={})
    await call(http, "POST", "/api/v1/queues/src/move", 400, json={"to": "DLQ", "filter": "x >"})
    await call(http, "POST", "/api/v1/queues/none/move", 404, json={"to": "src"})
    assert broker.office.queues["src"].message_count == 1


@in_broker(address_settings={"#": {"max_delivery_attempts": 1}})
async def test_retry_from_the_dead_letter_queue(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "jobs"})
    for i in range(3):
        send(broker, "jobs", f"job{i}", n=i)
    queue = broker.office.queues["jobs"]
    received: list = []
    c = consumer(queue, received)
    for ref in list(received):
        queue.cancel(ref)  # one failed attempt is too many here
    queue.remove_consumer(c)
    dlq = await call(http, "GET", "/api/v1/queues/DLQ", 200)
    assert dlq["message_count"] == 3 and queue.messages_killed == 3
    listed = await call(http, "GET", "/api/v1/queues/DLQ/messages", 200)
    assert {m["properties"]["_AMQ_ORIG_QUEUE"] for m in listed["messages"]} == {"jobs"}
    body = await call(http, "POST", "/api/v1/queues/DLQ/retry", 200, json={"filter": "n = 1"})
    assert body["retried"] == 1
    back = await call(http, "GET", "/api/v1/queues/jobs/messages", 200)
    assert [m["body"] for m in back["messages"]] == ["job1"]
    assert (await call(http, "POST", "/api/v1/queues/DLQ/retry", 200))["retried"] == 2
    assert broker.office.queues["DLQ"].message_count == 0 and queue.message_count == 3
    await call(http, "POST", "/api/v1/queues/DLQ/retry", 400, json={"filter": 5})
    await call(http, "POST", "/api/v1/queues/nope/retry", 404)


# -- connections and consumers ----------------------------------------------------------------

@in_broker()
async def test_consumers_list_and_filter_by_queue(broker, http):
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "c1"})
    await call(http, "POST", "/api/v1/queues", 201, json={"name": "c2"})
    send(broker, "c1", "x" * 10)
    consumer(broker.office.queues["c1"], [])
    consumer(broker.office.queues["c2"], [])
    everyone = await call(http, "GET", "/api/v1/consumers", 200)
    assert sorted(c["queue"] for c in everyone["consumers"]) == ["c1", "c2"]
    one = await call(http, "GET", "/api/v1/consumers?queue=c1", 200)
    (view,) = one["consumers"]
    assert view["delivering_count"] == 1 and view["bytes_in_flight"] == 10 and view["connection_id"] is None
    await call(http, "GET", "/api/v1/consumers?queue=zz", 404)
    conns = await call(http, "GET", "/api/v1/connections", 200)
    assert conns == {"connections": [], "count": 0}


@in_broker()
async def test_a_raw_connection_is_listed(broker, http):
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports["all"])
    try:
        writer.write(b"CONNECT\naccept-version:1.2\nhost:x\nclient-id:tool-1\n\n\x00")
        await writer.drain()
        assert (await reader.readuntil(b"\x00")).startswith(b"CONNECTED")
        body = await call(http, "GET", "/api/v1/connections", 200)
        (conn,) = body["connections"]
        assert conn["protocol"] == "stomp" and conn["client_id"] == "tool-1"
        local = writer.get_extra_info("sockname")
        assert conn["remote_address"] == f"{local[0]}:{local[1]}"
    finally:
        writer.close()


@in_broker()
async def test_internal_errors_are_json_500(broker, http):
    broker.office.queues["DLQ"].consumers.append(object())  # something the views cannot read
    try:
        body = await call(http, "GET", "/api/v1/consumers", 500)
        assert body["error"].startswith("internal error")
    finally:
        broker.office.queues["DLQ"].consumers.clear()


@pytest.mark.parametrize("path", ["/api/v1/queues", "/api/v1/addresses"])
def test_bodies_over_the_limit_are_refused(tmp_path, path):
    async def main():
        async with running(tmp_path) as (_broker, http):
            async with http.post(path, data=b"{" + b" " * (2 << 20) + b"}",
                                 headers={"Content-Type": "application/json"}) as resp:
                assert resp.status == 413
                assert "error" in await resp.json()

    asyncio.run(main())
