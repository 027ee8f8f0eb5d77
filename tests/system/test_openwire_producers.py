"""OpenWire producers with ActiveMQ Classic's JMS client (issue 15): producer flow control
(ProducerAck), and ActiveMQ's wildcard and composite destinations. Real Java programs from
tests/interop compiled at test time (`jms`), against a real `petrel run` broker, or ActiveMQ 5.17 in the reference mode (`jms`:
PETREL_JMS_REFERENCE=activemq)."""

from __future__ import annotations

import pytest

from jms import compile_program, jms_broker, run  # noqa: F401 (jms_broker: a fixture)

pytestmark = pytest.mark.system


def test_a_producer_with_a_window_is_never_blocked_for_good(tmp_path, jms_broker):
    """A 4 KiB producer window (about three messages of 1 KiB): 500 non-persistent and 500
    persistent async sends go through because the broker answers each with a ProducerAck."""
    classpath = compile_program("JmsProducerWindow", tmp_path / "classes")
    url = f"tcp://127.0.0.1:{jms_broker.port}?jms.producerWindowSize=4096&jms.useAsyncSend=true"
    lines = run(classpath, "JmsProducerWindow", url, "windowed", "500")
    assert lines == ["SENT 1000", "RECEIVED 1000"]


def test_wildcard_topic_consumers_and_composite_producers(tmp_path, jms_broker):
    """prices.> gets prices and everything below it (as on ActiveMQ), prices.*.eu one word between; a composite
    destination's message goes to each queue and topic it names."""
    classpath = compile_program("JmsWildcards", tmp_path / "classes")
    lines = run(classpath, "JmsWildcards", f"tcp://127.0.0.1:{jms_broker.port}")
    assert lines == ["ANY prices prices.bond.eu.long prices.stock.eu prices.stock.us", "STAR prices.stock.eu",
                     "EXACT prices.stock.eu", "COMPOSITE comp.a=1", "COMPOSITE comp.b=1", "COMPOSITE comp.c=1",
                     "COMPOSITE comp.d=1", "COMPOSITE comp.t=1"]
