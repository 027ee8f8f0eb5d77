"""`petrel queue ...` and `petrel address ...` run as real commands against a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import connect, module_broker
from petrel.testing.process import BrokerProcess, free_port, wait_for

pytestmark = pytest.mark.system

COLUMNS = ["NAME", "ADDRESS", "CONSUMER_COUNT", "MESSAGE_COUNT", "MESSAGES_ADDED", "DELIVERING_COUNT",
           "MESSAGES_ACKED", "SCHEDULED_COUNT", "ROUTING_TYPE"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    yield from module_broker(tmp_path_factory, "cli", http=True)


def petrel(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "PETREL_MANAGEMENT_URL"}
    full_env.update({"COLUMNS": "80", **(env or {})})
    return subprocess.run([sys.executable, "-m", "petrel", *args], capture_output=True, text=True, timeout=60,
                          env=full_env)


def url(b: BrokerProcess) -> str:
    return f"http://127.0.0.1:{b.http_port}"


def parse_table(out: str) -> list[dict[str, str]]:
    """The rows of the first ASCII table in `out`, keyed by header."""
    lines = [line for line in out.splitlines() if line.startswith("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if not line.startswith("|-")]
    header, body = rows[0], rows[1:]
    assert header == COLUMNS, header
    return [dict(zip(header, row)) for row in body]


def send(b: BrokerProcess, destination: str, n: int, **headers) -> None:
    conn, listener = connect(b)
    try:
        for i in range(n):
            conn.send(destination, f"body-{i}", headers={"persistent": "true", "receipt": str(i), **headers})
        for _ in range(n):
            listener.receipts.get(timeout=10)
    finally:
        conn.disconnect()


def test_queue_stat_prints_the_artemis_table(broker):
    send(broker, "/queue/cli.stat.a", 3)
    send(broker, "/queue/cli.stat.b", 2)
    conn, listener = connect(broker)
    try:
        conn.subscribe("/queue/cli.stat.b", id="s", ack="client-individual")
        first = listener.get()
        listener.get()
        conn.ack(first.headers["ack"])
        wait_for(lambda: "1" == parse_table(petrel("queue", "stat", "--url", url(broker), "--queue-name",
                                                   "cli.stat.b").stdout)[0]["MESSAGES_ACKED"], 10)
        out = petrel("queue", "stat", "--url", url(broker))
        assert out.returncode == 0, out.stderr
        header = next(line for line in out.stdout.splitlines() if "NAME" in line)
        assert [h.strip() for h in header.strip("|").split("|")] == COLUMNS  # full names even at 80 columns
        rows = {r["NAME"]: r for r in parse_table(out.stdout)}
        assert rows["cli.stat.a"] == {
            "NAME": "cli.stat.a", "ADDRESS": "cli.stat.a", "CONSUMER_COUNT": "0", "MESSAGE_COUNT": "3",
            "MESSAGES_ADDED": "3", "DELIVERING_COUNT": "0", "MESSAGES_ACKED": "0", "SCHEDULED_COUNT": "0",
            "ROUTING_TYPE": "ANYCAST"}
        b = rows["cli.stat.b"]
        assert (b["CONSUMER_COUNT"], b["MESSAGE_COUNT"], b["MESSAGES_ADDED"], b["DELIVERING_COUNT"],
                b["MESSAGES_ACKED"]) == ("1", "1", "2", "1", "1")
        assert "DLQ" in rows and list(rows) == sorted(rows)
    finally:
        conn.disconnect()


def test_queue_stat_filters_rows_and_json(broker):
    send(broker, "/queue/cli.filter.big", 4)
    send(broker, "/queue/cli.filter.small", 1)
    only = parse_table(petrel("queue", "stat", "--url", url(broker), "--queue-name", "cli.filter").stdout)
    assert [r["NAME"] for r in only] == ["cli.filter.big", "cli.filter.small"]
    big = petrel("queue", "stat", "--url", url(broker), "--queue-name", "cli.filter", "--field", "MESSAGE_COUNT",
                 "--operation", "GREATER_THAN", "--value", "2")
    assert [r["NAME"] for r in parse_table(big.stdout)] == ["cli.filter.big"]
    one = petrel("queue", "stat", "--url", url(broker), "--queue-name", "cli.filter", "--max-rows", "1")
    assert [r["NAME"] for r in parse_table(one.stdout)] == ["cli.filter.big"] and "1 of 2 queues" in one.stdout
    out = petrel("queue", "stat", "--url", url(broker), "--queue-name", "cli.filter", "--json")
    data = json.loads(out.stdout)
    assert [(q["name"], q["message_count"], q["routing_type"]) for q in data] == [
        ("cli.filter.big", 4, "ANYCAST"), ("cli.filter.small", 1, "ANYCAST")]
    half = petrel("queue", "stat", "--url", url(broker), "--field", "NAME")
    assert half.returncode == 2 and "go together" in half.stderr


def test_queue_stat_loop_and_port_offset(broker):
    out = petrel("queue", "stat", "--url", url(broker), "--queue-name", "DLQ", "--loop", "--sleep", "20",
                 "--iterations", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("| NAME") == 3
    offset = broker.http_port - 8161
    if offset < 0:
        pytest.skip("the free port is below 8161")
    via_offset = petrel("queue", "stat", "--port-offset", str(offset), "--queue-name", "DLQ")
    assert via_offset.returncode == 0, via_offset.stderr
    assert [r["NAME"] for r in parse_table(via_offset.stdout)] == ["DLQ"]
    via_env = petrel("queue", "stat", "--queue-name", "DLQ", env={"PETREL_MANAGEMENT_URL": url(broker)})
    assert [r["NAME"] for r in parse_table(via_env.stdout)] == ["DLQ"]


def test_queue_create_purge_delete(broker):
    out = petrel("queue", "create", "--url", url(broker), "--name", "cli.made", "--address", "cli.events",
                 "--multicast", "--no-durable", "--filter", "level > 2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("Queue cli.made created: address=cli.events routing-type=MULTICAST "
                                  "durable=false filter=level > 2")
    row = parse_table(petrel("queue", "stat", "--url", url(broker), "--queue-name", "cli.made").stdout)[0]
    assert (row["ADDRESS"], row["ROUTING_TYPE"]) == ("cli.events", "MULTICAST")
    send(broker, "/topic/cli.events", 2, level="5")
    send(broker, "/topic/cli.events", 1, level="1")
    purged = petrel("queue", "purge", "--url", url(broker), "--name", "cli.made")
    assert purged.returncode == 0 and purged.stdout.strip() == "Queue cli.made purged: 2 messages removed"
    deleted = petrel("queue", "delete", "--url", url(broker), "--name", "cli.made")
    assert deleted.returncode == 0 and deleted.stdout.strip() == "Queue cli.made deleted (0 messages removed)"
    assert parse_table(petrel("queue", "stat", "--url", url(broker), "--queue-name", "cli.made").stdout) == []


def test_queue_failures_are_one_line_and_exit_1(broker):
    petrel("queue", "create", "--url", url(broker), "--name", "cli.dup")
    cases = [
        (("queue", "create", "--name", "cli.dup"), "petrel: error: queue 'cli.dup' already exists"),
        (("queue", "delete", "--name", "cli.none"), "petrel: error: queue 'cli.none' does not exist"),
        (("queue", "purge", "--name", "cli.none"), "petrel: error: queue 'cli.none' does not exist"),
        (("queue", "create", "--name", "cli.bad", "--filter", "a >"), "petrel: error: invalid selector 'a >'"),
    ]
    for args, message in cases:
        out = petrel(*args, "--url", url(broker))
        assert out.returncode == 1, (args, out.stderr)
        assert out.stderr.startswith(message) and out.stderr.count("\n") == 1, out.stderr
        assert out.stdout == ""


def test_queue_delete_with_consumers_needs_the_flag(broker):
    petrel("queue", "create", "--url", url(broker), "--name", "cli.busy")
    conn, listener = connect(broker)
    try:
        conn.subscribe("/queue/cli.busy", id="s", ack="auto")
        wait_for(lambda: parse_table(petrel("queue", "stat", "--url", url(broker), "--queue-name",
                                            "cli.busy").stdout)[0]["CONSUMER_COUNT"] == "1", 10)
        refused = petrel("queue", "delete", "--url", url(broker), "--name", "cli.busy")
        assert refused.returncode == 1 and "remove_consumers" in refused.stderr
        forced = petrel("queue", "delete", "--url", url(broker), "--name", "cli.busy", "--remove-consumers")
        assert forced.returncode == 0, forced.stderr
    finally:
        conn.disconnect()


def test_usage_errors_exit_2():
    for args in (("queue", "create"), ("queue", "stat", "--max-rows", "0"), ("address", "delete"),
                 ("queue", "stat", "--url", "tcp://localhost:61616")):
        out = petrel(*args)
        assert out.returncode == 2, (args, out)
        assert out.stderr.startswith("petrel: error: ") and out.stderr.count("\n") == 1


def test_an_unreachable_broker_is_one_clear_line():
    where = f"http://127.0.0.1:{free_port()}"
    for args in (("queue", "stat"), ("address", "show"), ("queue", "purge", "--name", "x")):
        out = petrel(*args, "--url", where)
        assert out.returncode == 1
        assert out.stderr == f"petrel: error: cannot reach the broker at {where} (connection refused); is it running?\n"


def test_address_show_create_delete(broker):
    made = petrel("address", "create", "--url", url(broker), "--name", "cli.addr", "--anycast", "--multicast")
    assert made.returncode == 0 and made.stdout.strip() == "Address cli.addr created: routing-types=ANYCAST,MULTICAST"
    petrel("queue", "create", "--url", url(broker), "--name", "cli.addr.q", "--address", "cli.addr")
    names = petrel("address", "show", "--url", url(broker)).stdout.split()
    assert "cli.addr" in names and "DLQ" in names
    shown = petrel("address", "show", "--url", url(broker), "--name", "cli.addr")
    assert shown.returncode == 0
    assert "routing types: ANYCAST, MULTICAST" in shown.stdout and "queue cli.addr.q (ANYCAST, 0 messages)" in shown.stdout
    data = json.loads(petrel("address", "show", "--url", url(broker), "--name", "cli.addr", "--json").stdout)
    assert [q["name"] for q in data["queues"]] == ["cli.addr.q"]
    again = petrel("address", "create", "--url", url(broker), "--name", "cli.addr")
    assert again.returncode == 1 and "already exists" in again.stderr
    refused = petrel("address", "delete", "--url", url(broker), "--name", "cli.addr")
    assert refused.returncode == 1 and "has queues (cli.addr.q)" in refused.stderr
    forced = petrel("address", "delete", "--url", url(broker), "--name", "cli.addr", "--force")
    assert forced.returncode == 0 and forced.stdout.strip() == "Address cli.addr deleted with its queues cli.addr.q"
    gone = petrel("address", "show", "--url", url(broker), "--name", "cli.addr")
    assert gone.returncode == 1 and gone.stderr.strip() == "petrel: error: address 'cli.addr' does not exist"
