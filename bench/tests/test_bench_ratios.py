"""The medians and ratios of bench/mqtt.py, bench/amqp.py and bench/seam_regress.py (benchstats)."""

from __future__ import annotations

import pytest

import benchstats as bs
import mqtt
import seam_regress


def test_median_ignores_incomplete_runs_and_ratio_needs_both_sides() -> None:
    assert bs.median([3.0, None, 1.0, 2.0]) == 2.0
    assert bs.median([None, None]) is None
    assert bs.ratio(2.0, 4.0) == 0.5
    assert bs.ratio(None, 4.0) is None and bs.ratio(2.0, None) is None and bs.ratio(2.0, 0.0) is None
    # per-run ratios: run 1 2/4, run 2 incomplete on one side, run 3 9/10
    assert bs.paired_ratio([2.0, 5.0, 9.0], [4.0, None, 10.0]) == pytest.approx(0.7)


def test_best_peer_is_the_highest_median_among_the_others() -> None:
    assert bs.best_peer({"petrel": 99.0, "a": 10.0, "b": 20.0, "c": None}, "petrel") == ("b", 20.0)
    assert bs.best_peer({"petrel": 1.0, "a": None}, "petrel") == (None, None)


def test_mqtt_rows_compare_petrel_with_the_better_peer() -> None:
    figures = {
        ("S1", "petrel"): [(100.0, 20.0), (120.0, 22.0), (90.0, 21.0)],
        ("S1", "mosquitto"): [(200.0, 5.0), (None, None), (180.0, 6.0)],
        ("S1", "activemq"): [(50.0, 90.0), (60.0, 80.0), (55.0, 85.0)],
        ("S2", "petrel"): [(30.0, 30.0), (40.0, 31.0), (35.0, 29.0)],
        ("S2", "mosquitto"): [(20.0, 9.0), (25.0, 9.0), (None, None)],
        ("S2", "activemq"): [(10.0, 50.0), (12.0, 50.0), (11.0, 50.0)],
    }
    s1, s2 = mqtt.summary(figures, ["petrel", "mosquitto", "activemq"])
    assert s1["median"] == {"petrel": 100.0, "mosquitto": 190.0, "activemq": 55.0}
    assert s1["best_peer"] == "mosquitto" and s1["ratio"] == pytest.approx(100 / 190)
    assert s1["ratios"]["activemq"] == pytest.approx(100 / 55)
    assert s1["paired"] == pytest.approx((0.5 + 0.5) / 2)  # runs 1 and 3: 100/200, 90/180
    assert s1["goal_met"] is False
    assert s2["best_peer"] == "mosquitto" and s2["ratio"] == pytest.approx(35 / 22.5) and s2["goal_met"] is True
    text = mqtt.table([s1, s2], ["petrel", "mosquitto", "activemq"])
    assert "| S1 | 100 | 190 | 55 | 0.53 | 1.82 | 0.53 (0.50) | 21.0 | 5.5 | 85.0 | NOT met |" in text
    assert text.splitlines()[1].count("---") == len(text.splitlines()[0].split("|")) - 2


def test_seam_rows_are_head_over_before_with_the_5_percent_verdict() -> None:
    def runs(*rates):
        return [{"rate": r, "cpu_us_per_msg": 10.0, "error": None if r else "failed"} for r in rates]

    figures = {
        ("stomp", "S1", "head"): runs(96.0, 100.0, 97.0),
        ("stomp", "S1", "before"): runs(100.0, 101.0, None),
        ("core", "S2", "head"): runs(90.0, 91.0),
        ("core", "S2", "before"): runs(100.0, 100.0),
    }
    rows = {(r["suite"], r["row"]): r for r in seam_regress.summary(figures)}
    assert set(rows) == {("stomp", "S1"), ("core", "S2")}
    s1 = rows[("stomp", "S1")]
    assert s1["head"] == 97.0 and s1["before"] == 100.5 and s1["within_5pct"] is True
    assert s1["paired"] == pytest.approx((0.96 + 100 / 101) / 2)
    assert rows[("core", "S2")]["within_5pct"] is False
    assert "| CORE | S2 | 90 | 100 | 0.905 |" in seam_regress.table(list(rows.values()))


def test_amqp_rows_give_the_ratio_to_rabbitmq_and_the_busiest_generator_process() -> None:
    import amqp

    def run(rate, cpu=50.0, prod=0.3, cons=0.4, error=None):
        return {"rate": rate, "cpu_us_per_msg": cpu, "producer_cpu": prod, "consumer_cpu": cons, "error": error,
                "generator_us_per_msg": None if error else 20.0}

    figures = {
        ("S1", "petrel"): [run(10.0), run(12.0), run(None, None, None, None, "late")],
        ("S1", "rabbitmq"): [run(20.0, 40.0), run(24.0, 44.0), run(22.0, 42.0)],
        ("S2", "petrel"): [run(9.0, prod=0.9), run(9.0, prod=0.8)],
        ("S2", "rabbitmq"): [run(6.0), run(6.0)],
    }
    s1, s2 = amqp.summary(figures, ["petrel", "rabbitmq"])
    assert s1["median"] == {"petrel": 11.0, "rabbitmq": 22.0} and s1["best_peer"] == "rabbitmq"
    assert s1["ratio"] == pytest.approx(0.5) and s1["paired"] == pytest.approx(0.5) and s1["goal_met"] is False
    assert s1["cpu_us_per_msg"] == {"petrel": 50.0, "rabbitmq": 42.0}
    assert s2["ratio"] == pytest.approx(1.5) and s2["goal_met"] is True
    assert s2["generator_cpu"]["petrel"] == pytest.approx(0.85)
    text = amqp.table([s1, s2], ["petrel", "rabbitmq"])
    assert "| S1 | 11 | 22 | 0.50 (0.50) | 50.0 | 42.0 | 40 (20.0) / 40 (20.0) | NOT met |" in text
    assert "| S2 | 9 | 6 | 1.50 (1.50) | 50.0 | 50.0 | 85 (20.0) / 40 (20.0) | met |" in text
