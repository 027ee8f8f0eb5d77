"""The management API of a real `petrel run` process, with STOMP traffic from stomp.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import connect, module_broker
from petrel.management.openapi import document
from petrel.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    yield from module_broker(tmp_path_factory, "mgmt", name="sys-mgmt", http=True)


def http(b: BrokerProcess, method: str, path: str, body: dict | None = None) -> tuple[int, dict | str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{b.http_port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"} if method != "GET" else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, raw, ctype = resp.status, resp.read(), resp.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        status, raw, ctype = exc.code, exc.read(), exc.headers.get_content_type()
    return status, (json.loads(raw) if ctype == "application/json" else raw.decode())


def ok(b: BrokerProcess, method: str, path: str, body: dict | None = None, status: int = 200) -> dict:
    got, payload = http(b, method, path, body)
    assert got == status, (method, path, got, payload)
    return payload


def send_durable(conn, listener, destination: str, bodies: list[str], **headers) -> None:
    for i, body in enumerate(bodies):
        conn.send(destination, body, headers={"persistent": "true", "receipt": f"r{i}", **headers})
    for _ in bodies:
        listener.receipts.get(timeout=10)


def metrics(b: BrokerProcess) -> dict[str, dict[tuple, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{b.http_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_health_and_status(broker):
    health = ok(broker, "GET", "/health")
    assert health["ready"] is True and health["name"] == "sys-mgmt"
    status = ok(broker, "GET", "/api/v1/broker")
    assert status["node_id"] == health["node_id"] and len(status["node_id"]) >= 8
    assert status["ports"]["http"] == broker.http_port and status["ports"]["stomp"] == broker.stomp_port
    assert status["ha_role"] == "live-only" and status["version"]
    assert status["disk"]["data_dir"] == str(broker.data_dir)
    assert status["journal"]["messages"]["segments"] >= 1
    assert status["memory"]["rss_bytes"] > 0


def test_openapi_is_served_and_scale_down_needs_a_target(broker):
    served = ok(broker, "GET", "/api/v1/openapi.json")
    assert served == json.loads(json.dumps(document(served["info"]["version"])))
    status, body = http(broker, "POST", "/api/v1/broker/scale-down")
    assert status == 400 and "no target" in body["error"]


def test_traffic_shows_in_queues_connections_consumers_and_metrics(broker):
    producer, plistener = connect(broker, client_id="sys-producer")
    consumer, clistener = connect(broker, client_id="sys-consumer")
    try:
        send_durable(producer, plistener, "/queue/sys.orders", [f"order-{i}" for i in range(5)])
        send_durable(producer, plistener, "/queue/sys.invoices", ["inv-0", "inv-1"])
        consumer.subscribe("/queue/sys.invoices", id="s1", ack="client-individual")
        clistener.get()
        clistener.get()

        def invoices_delivering():
            q = ok(broker, "GET", "/api/v1/queues/sys.invoices")
            return q if q["delivering_count"] == 2 else None

        q = wait_for(invoices_delivering, 10)
        assert (q["consumer_count"], q["message_count"], q["messages_added"]) == (1, 2, 2)
        orders = ok(broker, "GET", "/api/v1/queues/sys.orders")
        assert (orders["message_count"], orders["messages_added"], orders["consumer_count"]) == (5, 5, 0)
        assert orders["durable"] is True and orders["routing_type"] == "ANYCAST"

        conns = ok(broker, "GET", "/api/v1/connections")["connections"]
        by_client = {c["client_id"]: c for c in conns}
        assert {"sys-producer", "sys-consumer"} <= set(by_client)
        assert by_client["sys-consumer"]["protocol"] == "stomp" and by_client["sys-consumer"]["consumer_count"] == 1
        (cons,) = ok(broker, "GET", "/api/v1/consumers?queue=sys.invoices")["consumers"]
        assert cons["connection_id"] == by_client["sys-consumer"]["id"] and cons["delivering_count"] == 2
        assert cons["remote_address"] == by_client["sys-consumer"]["remote_address"]

        browsed = ok(broker, "GET", "/api/v1/queues/sys.orders/messages?limit=2&offset=1")
        assert [m["body"] for m in browsed["messages"]] == ["order-1", "order-2"] and browsed["more"] is True

        m = metrics(broker)
        key = (("address", "sys.orders"), ("queue", "sys.orders"))
        assert m["petrel_message_count"][key] == 5
        assert m["petrel_messages_added_total"][key] == 5
        inv = (("address", "sys.invoices"), ("queue", "sys.invoices"))
        assert m["petrel_delivering_message_count"][inv] == 2 and m["petrel_consumer_count"][inv] == 1
        assert m["petrel_connection_count"][()] >= 2
        assert m["petrel_address_memory_usage_bytes"][(("address", "sys.orders"),)] == sum(
            len(f"order-{i}") for i in range(5))
        assert m["petrel_journal_batch_records_count"][(("journal", "messages"),)] >= 1
        assert m["petrel_journal_sync_latency_seconds_count"][(("journal", "messages"),)] >= 1
    finally:
        producer.disconnect()
        consumer.disconnect()
    wait_for(lambda: not any(c["client_id"] in ("sys-producer", "sys-consumer")
                             for c in ok(broker, "GET", "/api/v1/connections")["connections"]), 10)
    inv_after = ok(broker, "GET", "/api/v1/queues/sys.invoices")
    assert inv_after["consumer_count"] == 0 and inv_after["delivering_count"] == 0 and inv_after["message_count"] == 2


def test_operations_on_real_messages(broker):
    conn, listener = connect(broker)
    try:
        send_durable(conn, listener, "/queue/sys.ops", ["a", "b", "c", "d"], kind="x")
        send_durable(conn, listener, "/queue/sys.ops", ["e"], kind="y")
    finally:
        conn.disconnect()
    ok(broker, "POST", "/api/v1/queues", {"name": "sys.ops.held"}, status=201)
    assert ok(broker, "GET", "/api/v1/queues/sys.ops/count?filter=kind%3D%27x%27")["count"] == 4
    assert ok(broker, "POST", "/api/v1/queues/sys.ops/move", {"to": "sys.ops.held", "filter": "kind = 'y'"})["moved"] == 1
    assert ok(broker, "POST", "/api/v1/queues/sys.ops/purge", {})["removed"] == 4
    held = ok(broker, "GET", "/api/v1/queues/sys.ops.held/messages")
    assert [m["body"] for m in held["messages"]] == ["e"] and held["messages"][0]["properties"]["kind"] == "y"
    for path, body, want in [
        ("/api/v1/queues/sys.ops/move", {"to": "nowhere"}, 404),
        ("/api/v1/queues", {"name": "sys.ops.held"}, 409),
        ("/api/v1/queues", {"name": "sys.bad", "filter": "a ="}, 400),
        ("/api/v1/addresses", {"name": "sys.ops.held"}, 409),
    ]:
        status, payload = http(broker, "POST", path, body)
        assert status == want and payload["error"], (path, status, payload)
    status, payload = http(broker, "DELETE", "/api/v1/queues/never")
    assert status == 404 and payload == {"error": "queue 'never' does not exist"}


def test_created_destinations_survive_a_restart(tmp_path):
    b = BrokerProcess(tmp_path / "r", http=True)
    with b:
        ok(b, "POST", "/api/v1/addresses", {"name": "kept.events", "routing_types": ["MULTICAST"]}, status=201)
        ok(b, "POST", "/api/v1/queues", {"name": "kept.q", "address": "kept.addr", "filter": "n > 1"}, status=201)
        ok(b, "POST", "/api/v1/queues", {"name": "gone.q", "durable": False}, status=201)
        conn, listener = connect(b)
        send_durable(conn, listener, "kept.addr", ["1", "2"], n="5")
        conn.disconnect()
        b.restart()
        q = ok(b, "GET", "/api/v1/queues/kept.q")
        assert q["filter"] == "n > 1" and q["message_count"] == 2 and q["durable"] is True
        assert ok(b, "GET", "/api/v1/addresses/kept.events")["routing_types"] == ["MULTICAST"]
        assert http(b, "GET", "/api/v1/queues/gone.q")[0] == 404


def test_a_busy_http_port_stops_the_broker_with_a_clear_error(tmp_path):
    b = BrokerProcess(tmp_path / "busy", http=True)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", b.http_port))
        squatter.listen(1)
        b.start(wait=False)
        assert b.proc.wait(30) == 1
        b.stop()
    assert f"cannot listen on 127.0.0.1:{b.http_port} (http)" in b.log()


def test_the_cli_side_does_not_load_the_server_stack():
    code = ("import sys, petrel.cli.queue, petrel.cli.address; "
            "print(sorted(m for m in ('aiohttp', 'prometheus_client', 'petrel.server.broker') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
