"""MQTT topics and filters as Petrel addresses (Artemis's mapping) and the queues they name."""

from __future__ import annotations

import pytest

from petrel.codec.mqtt import ReasonCode
from petrel.core.wildcard import matches
from petrel.server.adapters.mqtt_topics import (
    TopicError,
    address_to_topic,
    filter_to_address,
    parse_filter,
    queue_name,
    topic_to_address,
)


def test_the_mapping_both_ways():
    assert topic_to_address("a/b/c") == "a.b.c"
    assert address_to_topic("a.b.c") == "a/b/c"
    assert filter_to_address("a/+/c") == "a.*.c"
    assert filter_to_address("a/#") == "a.#"
    assert filter_to_address("#") == "#"
    assert filter_to_address("+") == "*"


@pytest.mark.parametrize("topic_filter,topic,expected", [
    ("a/+", "a/b", True), ("a/+", "a/b/c", False), ("a/#", "a", True), ("a/#", "a/b/c", True),
    ("+/b", "a/b", True), ("#", "x/y", True), ("a/+/c", "a/b/c", True), ("a/+/c", "a/b/d", False),
])
def test_filters_match_as_mqtt_says(topic_filter, topic, expected):
    assert matches(filter_to_address(topic_filter), topic_to_address(topic)) is expected


def test_what_is_refused_and_why():
    for topic in ("", "/a", "a//b", "a/", "a/+", "a/#", "a*b"):
        with pytest.raises(TopicError) as info:
            topic_to_address(topic)
        assert info.value.reason == ReasonCode.TOPIC_NAME_INVALID
    for topic_filter in ("a/#/b", "a/b#", "a+/b", "$share/g", "$share//a", "$share/g+/a"):
        with pytest.raises(TopicError) as info:
            parse_filter(topic_filter)
        assert info.value.reason == ReasonCode.TOPIC_FILTER_INVALID


def test_queue_names():
    assert queue_name("c1", parse_filter("a/+")) == "c1.a.*"
    shared = parse_filter("$share/workers/jobs/#")
    assert (shared.group, shared.address) == ("workers", "jobs.#")
    assert queue_name("c1", shared) == "$share.workers.jobs.#"
