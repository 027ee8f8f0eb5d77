"""The chaos harness's security dimension checks itself: a secured run's brokers must refuse an
anonymous client (else the run is not what it says), and the seeds of `test_chaos` draw it both ways."""

from __future__ import annotations

from dataclasses import replace

from petrel.testing.chaos import make_plan
from petrel.testing.chaos import security
from petrel.testing.process import OWN_SECURITY, BrokerProcess


def test_the_check_passes_on_brokers_as_shipped_and_fails_on_open_ones(tmp_path):
    plan = replace(make_plan(2291), security="users")
    shipped = BrokerProcess(tmp_path / "shipped", env=OWN_SECURITY).start()
    open_ = BrokerProcess(tmp_path / "open").start()  # the test run's: security off
    try:
        assert security.anonymous_let_in(plan, shipped.stomp_port) is None
        problem = security.anonymous_let_in(plan, open_.stomp_port)
        assert problem is not None and "do not run secured" in problem, problem
        assert security.anonymous_let_in(replace(plan, security="off"), open_.stomp_port) is None  # not checked
    finally:
        shipped.kill9()
        open_.kill9()


def test_every_topology_of_a_seed_draws_the_same_security():
    for seed in range(200):
        drawn = make_plan(seed).security
        assert {make_plan(seed, topology=t).security for t in ("pair", "replication", "drain")} == {drawn}
        assert make_plan(seed, topology="spark").security == "off"  # the Spark source logs in anonymously
    assert {make_plan(seed).security for seed in range(200)} == {"off", "users"}
