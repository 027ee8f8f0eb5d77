"""A broker with security on refuses to start a cluster, an HA pair or a scale-down on the default
(or an empty) cluster password; with security off, or nothing that uses it, it starts."""

from __future__ import annotations

import asyncio

import pytest

from petrel.cluster.config import DEFAULT_CLUSTER_PASSWORD
from petrel.cluster.credentials import check_cluster_password, uses_cluster_credentials
from petrel.config import BrokerConfig
from petrel.errors import ConfigError
from petrel.server.broker import Broker

CLUSTER = {"cluster_connections": [{"static_connectors": ["tcp://127.0.0.1:1"]}]}
SETUPS = {
    "cluster": CLUSTER,
    "replication": {**CLUSTER, "ha_policy": {"replication": "primary"}},
    "scale_down": {"ha_policy": {"live_only": True, "scale_down": {"connectors": ["tcp://127.0.0.1:1"]}}},
    "discovery": {"discovery_groups": [{"name": "dg", "group_address": "231.7.7.7", "group_port": 9876}]},
}


@pytest.mark.parametrize("setup", sorted(SETUPS))
@pytest.mark.parametrize("password", [DEFAULT_CLUSTER_PASSWORD, "  "])
def test_the_default_or_an_empty_password_is_refused_with_security_on(setup, password):
    config = BrokerConfig.model_validate({**SETUPS[setup], "cluster_password": password})
    assert uses_cluster_credentials(config)
    with pytest.raises(ConfigError) as info:
        check_cluster_password(config)
    message = str(info.value)
    assert "cluster_password" in message and "PETREL_CLUSTER_PASSWORD" in message and "secrets" in message
    assert info.value.exit_code == 2
    check_cluster_password(config.model_copy(update={"cluster_password": "s3cret-enough"}))
    check_cluster_password(config.model_copy(update={"security_enabled": False}))


def test_a_broker_that_uses_no_cluster_credentials_keeps_the_default():
    config = BrokerConfig()
    assert uses_cluster_credentials(config) == []
    check_cluster_password(config)
    shared = BrokerConfig.model_validate({"ha_policy": {"shared_store": "primary"}})
    check_cluster_password(shared)  # a shared store does not log in anywhere


def test_broker_start_refuses_before_it_listens(tmp_path):
    config = BrokerConfig.model_validate({**CLUSTER, "data_dir": tmp_path / "data", "host": "127.0.0.1", "port": 0,
                                          "stomp_port": -1, "http_port": 0})
    broker = Broker(config)

    async def main():
        with pytest.raises(ConfigError, match="cluster_password is the default"):
            await broker.start()

    asyncio.run(main())
    assert broker.ports == {} and broker.office is None
    assert not (tmp_path / "data" / "users.toml").exists()
