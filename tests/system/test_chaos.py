"""The chaos harness on a fixed set of seeds: real brokers (one, a 3-node cluster, or for
PAIR_SEEDS a shared-store primary and backup), STOMP and CORE clients, faults at random moments,
then every queue drained and the accounts checked (no confirmed message lost, none delivered
again after its acknowledgement was confirmed, order kept where promised). `bench/chaos` runs
the same for as long as you like.

The seeds were chosen so that together they draw every value of every workload dimension,
every protocol with every ack mode, and every fault kind on each topology it applies to;
`test_the_seeds_cover_every_dimension_and_fault` keeps that true if the plan drawing changes.
A failing seed prints its plan, its timeline and the command that replays it.
"""

from __future__ import annotations

import pytest

from petrel.testing.chaos import DIMENSIONS, FAULT_KINDS, make_plan
from petrel.testing.chaos.faults import can_mount_tmpfs
from petrel.testing.chaos.runner import run_seed

# 29: a durable subscriber's node cut off while the producers' node restarts (it must remember the
# subscription: 27 receipted messages were lost before)
SEEDS = [2291, 2810, 2163, 1501, 2545, 2900, 1589, 571, 29]

# the same plans with topology="pair": a shared-store primary and backup serving as one node, so
# that kill9 and sigterm hit whichever process is live (the backup takes over, the restarted one
# waits or fails back), disk_full fills the shared data directory, and the clients go to whichever
# process listens. 111: STOMP, kill9 then two SIGTERM handovers; 1017: CORE, the live killed twice
# while the shared disk is full (the backup takes over unable to write: the harness waited for an
# "ok" that could not come before the disk was freed).
PAIR_SEEDS = [111, 1017]
PAIR_FAULTS = {"kill9", "sigterm", "disk_full"}


def covered(seeds: list[int]) -> set[tuple]:
    found = set()
    for seed in seeds:
        plan = make_plan(seed)
        found |= {(name, value) for name, value in plan.dimensions().items()}
        found |= {("fault", kind) for kind in plan.fault_kinds}
        found |= {("fault on", plan.topology, kind) for kind in plan.fault_kinds}
        found.add(("protocol x ack", plan.protocol, plan.ack))
    return found


def test_the_seeds_cover_every_dimension_and_fault():
    wanted = {(name, value) for name, values in DIMENSIONS.items() for value in values}
    wanted |= {("fault", kind) for kind in FAULT_KINDS}
    wanted |= {("fault on", topology, kind) for topology in ("single", "cluster") for kind in FAULT_KINDS
               if topology == "cluster" or not kind.startswith("link")}
    wanted |= {("protocol x ack", p, a) for p in DIMENSIONS["protocol"] for a in DIMENSIONS["ack"]}
    assert wanted - covered(SEEDS) == set()


def test_the_pair_seeds_cover_both_protocols_and_the_pair_faults():
    plans = [make_plan(seed, topology="pair") for seed in PAIR_SEEDS]
    assert {p.protocol for p in plans} == set(DIMENSIONS["protocol"])
    assert PAIR_FAULTS <= set().union(*(p.fault_kinds for p in plans))


def test_a_topology_option_draws_the_rest_of_the_plan_as_without_it():
    for seed in SEEDS + PAIR_SEEDS:
        drawn, pair = make_plan(seed), make_plan(seed, topology="pair")
        assert pair.topology == "pair" and pair.nodes == 1
        assert {k: v for k, v in drawn.dimensions().items() if k != "topology"} == \
            {k: v for k, v in pair.dimensions().items() if k != "topology"}
        assert (drawn.producers, drawn.messages, drawn.duration) == (pair.producers, pair.messages, pair.duration)
        if drawn.topology == "single":
            assert drawn.faults == pair.faults


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", PAIR_SEEDS)
def test_chaos_pair_seed(seed, tmp_path):
    plan = make_plan(seed, topology="pair")
    if "disk_full" in plan.fault_kinds and not can_mount_tmpfs():
        print(f"seed {seed}: the full-disk fault is skipped (needs root to mount a tmpfs)")
    result = run_seed(seed, tmp_path / f"pair-{seed}", topology="pair")
    print(result.report())
    assert result.ok, result.report()
    assert result.verdict.confirmed > 0
    assert result.injected.get("kill9", 0) + result.injected.get("sigterm", 0) > 0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", SEEDS)
def test_chaos_seed(seed, tmp_path):
    plan = make_plan(seed)
    if "disk_full" in plan.fault_kinds and not can_mount_tmpfs():
        print(f"seed {seed}: the full-disk fault is skipped (needs root to mount a tmpfs)")
    result = run_seed(seed, tmp_path / f"seed-{seed}")
    print(result.report())
    assert result.ok, result.report()
    assert result.verdict.confirmed > 0
