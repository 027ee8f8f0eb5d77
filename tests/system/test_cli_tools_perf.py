"""`petrel perf` against a real broker, and its HDR-style latency histogram."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_process import ok
from conftest import module_broker
from petrel.cli.perf import LatencyHistogram

pytestmark = pytest.mark.system

ROWS = ("p50", "p90", "p99", "p99.9", "max")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    yield from module_broker(tmp_path_factory, "cli-perf")


def petrel(*args: str) -> str:
    return ok(*args, timeout=90)


def table(out: str) -> dict[str, str]:
    """Every two-column row of the ASCII tables in ``out``: first cell -> second cell."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def check_latency_table(rows: dict[str, str]) -> None:
    values = [float(rows[name]) for name in ROWS]
    assert all(v >= 0 for v in values)
    assert values == sorted(values), values  # percentiles never decrease
    assert float(rows["mean"]) <= values[-1]


@pytest.mark.parametrize("protocol", ["core", "stomp"])
def test_perf_client_prints_rates_and_the_percentile_table(broker, protocol):
    out = petrel("perf", "client", "--url", f"tcp://127.0.0.1:{broker.port}", "--protocol", protocol,
                 "--destination", f"queue://perf.client.{protocol}", "--message-count", "600", "--rate", "1500",
                 "--message-size", "64", "--report-interval", "0.1", "--receive-timeout", "2000")
    assert f"petrel perf client: {protocol.upper()}" in out
    progress = re.findall(r"^\[\s*[\d.]+s\]\s+sent\s+(\d+) msg/s\s+received\s+(\d+) msg/s", out, re.M)
    assert progress, out  # at 1500 msg/s, 600 messages take ~0.4 s: several 0.1 s lines
    assert sum(int(sent) for sent, _ in progress) > 0
    rows = table(out)
    assert rows["messages sent"] == "600"
    assert rows["messages received"] == "600"
    assert rows["protocol"] == protocol.upper()
    rate = float(rows["send rate"].split()[0])
    assert 0 < rate < 1500 * 1.2  # paced: not above the asked rate (some slack for timer granularity)
    check_latency_table(rows)
    assert "600 latency samples" in out


def test_perf_producer_then_consumer_with_warmup(broker):
    url = f"tcp://127.0.0.1:{broker.port}"
    out = petrel("perf", "producer", "--url", url, "--destination", "queue://perf.split", "--message-count", "300",
                 "--persistent", "--warmup", "0.05", "--rate", "1000", "--report-interval", "0")
    rows = table(out)
    assert rows["messages sent"] == "300"
    assert "PERCENTILE" not in out  # a producer alone measures no latency
    out = petrel("perf", "consumer", "--url", url, "--protocol", "stomp", "--destination", "queue://perf.split",
                 "--message-count", "300", "--report-interval", "0")
    rows = table(out)
    assert rows["messages received"] == "300"
    check_latency_table(rows)
    samples = int(re.search(r"(\d+) latency samples", out).group(1))
    assert 0 < samples < 300  # the warm-up messages arrived but are not in the latency figures


# -- the histogram --------------------------------------------------------------------------------------

def exact_percentile(values: list[int], p: float) -> int:
    ordered = sorted(values)
    rank = max(1, math.ceil(len(ordered) * p / 100))
    return ordered[rank - 1]


@settings(max_examples=250, deadline=None)
@given(st.lists(st.integers(0, 10**10), min_size=1, max_size=300), st.sampled_from([0, 1, 50, 90, 99, 99.9, 100]))
def test_histogram_percentiles_are_within_one_percent(values, p):
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    exact = exact_percentile(values, p) if p < 100 else max(values)
    got = h.percentile(p)
    assert exact <= got <= max(exact + exact / 128, exact)  # the bucket's top, never below the true value
    assert got <= max(values)
    assert h.count == len(values) and h.min == min(values) and h.max == max(values)
    assert h.mean == pytest.approx(sum(values) / len(values))


@settings(max_examples=250, deadline=None)
@given(st.integers(0, 2**50))
def test_histogram_buckets_hold_their_values(value):
    index = LatencyHistogram.index_of(value)
    assert LatencyHistogram.highest_of(index) >= value
    if index:
        assert LatencyHistogram.highest_of(index - 1) < value  # buckets are contiguous and ordered
    width = LatencyHistogram.highest_of(index) - (LatencyHistogram.highest_of(index - 1) if index else -1)
    assert width <= max(1, value / 128)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**8), max_size=100), st.lists(st.integers(0, 10**8), max_size=100))
def test_histogram_merge_equals_recording_everything(a, b):
    merged, both, second = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for v in a:
        merged.record(v)
        both.record(v)
    for v in b:
        second.record(v)
        both.record(v)
    merged.merge(second)
    for p in (50, 99, 100):
        assert merged.percentile(p) == both.percentile(p)
    assert (merged.count, merged.min, merged.max, merged.total) == (both.count, both.min, both.max, both.total)


def test_empty_histogram():
    h = LatencyHistogram()
    assert h.percentile(50) == 0 and h.mean == 0.0 and h.count == 0
