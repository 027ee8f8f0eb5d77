"""Producers and consumers against the in-process sink; splitting; metrics; the report."""

from __future__ import annotations

import asyncio
import time
from array import array

import pytest

from stompbench.clients import ClientResult, Consumer, Producer
from stompbench.dialect import SINK, Dialect
from stompbench.frames import body_of
from stompbench.metrics import Measurement, medians, ratio, summarise
from stompbench.report import BEGIN, END, comparison_table, update_readme
from stompbench.runner import split
from stompbench.sink import Sink, SinkConnection
from stompbench.workloads import ConsumerSpec, Counts, Phase, ProducerSpec, build

pytestmark = pytest.mark.timeout(60)


async def _with_sink(fn):
    loop = asyncio.get_running_loop()
    sink = Sink()
    server = await loop.create_server(lambda: SinkConnection(sink), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await fn(port)
    finally:
        server.close()
        await server.wait_closed()


def _deadline(seconds: float = 20.0) -> int:
    return time.monotonic_ns() + int(seconds * 1e9)


async def _pair(port: int, dialect: Dialect, spec: ProducerSpec, consumers: int, topic: bool):
    body = body_of(1024)
    cons = [
        Consumer(ConsumerSpec(spec.destination, spec.count), dialect, f"s{i}", latency=True)
        for i in range(consumers)
    ]
    for c in cons:
        await c.connect("127.0.0.1", port, 5)
        await c.subscribe(5)
    prod = Producer(spec, dialect, body)
    await prod.connect("127.0.0.1", port, 5)
    deadline = _deadline()
    results = await asyncio.gather(*(c.run(deadline) for c in cons), prod.run(deadline))
    return results[:-1], results[-1]


@pytest.mark.parametrize("window", [0, 50])
def test_producer_and_consumer_move_every_message(window: int) -> None:
    spec = ProducerSpec("queue:t", 3_000, persistent=True, window=window)
    cons, prod = asyncio.run(_with_sink(lambda port: _pair(port, SINK, spec, 1, False)))
    assert prod.error is None and cons[0].error is None
    assert prod.sent == 3_000
    assert prod.receipts == (3_000 if window else 1)
    assert cons[0].received == 3_000
    lat = array("q", cons[0].latencies)
    assert len(lat) == 3_000 and min(lat) >= 0


def test_topic_reaches_every_subscriber() -> None:
    spec = ProducerSpec("topic:t", 500)
    cons, prod = asyncio.run(_with_sink(lambda port: _pair(port, SINK, spec, 3, True)))
    assert [c.received for c in cons] == [500, 500, 500]
    assert prod.error is None


def test_client_ack_mode_acks_and_completes() -> None:
    dialect = Dialect(ack="client", ack_every=100)
    spec = ProducerSpec("queue:acked", 1_000)
    cons, _ = asyncio.run(_with_sink(lambda port: _pair(port, dialect, spec, 1, False)))
    assert cons[0].received == 1_000 and cons[0].error is None


def test_paced_producer_keeps_its_rate() -> None:
    spec = ProducerSpec("queue:paced", 300, window=100, rate=1_000.0)
    cons, prod = asyncio.run(_with_sink(lambda port: _pair(port, SINK, spec, 1, False)))
    seconds = (prod.last_send_ns - prod.first_send_ns) / 1e9
    assert cons[0].received == 300
    assert 0.25 <= seconds <= 1.5  # 300 messages at 1,000/s take about 0.3 s


def test_consumer_times_out_with_a_message_instead_of_hanging() -> None:
    async def lonely(port: int) -> ClientResult:
        c = Consumer(ConsumerSpec("queue:empty", 10), SINK, "s", latency=False)
        await c.connect("127.0.0.1", port, 5)
        await c.subscribe(5)
        return await c.run(_deadline(0.3))

    r = asyncio.run(_with_sink(lonely))
    assert r.error is not None and "0/10" in r.error


def test_split_deals_clients_over_processes() -> None:
    s4 = build(Counts.quick())["S4"].phases[0]
    groups = split(s4, 2)
    assert len(groups) == 2
    assert sum(len(g.consumers) for g in groups) == 4
    assert sum(len(g.producers) for g in groups) == 1
    s1 = build(Counts.quick())["S1"].phases[0]
    apart = split(s1, 2)
    assert [(len(g.producers), len(g.consumers)) for g in apart] == [(0, 1), (1, 0)]
    assert len(split(s1, 8)) == 2  # never more processes than clients


def _result(role: str, **kw) -> ClientResult:
    return ClientResult(role, "queue:x", **kw)


def test_summarise_rate_and_latency() -> None:
    phase = Phase("S1", (ProducerSpec("queue:x", 4),), (ConsumerSpec("queue:x", 4),))
    lat = array("q", [1_000_000, 2_000_000, 3_000_000, 4_000_000]).tobytes()
    results = [
        _result("producer", sent=4, first_send_ns=1_000_000_000),
        _result("consumer", received=4, last_recv_ns=3_000_000_000, latencies=lat),
    ]
    m = summarise(phase, results, Measurement("b", "S1", 1, 1))
    assert m.rate == pytest.approx(2.0)
    assert m.p50_ms == pytest.approx(2.0) and m.p99_ms == pytest.approx(4.0)
    assert m.ok


def test_summarise_flags_incomplete_runs() -> None:
    phase = Phase("S1", (ProducerSpec("queue:x", 10),), (ConsumerSpec("queue:x", 10),))
    results = [
        _result("producer", sent=10, first_send_ns=1),
        _result("consumer", received=7, last_recv_ns=1_000_000_001),
    ]
    m = summarise(phase, results, Measurement("b", "S1", 1, 1))
    assert not m.ok and "7/10" in (m.error or "")


def test_medians_and_ratio_direction() -> None:
    ms = [Measurement("p", "S1", run, 1, rate=r, p50_ms=l) for run, (r, l) in enumerate(
        [(10.0, 5.0), (30.0, 1.0), (20.0, 3.0)], 1)]
    cells = medians(ms)[("p", "S1", 1)]
    assert cells["rate"].value == 20.0 and cells["p50_ms"].value == 3.0
    assert ratio(20.0, [10.0, 40.0], higher_better=True) == 0.5
    assert ratio(20.0, [10.0, 40.0], higher_better=False) == 2.0
    assert ratio(None, [1.0], True) is None


def test_comparison_table_and_readme_block(tmp_path) -> None:
    ms = [
        Measurement("petrel", "S1", 1, 1, rate=30.0, p50_ms=2.0),
        Measurement("activemq", "S1", 1, 1, rate=20.0, p50_ms=4.0),
        Measurement("rabbitmq", "S1", 1, 1, rate=15.0, p50_ms=1.0),
    ]
    table = comparison_table(ms, ["S1"], "petrel", ["activemq", "rabbitmq"], {}, {}, 1)
    rate_line = next(line for line in table.splitlines() if "msgs/s" in line)
    assert "1.50×" in rate_line
    p50_line = next(line for line in table.splitlines() if "p50" in line)
    assert "2.00×" in p50_line
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nold\n{END}\noutro\n")
    update_readme(readme, table)
    text = readme.read_text()
    assert "old" not in text and "1.50×" in text
    assert text.startswith("intro\n") and text.endswith("outro\n")
