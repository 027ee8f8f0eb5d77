"""The chaos harness with OpenWire clients (``--protocol OPENWIRE``): ActiveMQ Classic's JMS client
(activemq-client.jar) in one JVM, over ``failover:(...)`` URLs, persistent synchronous sends,
consumers acknowledging by the plan's mode, under the plan's faults; the accounts must balance
(no confirmed message lost, none delivered again after its acknowledgement was confirmed; a send
a failover replayed on another node of a cluster may have one allowed copy, counted as repeated).

(seed, topology): 3, a 3-node cluster with client acknowledgement, node 0 (the producers') killed
with -9 and node 2 stopped and its disk filled; 4, a shared-store pair with individual
acknowledgement, the live killed with -9 and a consumer's connection dropped mid-batch; 11, one
broker with transacted sends and acknowledgements, killed with -9 twice and its disk filled.
"""

from __future__ import annotations

import pytest

from petrel.testing.chaos import make_plan
from petrel.testing.chaos.openwire_channels import java_missing
from petrel.testing.chaos.runner import run_seed

pytestmark = pytest.mark.system

OPENWIRE_RUNS = [(3, None), (4, "pair"), (11, None)]


def test_the_openwire_seeds_cover_every_acknowledgement_mode_but_auto_and_the_failover_topologies():
    plans = [make_plan(seed, topology=topology, protocol="OPENWIRE") for seed, topology in OPENWIRE_RUNS]
    assert {p.ack for p in plans} == {"client", "client-individual", "transacted"}
    assert {p.topology for p in plans} == {"single", "pair", "cluster"}
    assert all("kill9" in p.fault_kinds for p in plans)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed, topology", OPENWIRE_RUNS)
def test_chaos_openwire_seed(seed, topology, tmp_path):
    missing = java_missing()
    if missing:
        pytest.skip(missing)
    result = run_seed(seed, tmp_path / f"openwire-{seed}", topology=topology, protocol="OPENWIRE")
    print(result.report())
    assert result.ok, result.report()
    assert result.verdict.confirmed > 0
    assert result.injected.get("kill9", 0) > 0
