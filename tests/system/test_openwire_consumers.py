"""OpenWire consumers with ActiveMQ Classic's JMS client (issue 15): queue browsers, prefetch 0
consumers (MessagePull), and redelivery counts with dead letters. Real Java programs from
tests/interop compiled at test time (`jms`), against a real `petrel run` broker."""

from __future__ import annotations

import pytest

from jms import compile_program, run
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "b").start()
    yield b
    b.stop()


@pytest.mark.parametrize("prefetch", ["", "?jms.prefetchPolicy.all=0", "?jms.prefetchPolicy.queueBrowserPrefetch=7"])
def test_queue_browser_sees_a_snapshot_and_consumes_nothing(tmp_path, broker, prefetch):
    """1,200 messages browsed in order (more than the default browser prefetch of 500: the
    client's acks make room; with prefetch 0 each comes for a pull), a selector, then all
    received (the browse took none), then an empty browse that ends."""
    classpath = compile_program("JmsBrowse", tmp_path / "classes")
    lines = run(classpath, "JmsBrowse", f"tcp://127.0.0.1:{broker.port}{prefetch}", "browsed", "1200")
    assert lines == ["BROWSED 1200", "ORDERED true", "SELECTED 3", "RECEIVED 1200", "EMPTY 0"]


def test_prefetch_0_consumers_pull(tmp_path, broker):
    """receive(timeout) and receiveNoWait on an empty queue return null (the broker's null
    dispatch ends the pull); nothing is pushed to a consumer that did not ask."""
    classpath = compile_program("JmsPull", tmp_path / "classes")
    lines = run(classpath, "JmsPull", f"tcp://127.0.0.1:{broker.port}?jms.prefetchPolicy.all=0", "pulled")
    assert lines == ["TIMED null", "NOWAIT null", "FIRST m0", "SECOND m1", "TIMED null", "LATE late",
                     "RECEIVED 50"]
