"""MQTT in a 2-node cluster of real `petrel run` processes, with paho-mqtt 2.x on each node's
all-protocols port: wildcard subscriptions on one node get what is published on the other."""

from __future__ import annotations

import pytest
from cluster_harness import make_cluster, start_all, wait_bindings, wait_connected

from mqtt_clients import V5, V311, Paho

pytestmark = pytest.mark.system


@pytest.mark.parametrize("version,clean", [(V311, True), (V5, False)])
def test_a_wildcard_subscription_on_one_node_gets_what_the_other_node_publishes(tmp_path, stop_nodes,
                                                                              version, clean) -> None:
    a, b = make_cluster(tmp_path, 2)
    stop_nodes([a, b])
    start_all([a, b])
    wait_connected([a, b])
    sub = Paho(b.port, "far-sub", version=version, clean=clean, expiry=None if clean else 600)
    sub.subscribe("plant/+/temp", 1)
    sub.subscribe("plant/hall/#", 1)
    sub.subscribe("plant/exact/temp", 1)
    for name in ("far-sub.plant.*.temp", "far-sub.plant.hall.#", "far-sub.plant.exact.temp"):
        wait_bindings(a, name, consumers=1)
    pub = Paho(a.port, "near-pub")
    pub.publish("plant/kitchen/temp", b"kitchen", 1)
    pub.publish("plant/hall/deep/er", b"hall", 1)
    pub.publish("plant/hall/temp", b"hall temp", 1)  # both wildcards match: one copy each
    pub.publish("plant/exact/temp", b"exact", 1)  # the exact filter and plant/+/temp
    pub.publish("plant/kitchen/humidity", b"no match", 1)
    pub.close()
    got = sorted((m.topic, m.payload) for m in sub.drain(idle=1.5))
    assert got == sorted([("plant/kitchen/temp", b"kitchen"), ("plant/hall/deep/er", b"hall"),
                          ("plant/hall/temp", b"hall temp"), ("plant/hall/temp", b"hall temp"),
                          ("plant/exact/temp", b"exact"), ("plant/exact/temp", b"exact")])
    # published on its own node: as before, once per matching subscription
    local = Paho(b.port, "local-pub")
    local.publish("plant/office/temp", b"local", 1)
    local.close()
    assert [(m.topic, m.payload) for m in sub.drain(idle=1.0)] == [("plant/office/temp", b"local")]
    sub.close()
