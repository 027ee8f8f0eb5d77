"""Wildcard queue consumers with ActiveMQ Classic's JMS client (issue 15): a consumer on queue
``orders.>`` or ``orders.*.eu`` receives from every queue the pattern matches, those that exist
and those created after it, its prefetch shared by them. A real Java program from tests/interop
compiled at test time (`jms`), against a real `petrel run` broker, or ActiveMQ 5.17 in the
reference mode (PETREL_JMS_REFERENCE=activemq)."""

from __future__ import annotations

import pytest

from jms import REFERENCE, compile_program, jms_broker, run  # noqa: F401 (a fixture)

pytestmark = pytest.mark.system


@pytest.mark.parametrize("prefetch", ["", "?jms.prefetchPolicy.all=5", "?jms.prefetchPolicy.all=0"])
def test_wildcard_queue_consumers_take_from_every_matching_queue(tmp_path, jms_broker, prefetch):
    classpath = compile_program("JmsQueueWildcards", tmp_path / "classes")
    lines = run(classpath, "JmsQueueWildcards", f"tcp://127.0.0.1:{jms_broker.port}{prefetch}", "orders")
    assert lines == ["EXISTING a1 b1", "FUTURE c1 d1", "STAR e1 null", "MANY 30", "LEFT null", "OTHER f1 x1"]


def test_a_send_to_a_wildcard_destination(tmp_path, jms_broker):
    """A send to queue ws.> or topic ws.*: Petrel refuses it with an error the sender sees (the
    connection stays); ActiveMQ 5.17 (measured) accepts it as a destination of that literal
    name, so it reaches none of the matching destinations. Neither delivers it to ws.a, ws.b,
    ws.ta or ws.tb."""
    classpath = compile_program("JmsWildcardSend", tmp_path / "classes")
    lines = run(classpath, "JmsWildcardSend", f"tcp://127.0.0.1:{jms_broker.port}", "ws")
    sent = "SENT ok" if REFERENCE else "SENT refused"
    assert lines == [sent, sent, "QUEUES null null", "TOPICS null null"]
