"""OpenWire with security on: the JMS client's user name and password log in (ConnectionInfo);
a wrong password is refused with a JMSSecurityException; a user without the permission to
send to an address is refused the send, one without the permission to browse its browser."""

from __future__ import annotations

import pytest

from jms import compile_program, run, run_any
from petrel.security.users import UserStore
from petrel.testing.process import OWN_SECURITY, BrokerProcess

pytestmark = pytest.mark.system

SETTINGS = '''
[security]
users_file = "users.toml"
login_failure_delay = 100

[security_settings."auto.#"]
send = ["creator"]
consume = ["creator"]
createAddress = ["creator"]
createDurableQueue = ["creator"]
createNonDurableQueue = ["creator"]
browse = ["creator"]
'''


def secured_broker(tmp_path) -> BrokerProcess:
    """A broker with security on and two users: creator (every permission on auto.#) and other."""
    workdir = tmp_path / "b"
    workdir.mkdir()
    users = UserStore(workdir / "users.toml")
    users.add("creator", "creator-pw", ["creator"])
    users.add("other", "other-pw", ["other"])
    users.save()
    return BrokerProcess(workdir, settings=SETTINGS, env=OWN_SECURITY).start()


def test_login_and_refusals(tmp_path):
    classpath = compile_program("JmsQueueRoundTrip", tmp_path / "classes")
    broker = secured_broker(tmp_path)
    try:
        base = f"tcp://127.0.0.1:{broker.port}"
        lines = run(classpath, "JmsQueueRoundTrip", f"{base}?jms.userName=creator&jms.password=creator-pw",
                    "auto.jms", "10", "both", "client")
        assert "SENT 10" in lines and "RECEIVED 10" in lines
        wrong = run_any(classpath, "JmsQueueRoundTrip", f"{base}?jms.userName=creator&jms.password=nope",
                        "auto.jms", "1", "send")
        assert wrong.returncode != 0 and "JMSSecurityException" in wrong.stderr, wrong.stderr[-2000:]
        denied = run_any(classpath, "JmsQueueRoundTrip", f"{base}?jms.userName=other&jms.password=other-pw",
                         "auto.jms", "1", "send")
        assert denied.returncode != 0 and "SENT 1" not in denied.stdout
        assert "JMSSecurityException" in denied.stderr, denied.stderr[-2000:]
    finally:
        broker.stop()


def test_a_browser_needs_the_browse_permission(tmp_path):
    classpath = compile_program("JmsBrowse", tmp_path / "classes")
    broker = secured_broker(tmp_path)
    try:
        base = f"tcp://127.0.0.1:{broker.port}"
        lines = run(classpath, "JmsBrowse", f"{base}?jms.userName=creator&jms.password=creator-pw", "auto.browsed", "5")
        assert lines == ["BROWSED 5", "ORDERED true", "SELECTED 3", "RECEIVED 5", "EMPTY 0"]
        denied = run_any(classpath, "JmsBrowse", f"{base}?jms.userName=other&jms.password=other-pw", "auto.browsed",
                         "0")
        assert denied.returncode != 0 and "BROWSED" not in denied.stdout
        assert "JMSSecurityException" in denied.stderr, denied.stderr[-2000:]
    finally:
        broker.stop()
