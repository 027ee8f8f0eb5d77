"""Cluster settings in broker.toml: Artemis names and defaults, and clear errors."""

from __future__ import annotations

import re

import pytest

from petrel.cluster.advertise import AddressFilter
from petrel.cluster.config import parse_connector
from petrel.config import load_config
from petrel.errors import ConfigError


def load(tmp_path, text: str):
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return load_config(path, env={})


def test_defaults_follow_artemis(tmp_path) -> None:
    config = load(tmp_path, '[[cluster_connections]]\nstatic_connectors = ["tcp://127.0.0.1:61617"]\n')
    cc = config.cluster_connections[0]
    assert (cc.message_load_balancing, cc.max_hops, cc.retry_interval, cc.retry_interval_multiplier,
            cc.max_retry_interval, cc.reconnect_attempts, cc.call_timeout, cc.use_duplicate_detection) == (
        "ON_DEMAND", 1, 500, 1.0, 2000, -1, 30000, True)
    assert config.cluster_user == "ACTIVEMQ.CLUSTER.ADMIN.USER"
    assert config.address_settings_repository().match("any").redistribution_delay == -1


def test_named_connectors_resolve(tmp_path) -> None:
    config = load(tmp_path, '[connectors]\nme = "tcp://10.1.2.3:61616"\n'
                            '[[cluster_connections]]\nconnector = "me"\nmessage_load_balancing = "strict"\n')
    assert config.connector_url("me") == "10.1.2.3:61616"
    assert config.connector_url("tcp://[::1]:5") == "[::1]:5"
    assert config.cluster_connections[0].message_load_balancing == "STRICT"


@pytest.mark.parametrize("text, words", [
    ('[[cluster_connections]]\nconnector = "nowhere"\n', "neither a URL nor a name"),
    ('[[cluster_connections]]\nstatic_connectors = ["udp://h:1"]\n', "only tcp://"),
    ('[[cluster_connections]]\ndiscovery_group = "dg"\n', "not in [[discovery_groups]]"),
    ('[[cluster_connections]]\n[[cluster_connections]]\nname = "b"\n', "at most one"),
    ('[[cluster_connections]]\nmessage_load_balancing = "SOMETIMES"\n', "message_load_balancing"),
    ('[grouping_handler]\ntype = "MIDDLE"\n', "grouping_handler"),
    ('[connectors]\nx = "tcp://h:99999"\n', "connectors.x"),
])
def test_bad_cluster_settings_say_what_is_wrong(tmp_path, text, words) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        load(tmp_path, text)


def test_parse_connector() -> None:
    assert parse_connector("tcp://a.b:1") == ("a.b", 1)
    assert parse_connector("a.b:2?x=1") == ("a.b", 2)
    with pytest.raises(ValueError):
        parse_connector("tcp://:1")


def test_address_filter_prefixes_and_excludes() -> None:
    f = AddressFilter("orders, !orders.local")
    assert f.covers("orders.eu") and not f.covers("orders.local.x") and not f.covers("audit")
    everything = AddressFilter("")
    assert everything.covers("audit") and not everything.covers("$.petrel.sf.c.n")
