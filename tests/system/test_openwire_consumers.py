"""OpenWire consumers with ActiveMQ Classic's JMS client (issue 15): queue browsers, prefetch 0
consumers (MessagePull), and redelivery counts with dead letters. Real Java programs from
tests/interop compiled at test time (`jms`), against a real `petrel run` broker, or ActiveMQ 5.17 in the reference mode (`jms`:
PETREL_JMS_REFERENCE=activemq)."""

from __future__ import annotations

import pytest

from jms import REFERENCE, activemq_reference, compile_program, jms_broker, petrel_only, run  # noqa: F401 (a fixture)

pytestmark = pytest.mark.system


@pytest.mark.parametrize("prefetch", ["", "?jms.prefetchPolicy.all=0", "?jms.prefetchPolicy.queueBrowserPrefetch=7"])
def test_queue_browser_sees_a_snapshot_and_consumes_nothing(tmp_path, jms_broker, prefetch):
    """1,200 messages browsed in order (more than the default browser prefetch of 500: the
    client's acks make room; with prefetch 0 each comes for a pull), a selector, then all
    received (the browse took none), then an empty browse that ends."""
    classpath = compile_program("JmsBrowse", tmp_path / "classes")
    lines = run(classpath, "JmsBrowse", f"tcp://127.0.0.1:{jms_broker.port}{prefetch}", "browsed", "1200")
    assert lines == ["BROWSED 1200", "ORDERED true", "SELECTED 3", "RECEIVED 1200", "EMPTY 0"]


def test_prefetch_0_consumers_pull(tmp_path, jms_broker):
    """receive(timeout) and receiveNoWait on an empty queue return null (the broker's null
    dispatch ends the pull); nothing is pushed to a consumer that did not ask."""
    classpath = compile_program("JmsPull", tmp_path / "classes")
    lines = run(classpath, "JmsPull", f"tcp://127.0.0.1:{jms_broker.port}?jms.prefetchPolicy.all=0", "pulled")
    assert lines == ["TIMED null", "NOWAIT null", "FIRST m0", "SECOND m1", "TIMED null", "LATE late",
                     "RECEIVED 50"]


DLQ_SETTINGS = """
[address_settings."#"]
dead_letter_address = "ActiveMQ.DLQ"
max_delivery_attempts = 2
"""


@pytest.fixture
def dlq_broker(broker_factory):
    """A broker whose dead-letter address is ActiveMQ's (ActiveMQ.DLQ: its own in the reference
    mode)."""
    if REFERENCE:
        yield from activemq_reference()
    else:
        yield broker_factory(DLQ_SETTINGS, "dlq").start()


def test_rolled_back_past_the_clients_redelivery_policy_goes_to_the_dead_letter_address(tmp_path, dlq_broker):
    """A transacted receive rolled back: the client redelivers it itself (JMSXDeliveryCount 1, 2,
    3) until its redelivery policy (maximumRedeliveries=2) gives up and poisons it; the broker
    sends it to the dead-letter address its settings name (ActiveMQ.DLQ here), with its origin."""
    classpath = compile_program("JmsRedelivery", tmp_path / "classes")
    url = (f"tcp://127.0.0.1:{dlq_broker.port}?jms.redeliveryPolicy.maximumRedeliveries=2"
           "&jms.redeliveryPolicy.initialRedeliveryDelay=0&jms.redeliveryPolicy.redeliveryDelay=0")
    lines = run(classpath, "JmsRedelivery", url, "rolled", "ActiveMQ.DLQ", "rollback")
    assert lines == ["DELIVERY 1 false", "DELIVERY 2 true", "DELIVERY 3 true", "DLQ poison queue://rolled", "LEFT 0"]


def test_a_closed_consumers_prefetched_messages_are_not_redelivered(tmp_path, jms_broker):
    """Only the message the application received counts as delivered when its consumer closes
    unacknowledged; the four it had only prefetched come back as first deliveries."""
    classpath = compile_program("JmsRedelivery", tmp_path / "classes")
    url = f"tcp://127.0.0.1:{jms_broker.port}?jms.prefetchPolicy.all=10"
    lines = run(classpath, "JmsRedelivery", url, "closed", "ActiveMQ.DLQ", "close")
    assert lines == ["FIRST m0 1 false", "AGAIN m0 2 true", "AGAIN m1 1 false", "AGAIN m2 1 false",
                     "AGAIN m3 1 false", "AGAIN m4 1 false"]


@petrel_only  # (ActiveMQ has no broker-side maximum: its RedeliveryPlugin is off by default)
def test_max_delivery_attempts_sends_to_the_dead_letter_address(tmp_path, dlq_broker):
    """Received and left unacknowledged twice (max_delivery_attempts = 2): the broker moves it to
    the dead-letter address; the counts the client sees are the broker's."""
    classpath = compile_program("JmsRedelivery", tmp_path / "classes")
    lines = run(classpath, "JmsRedelivery", f"tcp://127.0.0.1:{dlq_broker.port}", "attempted", "ActiveMQ.DLQ",
                "attempts")
    assert lines == ["DELIVERY 1 false", "DELIVERY 2 true", "DLQ attempted queue://attempted", "LEFT 0"]


def test_individual_and_dups_ok_acknowledgement(tmp_path, jms_broker):
    """INDIVIDUAL_ACKNOWLEDGE settles exactly the messages acknowledged (the others come back,
    redelivered); DUPS_OK_ACKNOWLEDGE settles what was received by the time its consumer closes."""
    classpath = compile_program("JmsAckModes", tmp_path / "classes")
    lines = run(classpath, "JmsAckModes", f"tcp://127.0.0.1:{jms_broker.port}", "acks")
    assert lines == ["INDIVIDUAL 1r 3r 5r 7r 9r", "DUPSOK 10", "LEFT 0"]


@petrel_only  # (a kill -9 and restart of the broker)
def test_a_durable_wildcard_subscriber_across_a_kill9(tmp_path, jms_broker):
    """A durable subscriber on news.> (Petrel's pattern address news.#) keeps what is published
    to news.eu while it is away, across a kill -9 of the broker."""
    classpath = compile_program("JmsDurable", tmp_path / "classes")
    url = f"tcp://127.0.0.1:{jms_broker.port}"
    assert run(classpath, "JmsDurable", url, "news.>", "5", "subscribe") == ["SUBSCRIBED"]
    assert run(classpath, "JmsDurable", url, "news.eu", "5", "publish") == ["PUBLISHED 5"]
    jms_broker.kill9()
    jms_broker.start()
    assert run(classpath, "JmsDurable", url, "news.>", "5", "receive") == ["RECEIVED 5"]
