"""`BrokerProcess.wait_ready` waits for every acceptor the settings give a port: the broker opens
its MQTT, AMQP and WebSocket acceptors after the STOMP one, so a test that connects to them at
once could be refused. Driven here by listeners this test opens itself and a stand-in process."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from petrel.testing.process import BrokerProcess, free_port


def listen(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    return s


@pytest.fixture
def stand_in():
    """A process that stays alive, in the place of `petrel run`."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait(10)


def test_wait_ready_waits_for_the_mqtt_amqp_and_websocket_ports_the_settings_give(tmp_path, stand_in):
    mqtt, amqp, ws = free_port(), free_port(), free_port()
    b = BrokerProcess(tmp_path, settings=f"mqtt_port = {mqtt}\namqp_port = {amqp}\nws_port = {ws}\n")
    assert b.acceptor_ports() == {"mqtt_port": mqtt, "amqp_port": amqp, "ws_port": ws}
    b.proc = stand_in
    opened = [listen(b.stomp_port)]
    try:
        with pytest.raises(TimeoutError):  # only the STOMP port takes connections yet
            b.wait_ready(timeout=0.5)
        opened += [listen(mqtt), listen(amqp)]
        with pytest.raises(TimeoutError):  # the WebSocket one still does not
            b.wait_ready(timeout=0.5)
        opened.append(listen(ws))
        b.wait_ready(timeout=10)
    finally:
        for s in opened:
            s.close()


def test_wait_ready_waits_as_before_without_those_settings(tmp_path, stand_in):
    b = BrokerProcess(tmp_path / "plain")
    assert b.acceptor_ports() == {}
    off = BrokerProcess(tmp_path / "off", settings="mqtt_port = -1\namqp_port = 0\nport_offset = 0\n")
    assert off.acceptor_ports() == {}  # off, or any free port (which no test can name)
    for broker in (b, off):
        broker.proc = stand_in
        s = listen(broker.stomp_port)
        try:
            broker.wait_ready(timeout=10)
        finally:
            s.close()
