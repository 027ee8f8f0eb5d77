"""`petrel producer`, `petrel consumer` and `petrel browser` as real commands against a real broker,
over CORE and STOMP; what they say is checked against what stomp.py (or the other protocol) sees."""

from __future__ import annotations

import re
import time

import pytest

from cli_process import ok, petrel, running, spawn
from conftest import connect, module_broker
from petrel.client import Connection
from petrel.testing.process import BrokerProcess, free_port, wait_for

pytestmark = pytest.mark.system

PROTOCOLS = ["core", "stomp"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    yield from module_broker(tmp_path_factory, "cli-tools")


def url(b: BrokerProcess) -> str:
    return f"tcp://127.0.0.1:{b.port}"


def counts(out: str, verb: str) -> list[int]:
    """The N of every "... Produced: N messages" (or Consumed, Browsed) line, in order."""
    return [int(n) for n in re.findall(rf"{verb}: (\d+) messages", out)]


def received_bodies(out: str) -> list[str]:
    return re.findall(r"thread=\d+ Received (.*)$", out, re.M)


def stomp_drain(b: BrokerProcess, queue: str, expect: int) -> list:
    """The messages of /queue/<queue>, consumed with stomp.py: ``expect`` of them, waited for, and
    any more that come within a short idle time (so a test sees extras too)."""
    conn, listener = connect(b)
    try:
        conn.subscribe(f"/queue/{queue}", id="drain", ack="auto")
        got = []
        for _ in range(expect):
            try:
                got.append(listener.get(10))
            except Exception:
                break
        return got + listener.drain(0.2)
    finally:
        conn.disconnect()


def stomp_send(b: BrokerProcess, destination: str, bodies: list[str], headers: list[dict] | None = None) -> None:
    conn, listener = connect(b)
    try:
        for i, body in enumerate(bodies):
            extra = headers[i] if headers else {}
            conn.send(destination, body, headers={"persistent": "true", "receipt": f"r{i}", **extra})
        for _ in bodies:
            listener.receipts.get(timeout=10)
    finally:
        conn.disconnect()


def other(protocol: str) -> str:
    return "stomp" if protocol == "core" else "core"


# -- producer ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_producer_then_consumer_over_the_other_protocol(broker, protocol):
    queue = f"tools.roundtrip.{protocol}"
    out = ok("producer", "--url", url(broker), "--protocol", protocol, "--destination", f"queue://{queue}",
             "--message-count", "40")
    assert f"Producer ActiveMQQueue[{queue}], thread=0 Produced: 40 messages" in out
    assert re.search(rf"Producer ActiveMQQueue\[{re.escape(queue)}\], thread=0 Elapsed time in milli second : \d+",
                     out)
    out = ok("consumer", "--url", url(broker), "--protocol", other(protocol), "--destination", f"queue://{queue}",
             "--message-count", "40", "--verbose")
    assert f"Consumer ActiveMQQueue[{queue}], thread=0 Consumed: 40 messages" in out
    assert received_bodies(out) == [f"Test message {i}" for i in range(40)]
    assert stomp_drain(broker, queue, 0) == []  # all of them were consumed, nothing more


def test_producer_threads_properties_group_and_size(broker):
    queue = "tools.threads"
    out = ok("producer", "--url", url(broker), "--destination", queue, "--threads", "2", "--message-count", "15",
             "--message-size", "300", "--property", "color=red", "--property", "rank=7", "--group", "G1")
    assert sorted(counts(out, "Produced")) == [15, 15]
    assert "thread=0 Produced: 15 messages" in out and "thread=1 Produced: 15 messages" in out
    frames = stomp_drain(broker, queue, 30)
    assert len(frames) == 30
    assert all(len(f.body) == 300 for f in frames)
    assert {f.headers["color"] for f in frames} == {"red"}
    assert {f.headers["rank"] for f in frames} == {"7"}
    assert {f.headers["JMSXGroupID"] for f in frames} == {"G1"}
    assert {f.headers["persistent"] for f in frames} == {"true"}
    per_thread = {}
    for f in frames:
        per_thread.setdefault(f.headers["ThreadSent"], []).append(int(f.headers["count"]))
    assert sorted(per_thread) == ["Producer thread=0", "Producer thread=1"]
    assert all(sorted(v) == list(range(15)) for v in per_thread.values())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_non_persistent_producer(broker, protocol):
    queue = f"tools.nonpersistent.{protocol}"
    out = ok("producer", "--url", url(broker), "--protocol", protocol, "--destination", queue, "--non-persistent",
             "--message-count", "25", "--text", "hello")
    assert counts(out, "Produced") == [25]
    frames = stomp_drain(broker, queue, 25)
    assert [f.body for f in frames] == ["hello"] * 25
    assert {f.headers["persistent"] for f in frames} == {"false"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_transacted_producer_makes_messages_visible_per_commit(broker, protocol):
    queue = f"tools.tx.{protocol}"
    seen: set[int] = set()
    with running("producer", "--url", url(broker), "--protocol", protocol, "--destination", queue,
                 "--message-count", "25", "--commit-interval", "10", "--sleep", "40") as proc:
        with Connection(url(broker)) as conn:
            while proc.poll() is None:
                info = conn.queue_info(queue)
                seen.add(info["message_count"] if info else 0)
                time.sleep(0.005)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert counts(stdout, "Produced") == [25]
    assert seen <= {0, 10, 20, 25}, seen  # never a partial transaction
    assert 10 in seen  # the first commit was visible before the second one
    assert len(stomp_drain(broker, queue, 25)) == 25


# -- consumer ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_consumer_filter(broker, protocol):
    queue = f"tools.filter.{protocol}"
    colors = ["red" if i % 3 == 0 else "blue" for i in range(12)]
    stomp_send(broker, f"/queue/{queue}", [f"{c}-{i}" for i, c in enumerate(colors)], [{"color": c} for c in colors])
    out = ok("consumer", "--url", url(broker), "--protocol", protocol, "--destination", queue,
             "--filter", "color = 'red'", "--message-count", "0", "--break-on-null", "--receive-timeout", "400",
             "--verbose")
    assert "Consumer:: filter = color = 'red'" in out
    assert counts(out, "Consumed") == [4]
    assert received_bodies(out) == [f"red-{i}" for i in (0, 3, 6, 9)]
    assert sorted(f.body for f in stomp_drain(broker, queue, 8)) == sorted(
        f"blue-{i}" for i, c in enumerate(colors) if c == "blue")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_message_count_leaves_the_rest_and_break_on_null_stops(broker, protocol):
    queue = f"tools.count.{protocol}"
    stomp_send(broker, f"/queue/{queue}", [f"m{i}" for i in range(9)])
    out = ok("consumer", "--url", url(broker), "--protocol", protocol, "--destination", queue,
             "--message-count", "5", "--verbose")
    assert counts(out, "Consumed") == [5]
    assert received_bodies(out) == [f"m{i}" for i in range(5)]
    # 4 are left; asking for 100 with --break-on-null gets those and stops at the first empty receive
    started = time.monotonic()
    out = ok("consumer", "--url", url(broker), "--protocol", protocol, "--destination", queue,
             "--message-count", "100", "--break-on-null", "--receive-timeout", "300", "--verbose")
    assert time.monotonic() - started < 30
    assert counts(out, "Consumed") == [4]
    assert received_bodies(out) == [f"m{i}" for i in range(5, 9)]
    assert "Consumer thread finished" in out


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_transacted_consumer(broker, protocol):
    queue = f"tools.txconsumer.{protocol}"
    stomp_send(broker, f"/queue/{queue}", [f"t{i}" for i in range(8)])
    out = ok("consumer", "--url", url(broker), "--protocol", protocol, "--destination", queue,
             "--message-count", "7", "--commit-interval", "3")
    assert counts(out, "Consumed") == [7]
    assert [f.body for f in stomp_drain(broker, queue, 1)] == ["t7"]  # the 7 were committed, the 8th stays


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_durable_subscription_keeps_messages_while_away(broker, protocol):
    topic = f"topic://tools.durable.{protocol}"
    args = ("consumer", "--url", url(broker), "--protocol", protocol, "--destination", topic, "--durable",
            "--clientID", f"cid-{protocol}", "--subscription", "sub1", "--message-count", "0", "--break-on-null",
            "--receive-timeout", "300")
    assert counts(ok(*args), "Consumed") == [0]  # creates the subscription
    out = ok("producer", "--url", url(broker), "--protocol", protocol, "--destination", topic,
             "--message-count", "6")
    assert f"Producer ActiveMQTopic[tools.durable.{protocol}], thread=0 Produced: 6 messages" in out
    out = ok(*args, "--verbose")
    assert counts(out, "Consumed") == [6]
    assert received_bodies(out) == [f"Test message {i}" for i in range(6)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_topic_consumers_each_get_every_message(broker, protocol):
    topic = f"topic://tools.topic.{protocol}"
    with running("consumer", "--url", url(broker), "--protocol", protocol, "--destination", topic,
                 "--threads", "2", "--message-count", "12", "--receive-timeout", "200") as proc:
        lines: list[str] = []
        wait_for(lambda: (lines.append(proc.stdout.readline()) or
                          sum("wait until 12 messages are consumed" in line for line in lines) == 2), 30)
        ok("producer", "--url", url(broker), "--protocol", other(protocol), "--destination", topic,
           "--message-count", "12")
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    stdout = "".join(lines) + stdout
    assert sorted(counts(stdout, "Consumed")) == [12, 12]
    assert f"Consumer ActiveMQTopic[tools.topic.{protocol}], thread=1 Consumed: 12 messages" in stdout


# -- browser ---------------------------------------------------------------------------------------

def test_browser_shows_messages_without_consuming_them(broker):
    queue = "tools.browse"
    stomp_send(broker, f"/queue/{queue}", [f"body-{i}-" + "x" * 200 for i in range(5)],
               [{"kind": "odd" if i % 2 else "even"} for i in range(5)])
    for _ in range(2):  # browsing twice shows the same messages: nothing was consumed
        out = ok("browser", "--url", url(broker), "--destination", f"queue://{queue}", "--body-size", "20")
        lines = [line for line in out.splitlines() if line.startswith("Message id=")]
        assert len(lines) == 5
        assert all("address=tools.browse" in line for line in lines)
        assert [re.search(r"body='(body-\d+)", line).group(1) for line in lines] == [f"body-{i}" for i in range(5)]
        assert all("... (207 bytes)" in line for line in lines)  # truncated, with the full size
        assert "kind='even'" in lines[0] and "kind='odd'" in lines[1]
        assert counts(out, "Browsed") == [5]
    out = ok("browser", "--url", url(broker), "--destination", queue, "--filter", "kind = 'odd'")
    assert counts(out, "Browsed") == [2]
    assert len(stomp_drain(broker, queue, 5)) == 5


def test_browser_over_stomp_is_a_usage_error(broker):
    out = petrel("browser", "--url", url(broker), "--protocol", "stomp", "--destination", "queue://x")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("petrel: error: petrel browser needs --protocol core")


# -- failures ----------------------------------------------------------------------------------------

def test_no_broker_is_one_line_and_exit_1():
    port = free_port()  # nothing listens there
    target = f"tcp://127.0.0.1:{port}"
    runs = [
        ("producer", "--url", target),
        ("producer", "--url", target, "--protocol", "stomp"),
        ("consumer", "--url", target),
        ("consumer", "--url", target, "--protocol", "stomp"),
        ("browser", "--url", target),
        ("perf", "client", "--url", target, "--message-count", "10"),
        ("perf", "producer", "--url", target, "--protocol", "stomp", "--message-count", "10"),
    ]
    procs = [spawn(*args) for args in runs]
    for args, proc in zip(runs, procs):
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 1, (args, stderr)
        assert stderr == (f"petrel: error: cannot connect to {target} (connection refused); "
                          "is the broker running?\n"), (args, stderr)


USAGE_ERRORS = [
    (("producer", "--destination", "http://x"), "--destination must be queue://NAME or topic://NAME"),
    (("consumer", "--durable", "--clientID", "c", "--destination", "queue://q"), "need a topic:// destination"),
    (("consumer", "--durable", "--destination", "topic://t"), "needs --clientID"),
    (("producer", "--property", "novalue"), "--property takes KEY=VALUE"),
    (("producer", "--message-size", "10", "--text", "x"), "use only one of"),
    (("producer", "--url", "udp://h:1"), "unsupported transport"),
]


def test_bad_usage_is_one_line_and_exit_2():
    procs = [spawn(*args) for args, _ in USAGE_ERRORS]
    for (args, message), proc in zip(USAGE_ERRORS, procs):
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 2, (args, stderr)
        assert stderr.count("\n") == 1 and stderr.startswith("petrel: error: "), (args, stderr)
        assert message in stderr, (args, stderr)
