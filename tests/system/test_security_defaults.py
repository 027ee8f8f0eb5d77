"""Secure by default: a broker's first start creates an admin with a generated password shown once;
the test run's brokers run without security; a cluster's nodes get the same switch."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import stomp

from petrel.orchestrator.processes import child_environment
from petrel.security.users import UserStore
from petrel.testing.process import OWN_SECURITY, TEST_SECURITY, BrokerProcess

CREATED = re.compile(r'created the users file (\S+) with user "admin" \(role admin\) and password "([^"]+)"')


def test_the_test_run_turns_security_off_and_a_cluster_node_inherits_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert os.environ.get("PETREL_SECURITY_ENABLED") == TEST_SECURITY["PETREL_SECURITY_ENABLED"] == "false"
    monkeypatch.setenv("PETREL_SECURITY_ENABLED", "true")
    assert child_environment()["PETREL_SECURITY_ENABLED"] == "true"


def test_first_start_creates_an_admin_shown_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, env=OWN_SECURITY).start()
    try:
        found = CREATED.findall(broker.log())
        assert len(found) == 1
        path, password = found[0]
        assert Path(path) == broker.data_dir / "users.toml"
        assert password not in Path(path).read_text()
        assert UserStore.load(path).authenticate("admin", password).roles == frozenset({"admin"})
    finally:
        broker.stop()
    broker.start()
    try:
        assert len(CREATED.findall(broker.log())) == 1  # not created, not shown again
    finally:
        broker.stop()


@pytest.mark.parametrize("outside_pytest", [False, True])
def test_the_test_runs_brokers_have_no_users_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  outside_pytest: bool) -> None:
    if outside_pytest:  # a benchmark's BrokerProcess: no plugin set the variable
        monkeypatch.delenv("PETREL_SECURITY_ENABLED")
    broker = BrokerProcess(tmp_path).start()
    try:
        conn = stomp.Connection([("127.0.0.1", broker.stomp_port)])
        conn.connect(wait=True)  # no credentials
        conn.disconnect()
        assert not (broker.data_dir / "users.toml").exists()
        assert "users file" not in broker.log()
    finally:
        broker.stop()
