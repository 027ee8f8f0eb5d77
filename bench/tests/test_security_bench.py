"""bench/security.py: its three broker variants are what they claim, and its ratios and goals."""

from __future__ import annotations

import pytest

import security
from stompbench.brokers.base import stomp_ready
from stompbench.harness import Plan, measure_workload
from stompbench.metrics import Measurement
from stompbench.workloads import Counts, build, warmup

pytestmark = pytest.mark.timeout(180)


def test_each_variant_runs_s1_and_s2_and_only_the_secure_ones_refuse_strangers(tmp_path) -> None:
    counts = Counts(s1=2_000, s2=500, warmup=200)
    workloads = [build(counts)[row] for row in security.ROWS]
    plan = Plan(brokers=[], workloads=workloads, runs=1, procs=1, body_size=1024, warmup=warmup(counts))
    pki = security.make_pki(tmp_path / "pki")
    for name in security.VARIANTS:
        variant = security.Variant(name, tmp_path, pki)
        for workload in workloads:
            (m,) = measure_workload(variant, workload, 1, plan, 1)
            assert m.ok, (name, m.error)
            assert m.messages == m.expected
        variant.start()
        try:
            anonymous = stomp_ready(variant.host, variant.port, [("host", "localhost")])
            assert anonymous is (name == "off")  # plain TCP: refused by auth's login, by tls's handshake
            if name == "tls":
                assert not stomp_ready(variant.host, variant.port, list(security.LOGGED_IN.connect_headers))
        finally:
            variant.stop()
        assert variant.workdir is None and not list(tmp_path.glob(f"{name}-*"))


def _m(variant: str, row: str, run: int, rate: float, cpu: float) -> Measurement:
    return Measurement(variant, row, run, 1, rate=rate, cpu_us_per_msg=cpu)


def test_ratios_and_goals_come_from_the_medians() -> None:
    ms = []
    for run, (off, auth, tls) in enumerate([(100, 96, 71), (90, 99, 60), (110, 94, 80)], 1):
        ms += [_m("off", "S1", run, off, 10), _m("auth", "S1", run, auth, 10.2), _m("tls", "S1", run, tls, 12)]
        ms += [_m("off", "S2", run, 50, 20), _m("auth", "S2", run, 45, 21), _m("tls", "S2", run, 40, 25)]
    ms.append(Measurement("tls", "S1", 4, 1, rate=1.0, error="incomplete: 1/2"))  # a failed run counts for nothing
    s = security.summary(ms)
    assert s["S1"]["ratio"]["auth"] == pytest.approx(0.96) and s["S1"]["ratio"]["tls"] == pytest.approx(0.71)
    assert s["S1"]["goal_met"] == {"auth": True, "tls": True}
    assert s["S1"]["paired"]["auth"] == pytest.approx(0.96)  # 0.96, 1.1, 0.855 within runs 1, 2, 3
    assert s["S1"]["paired"]["tls"] == pytest.approx(0.71)  # 0.71, 0.667, 0.727
    assert s["S2"]["ratio"]["auth"] == pytest.approx(0.9) and s["S2"]["goal_met"] == {"auth": False}
    text = security.table(s)
    assert "| S1 | msgs/s | 100 | 96.0 | 71.0 | 0.960 | 0.710 | auth >= 0.95: met; tls >= 0.70: met |" in text
    assert "auth >= 0.95: NOT met" in text
