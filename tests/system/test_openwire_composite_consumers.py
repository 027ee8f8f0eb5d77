"""Composite consumers with ActiveMQ Classic's JMS client (issue 15): a consumer on ``a,b`` or
``queue://a,topic://b`` receives from each part (a part may be a wildcard); a composite send
reaches each of its queues. A real Java program from tests/interop compiled at test time
(`jms`), against a real `petrel run` broker, or ActiveMQ 5.17 in the reference mode
(PETREL_JMS_REFERENCE=activemq)."""

from __future__ import annotations

import pytest

from jms import REFERENCE, compile_program, jms_broker, run  # noqa: F401 (a fixture)

pytestmark = pytest.mark.system


@pytest.mark.parametrize("prefetch", ["", "?jms.prefetchPolicy.all=0"])
def test_composite_consumers_take_from_each_part(tmp_path, jms_broker, prefetch):
    classpath = compile_program("JmsCompositeConsumers", tmp_path / "classes")
    lines = run(classpath, "JmsCompositeConsumers", f"tcp://127.0.0.1:{jms_broker.port}{prefetch}", "comp")
    if REFERENCE:
        # Where ActiveMQ 5.17 differs (measured): a consumer on queue "queue://c,topic://t" gets
        # the queue's message only; the two copies of a composite send carry one message id, and
        # the client-acknowledge settles one of them, the other is left on its queue. Petrel
        # takes from each part of either kind and settles both.
        assert lines == ["BOTH a1 b1", "MIXED c1 null", "WILD w1 x1", "SENT s1 s1", "LEFT s1"]
    else:
        assert lines == ["BOTH a1 b1", "MIXED c1 t1", "WILD w1 x1", "SENT s1 s1", "LEFT null"]
