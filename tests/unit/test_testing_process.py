"""`BrokerProcess.wait_ready` waits for every acceptor the settings give a port (the broker opens
its MQTT, AMQP and WebSocket acceptors after the STOMP one, so a test that connects to them at
once could be refused), for the all-protocols port the clients use, and only for listeners of the
broker's own process: a listener another process holds on one of its ports is not the broker
being ready. `free_port` never hands out a port another running process has handed out. Driven
here by stand-in processes that listen where they are told."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from petrel.testing import process
from petrel.testing.process import BrokerProcess, free_port

STAND_IN = """
import socket, sys, time
held = []
for port in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(port)))
    s.listen(16)
    held.append(s)
print("listening", flush=True)
time.sleep(120)
"""


def listen(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    return s


@pytest.fixture
def stand_in():
    """`stand_in(*ports)`: a process that listens on `ports` and stays alive, in the place of `petrel run`."""
    started: list[subprocess.Popen] = []

    def start(*ports: int) -> subprocess.Popen:
        for proc in started:  # one at a time: the next takes over the ports
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        proc = subprocess.Popen([sys.executable, "-c", STAND_IN, *map(str, ports)], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout.readline().strip() == "listening"
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait(10)


def test_wait_ready_waits_for_the_mqtt_amqp_and_websocket_ports_the_settings_give(tmp_path, stand_in):
    mqtt, amqp, ws = free_port(), free_port(), free_port()
    b = BrokerProcess(tmp_path, settings=f"mqtt_port = {mqtt}\namqp_port = {amqp}\nws_port = {ws}\n")
    assert b.acceptor_ports() == {"mqtt_port": mqtt, "amqp_port": amqp, "ws_port": ws}
    b.proc = stand_in(b.port, b.stomp_port)
    with pytest.raises(TimeoutError):  # only the all-protocols and STOMP ports take connections yet
        b.wait_ready(timeout=0.5)
    b.proc = stand_in(b.port, b.stomp_port, mqtt, amqp)
    with pytest.raises(TimeoutError):  # the WebSocket one still does not
        b.wait_ready(timeout=0.5)
    b.proc = stand_in(b.port, b.stomp_port, mqtt, amqp, ws)
    b.wait_ready(timeout=10)


def test_wait_ready_waits_as_before_without_those_settings(tmp_path, stand_in):
    b = BrokerProcess(tmp_path / "plain")
    assert b.acceptor_ports() == {}
    off = BrokerProcess(tmp_path / "off", settings="mqtt_port = -1\namqp_port = 0\nport_offset = 0\n")
    assert off.acceptor_ports() == {}  # off, or any free port (which no test can name)
    for broker in (b, off):
        broker.proc = stand_in(broker.port, broker.stomp_port)
        broker.wait_ready(timeout=10)


def test_wait_ready_waits_for_the_all_protocols_port(tmp_path, stand_in):
    b = BrokerProcess(tmp_path)
    b.proc = stand_in(b.stomp_port)
    with pytest.raises(TimeoutError):
        b.wait_ready(timeout=0.5)
    b.proc = stand_in(b.stomp_port, b.port)
    b.wait_ready(timeout=10)


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs /proc to tell whose listener a port has")
def test_a_listener_of_another_process_on_the_brokers_ports_is_not_the_broker_ready(tmp_path, stand_in):
    """The race behind a "connection refused" at a test's first step: a port collides with a
    listener of another process (another test session's broker), which answered the probe while
    the broker was still starting."""
    b = BrokerProcess(tmp_path)
    b.proc = stand_in()  # alive, listening nowhere
    others = [listen(b.port), listen(b.stomp_port)]  # this process's listeners, not the broker's
    try:
        with pytest.raises(TimeoutError):
            b.wait_ready(timeout=0.5)
    finally:
        for s in others:
            s.close()


def test_free_port_skips_a_port_another_running_process_handed_out(monkeypatch):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from petrel.testing.process import free_port; "
                               "print(free_port(), flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True)
    try:
        taken = int(holder.stdout.readline())
        other = next(p for p in range(process.PORTS[0], process.PORTS[1]) if p != taken and _available(p))
        picks = iter([taken, taken, other])
        monkeypatch.setattr(process.random, "randint", lambda low, high: next(picks))
        assert free_port() == other  # the holder's port is free to bind, and still not handed out
    finally:
        holder.kill()
        holder.wait(10)
    process._lock_port(other, lock=False)
    process._handed_out.discard(other)


def _available(port: int) -> bool:
    """Free to bind, and to hand out here (claimed by no other process, nor already by this one)."""
    if port in process._handed_out or not process._lock_port(port):
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
