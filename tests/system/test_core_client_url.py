"""Client URLs and the reconnect plan (pure: no broker needed)."""

from __future__ import annotations

import random

import pytest

from petrel.client.failover import ReconnectPlan
from petrel.client.url import Endpoint, FailoverOptions, parse_endpoint, parse_url


def test_plain_tcp_url():
    url = parse_url("tcp://broker.example:61617?clientID=app&consumerWindowSize=0")
    assert url.endpoints == (Endpoint("broker.example", 61617),)
    assert url.failover is None and not url.is_failover
    assert url.options == {"clientID": "app", "consumerWindowSize": "0"}


@pytest.mark.parametrize(
    "text, endpoint",
    [
        ("tcp://h:1", Endpoint("h", 1)),
        ("h:2", Endpoint("h", 2)),
        ("h", Endpoint("h", 61616)),
        ("tcp://[::1]:5", Endpoint("::1", 5)),
        ("tcp://10.0.0.1:61616/", Endpoint("10.0.0.1", 61616)),
    ],
)
def test_endpoints(text, endpoint):
    assert parse_endpoint(text) == endpoint


@pytest.mark.parametrize("text", ["udp://h:1", "tcp://:1", "tcp://h:notaport", "tcp://h:70000", ""])
def test_bad_endpoints(text):
    with pytest.raises(ValueError):
        parse_endpoint(text)


def test_failover_url_with_activemq_options():
    url = parse_url(
        "failover:(tcp://a:61616,tcp://b:61617)?randomize=false&maxReconnectAttempts=-1"
        "&initialReconnectDelay=5&maxReconnectDelay=500&useExponentialBackOff=false"
        "&reconnectDelayExponent=3&priorityBackup=true&timeout=2000&connectionTTL=3000"
    )
    assert url.endpoints == (Endpoint("a", 61616), Endpoint("b", 61617))
    assert url.failover == FailoverOptions(
        randomize=False, initial_reconnect_delay=5, max_reconnect_delay=500, use_exponential_backoff=False,
        reconnect_delay_exponent=3.0, max_reconnect_attempts=-1, timeout=2000, priority_backup=True,
    )
    assert url.options == {"connectionTTL": "3000"}


def test_failover_defaults_are_activemq_classic():
    o = parse_url("failover:(tcp://a:1)").failover
    assert (o.randomize, o.initial_reconnect_delay, o.max_reconnect_delay, o.use_exponential_backoff,
            o.reconnect_delay_exponent, o.max_reconnect_attempts, o.priority_backup) == (
        True, 10, 30000, True, 2.0, -1, False)


def test_failover_without_parentheses_and_nested_options():
    url = parse_url("failover:tcp://a:1,tcp://b:2?nested.clientID=x&randomize=false")
    assert url.endpoints == (Endpoint("a", 1), Endpoint("b", 2))
    assert url.options == {"clientID": "x"} and not url.failover.randomize


@pytest.mark.parametrize(
    "text, match",
    [
        ("failover:(tcp://a:1", "unbalanced"),
        ("failover:()", "no URIs"),
        ("failover:(tcp://a:1)?randomize=maybe", "randomize"),
        ("failover:(tcp://a:1)?maxReconnectAttempts=x", "maxReconnectAttempts"),
        ("failover:(tcp://a:1)x", "options"),
    ],
)
def test_bad_failover_urls(text, match):
    with pytest.raises(ValueError, match=match):
        parse_url(text)


def test_plan_for_a_plain_url_never_reconnects():
    plan = ReconnectPlan(parse_url("tcp://a:1"))
    assert not plan.reconnects
    assert plan.max_attempts(startup=True) == 1
    assert plan.max_attempts(startup=False) == 0


def test_plan_attempts():
    plan = ReconnectPlan(parse_url("failover:(tcp://a:1)?maxReconnectAttempts=3"))
    assert plan.max_attempts(startup=True) == 4 and plan.max_attempts(startup=False) == 3
    plan = ReconnectPlan(parse_url("failover:(tcp://a:1)?startupMaxReconnectAttempts=0"))
    assert plan.max_attempts(startup=True) == 1 and plan.max_attempts(startup=False) == -1
    assert ReconnectPlan(parse_url("failover:(tcp://a:1)")).max_attempts(startup=True) == -1


def test_plan_delays_back_off_exponentially_up_to_the_cap():
    plan = ReconnectPlan(parse_url("failover:(tcp://a:1)?initialReconnectDelay=10&maxReconnectDelay=100"))
    delays = plan.delays()
    assert [round(next(delays), 3) for _ in range(6)] == [0.01, 0.02, 0.04, 0.08, 0.1, 0.1]
    flat = ReconnectPlan(parse_url("failover:(tcp://a:1)?initialReconnectDelay=7&useExponentialBackOff=false"))
    delays = flat.delays()
    assert [next(delays) for _ in range(3)] == [0.007] * 3


def test_plan_order_randomized_or_not():
    url = "failover:(tcp://a:1,tcp://b:1,tcp://c:1,tcp://d:1)"
    ordered = ReconnectPlan(parse_url(url + "?randomize=false"))
    assert [e.host for e in ordered.candidates()] == ["a", "b", "c", "d"]
    shuffled = ReconnectPlan(parse_url(url), random.Random(3))
    orders = {tuple(e.host for e in shuffled.candidates()) for _ in range(20)}
    assert len(orders) > 1 and all(sorted(o) == ["a", "b", "c", "d"] for o in orders)


def test_plan_redirect_first_then_topology_members():
    plan = ReconnectPlan(parse_url("failover:(tcp://a:1,tcp://b:1)?randomize=false"))
    plan.learn(["a:1", "c:1", "bad:port:x", "c:1"])
    assert [str(e) for e in plan.candidates()] == ["tcp://a:1", "tcp://b:1", "tcp://c:1"]
    plan.set_redirect("tcp://z:9")
    assert [e.host for e in plan.candidates()] == ["z", "a", "b", "c"]
    plan.set_redirect(None)
    assert plan.candidates()[0].host == "a"


def test_plan_ignores_topology_when_told():
    plan = ReconnectPlan(parse_url("failover:(tcp://a:1)?updateURIsSupported=false"))
    plan.learn(["c:1"])
    assert [e.host for e in plan.candidates()] == ["a"]


def test_plan_priority_backup():
    plan = ReconnectPlan(parse_url("failover:(tcp://a:1,tcp://b:1,tcp://c:1)?priorityBackup=true"))
    assert plan.priority() == (Endpoint("a", 1),)
    assert plan.is_priority(Endpoint("a", 1)) and not plan.is_priority(Endpoint("b", 1))
    assert [e.host for e in plan.candidates()][0] == "a"
    plan = ReconnectPlan(parse_url("failover:(tcp://a:1,tcp://b:1)?priorityBackup=true&priorityURIs=tcp://b:1"))
    assert plan.priority() == (Endpoint("b", 1),)
    assert [e.host for e in plan.candidates()] == ["b", "a"]
