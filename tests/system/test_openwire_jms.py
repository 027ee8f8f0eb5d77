"""OpenWire first light (issue 15): ActiveMQ Classic's JMS client, unchanged, on Petrel's
all-protocols port: 100 persistent text messages sent and received on a queue (auto and client
acknowledge), and a kill -9 of the broker between the send and the receive loses none."""

from __future__ import annotations

import re
import subprocess

import pytest

from jms import compile_program, run
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system

N = 100
TEXT = "\u00e9\u20ac\U0001f600"


@pytest.fixture
def classpath(tmp_path):
    return compile_program("JmsQueueRoundTrip", tmp_path / "classes")


def received(lines: list[str]) -> list[int]:
    got = [int(m.group(1)) for line in lines if (m := re.match(r"GOT (\d+) message \1 (.*) persistent=true", line))
           and m.group(2) == TEXT]
    assert f"RECEIVED {len(got)}" in lines, lines[-5:]
    return got


@pytest.mark.parametrize("ack", ["auto", "client"])
def test_send_and_receive_persistent_text_on_a_queue(tmp_path, classpath, ack):
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        lines = run(classpath, "JmsQueueRoundTrip", f"tcp://127.0.0.1:{broker.port}", "orders", str(N), "both", ack)
        assert f"SENT {N}" in lines
        assert received(lines) == list(range(N))
        # all acknowledged: a new consumer finds nothing
        again = run(classpath, "JmsQueueRoundTrip", f"tcp://127.0.0.1:{broker.port}?jms.prefetchPolicy.all=10",
                    "orders", "1", "receive", "auto")
        assert "RECEIVED 0" in again
    finally:
        broker.stop()


def test_kill9_between_send_and_receive_loses_nothing(tmp_path, classpath):
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        url = f"tcp://127.0.0.1:{broker.port}"
        assert f"SENT {N}" in run(classpath, "JmsQueueRoundTrip", url, "durable.orders", str(N), "send")
        broker.kill9()
        broker.start()
        assert received(run(classpath, "JmsQueueRoundTrip", url, "durable.orders", str(N), "receive",
                            "client")) == list(range(N))
    finally:
        broker.stop()


def test_client_ack_beyond_the_prefetch_and_a_topic(tmp_path, classpath):
    """A client-ack session holding more than its prefetch (10) unacknowledged keeps receiving
    (its delivered acks widen the window); a topic subscriber gets what is sent after it subscribed;
    a prefetch 0 consumer (MessagePull) receives too."""
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        url = f"tcp://127.0.0.1:{broker.port}?jms.prefetchPolicy.all=10"
        assert received(run(classpath, "JmsQueueRoundTrip", url, "held", str(N), "both", "client")) == list(range(N))
        assert received(run(classpath, "JmsQueueRoundTrip", url, "topic:news", str(N), "both", "auto")) == list(range(N))
        pull = f"tcp://127.0.0.1:{broker.port}?jms.prefetchPolicy.all=0"  # MessagePull: a window of one, pushed
        assert received(run(classpath, "JmsQueueRoundTrip", pull, "pulled", str(N), "both", "auto")) == list(range(N))
    finally:
        broker.stop()


def test_local_transactions_commit_and_rollback(tmp_path):
    """A transacted JMS session: what a rolled-back send sent is gone, a committed one arrives;
    a rolled-back receive comes again, redelivered, and its commit leaves nothing."""
    classpath = compile_program("JmsTransactions", tmp_path / "classes")
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        lines = run(classpath, "JmsTransactions", f"tcp://127.0.0.1:{broker.port}", "tx.orders", "10")
        assert lines == ["SENT 10", "FIRST 10", "AGAIN 10 redelivered=true", "LEFT 0"]
    finally:
        broker.stop()


def test_request_reply_through_a_temporary_queue(tmp_path):
    """JMSReplyTo a temporary queue: each request answered on it, with its correlation id (and
    the client's deletion of the temporary queue is answered)."""
    classpath = compile_program("JmsRequestReply", tmp_path / "classes")
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        lines = run(classpath, "JmsRequestReply", f"tcp://127.0.0.1:{broker.port}", "service", "20")
        assert lines == ["REPLIES 20"]
    finally:
        broker.stop()


def test_every_message_kind_and_a_selector(tmp_path):
    """Bytes, map, object, stream and plain messages come back as they went (their bodies as
    the client encoded them, their typed properties); a selector picks by property."""
    classpath = compile_program("JmsKinds", tmp_path / "classes")
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        lines = run(classpath, "JmsKinds", f"tcp://127.0.0.1:{broker.port}?jms.trustAllPackages=true", "kinds")
        assert lines == ["BYTES [0, 1, 2, -1]", "MAP petrel 42", "OBJECT [a, b]", "STREAM s 7",
                         f"PLAIN {1 << 40} true 3", "SELECTED 2 t6 t8"]
    finally:
        broker.stop()


def test_failover_url_across_a_kill9_loses_and_duplicates_nothing(tmp_path, classpath):
    """A producer on a failover: URL while the broker is killed with -9 and restarted: the
    client reconnects and resends what had no response; every message is there once."""
    n = 1000
    broker = BrokerProcess(tmp_path / "b").start()
    url = f"failover:(tcp://127.0.0.1:{broker.port})?initialReconnectDelay=50&maxReconnectDelay=1000"
    sender = subprocess.Popen(["java", "-cp", classpath, "JmsQueueRoundTrip", url, "fo.orders", str(n), "send"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in sender.stdout:
            lines.append(line.strip())
            if line.startswith("PROGRESS 300"):
                broker.kill9()
                broker.start()
                break
        assert broker.proc is not None and broker.proc.poll() is None, lines[-5:]
        rest, _ = sender.communicate(timeout=180)
        lines += rest.splitlines()
        assert sender.returncode == 0 and f"SENT {n}" in lines, lines[-20:]
        got = received(run(classpath, "JmsQueueRoundTrip", url, "fo.orders", str(n + 1), "receive", "client"))
        assert sorted(got) == list(range(n)), (len(got), len(set(got)))
    finally:
        if sender.poll() is None:
            sender.kill()
        broker.stop()


def test_durable_subscriber_across_a_kill9(tmp_path):
    """A durable topic subscriber (client id + subscription name) keeps what is published while it
    is away, across a kill -9 of the broker; its unsubscribe deletes the subscription."""
    classpath = compile_program("JmsDurable", tmp_path / "classes")
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        url = f"tcp://127.0.0.1:{broker.port}"
        assert run(classpath, "JmsDurable", url, "news", str(N), "subscribe") == ["SUBSCRIBED"]
        assert run(classpath, "JmsDurable", url, "news", str(N), "publish") == [f"PUBLISHED {N}"]
        broker.kill9()
        broker.start()
        assert run(classpath, "JmsDurable", url, "news", str(N), "receive") == [f"RECEIVED {N}"]
        assert run(classpath, "JmsDurable", url, "news", "1", "publish") == ["PUBLISHED 1"]
        assert run(classpath, "JmsDurable", url, "news", "0", "receive") == ["RECEIVED 0"]  # unsubscribed: a new, empty one
    finally:
        broker.stop()
