"""`BrokerProcess`: a real `petrel run` in a subprocess, on free ports, with its own data dir."""

from __future__ import annotations

import atexit
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from petrel.orchestrator.processes import pid_listening_on


#: What the brokers of a test run inherit (set by petrel.testing.pytest_plugin): no limit on the
#: disk's use, so that a host disk over the default 90 % does not block every test's producers.
#: A test of the limit passes ``env=OWN_DISK_LIMIT``: its configuration (or the default) applies.
HOST_DISK = {"PETREL_MAX_DISK_USAGE": "100"}
OWN_DISK_LIMIT: dict[str, str | None] = dict.fromkeys(HOST_DISK)
#: Also set by the plugin, and applied by `BrokerProcess` unless the environment sets it (a
#: benchmark's brokers too): the test run's brokers check no logins or permissions (the product
#: default is secure). A test of security passes ``env=OWN_SECURITY``: the configuration's (or
#: the default's) security applies.
TEST_SECURITY = {"PETREL_SECURITY_ENABLED": "false"}
OWN_SECURITY: dict[str, str | None] = dict.fromkeys(TEST_SECURITY)

#: The config settings of the acceptors a broker opens after its STOMP port (wait_ready waits for them too).
ACCEPTOR_SETTINGS = ("mqtt_port", "amqp_port", "ws_port")

PORTS = (20000, 32000)  # below the ephemeral range
_handed_out: set[int] = set()
#: One byte per port, locked (fcntl record locks) while the process that handed the port out
#: lives: test sessions run side by side on one machine (several engineers', xdist workers) see
#: each other's ports. POSIX locks are the process's, released when it exits, and all of them
#: when it closes any descriptor of the file: this is the only one, and it stays open.
PORT_LOCKS = Path(tempfile.gettempdir()) / "petrel-test-ports.lock"
_locks_fd: int | None = None


def port_range() -> tuple[int, int]:
    """This process's share of PORTS: pytest-xdist workers (gw0, gw1, ...) get disjoint slices,
    so two workers never pick the same port in the moment before their brokers bind it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    span = (PORTS[1] - PORTS[0]) // max(count, 1)
    low = PORTS[0] + (index % max(count, 1)) * span
    return low, low + span - 1


def _lock_port(port: int, lock: bool = True) -> bool:
    """Take (or give back) this process's claim on `port` among the processes on this machine;
    False when another one holds it. True where the lock file cannot be used (no claims then)."""
    global _locks_fd
    try:
        if _locks_fd is None:
            _locks_fd = os.open(PORT_LOCKS, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.lockf(_locks_fd, (fcntl.LOCK_EX | fcntl.LOCK_NB) if lock else fcntl.LOCK_UN, 1, port)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def free_port() -> int:
    """A free loopback port below the ephemeral range (so that no client connection's local
    port takes it between this check and the broker's bind), not handed out before by this
    process nor by another that is still running (PORT_LOCKS: two test sessions at once would
    otherwise pick one port, and a broker's readiness check could find the other's listener),
    and from this test worker's own slice of the range."""
    low, high = port_range()
    if len(_handed_out) > (high - low) // 2:
        for port in _handed_out:
            _lock_port(port, lock=False)
        _handed_out.clear()
    for _ in range(200):
        port = random.randint(low, high)
        if port in _handed_out or not _lock_port(port):
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                _lock_port(port, lock=False)
                continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(pid: int, port: int) -> bool | None:
    """Whether process `pid` itself holds the socket listening on TCP `port` (Linux: /proc); None
    where that cannot be told (then a connection is the only probe, and it cannot tell whose
    listener answered)."""
    if not os.path.exists("/proc/net/tcp"):
        return None
    return pid_listening_on(port) == pid


def wait_for(condition: Callable[[], object], timeout: float = 30.0, interval: float = 0.02, message: str = "") -> object:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(message or f"condition not met within {timeout}s")
        time.sleep(interval)


class BrokerProcess:
    def __init__(self, workdir: Path, *, settings: str = "", name: str = "petrel", env: dict | None = None,
                 http: bool = False, data_dir: Path | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(data_dir) if data_dir is not None else self.workdir / "data"  # shared store: one for two
        self.port = free_port()
        self.stomp_port = free_port()
        self.http_port = free_port() if http else -1  # the management API, when asked for
        self.config_path = self.workdir / "broker.toml"
        self.config_path.write_text(
            f'name = "{name}"\n'
            f'data_dir = "{self.data_dir}"\n'
            f'host = "127.0.0.1"\n'
            f"port = {self.port}\n"
            f"stomp_port = {self.stomp_port}\n"
            f"http_port = {self.http_port}\n" + settings
        )
        self.log_path = self.workdir / "broker.log"
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self, *extra_args: str, wait: bool = True) -> BrokerProcess:
        # TEST_SECURITY unless the environment (or ``env``) says otherwise: a benchmark's brokers too
        env = {**TEST_SECURITY, **os.environ}
        for name, value in self.env.items():  # None: not inherited
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "petrel", "run", "--config", str(self.config_path), *extra_args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        _running.add(self)
        if wait:
            self.wait_ready()
        return self

    def acceptor_ports(self) -> dict[str, int]:
        """The ports the broker opens after its STOMP port, as its config file sets them: each
        protocol's own acceptor (mqtt_port, amqp_port) and the WebSocket one (ws_port), after
        the file's port_offset. Those left unset or off (-1, or 0: any free port) are not listed;
        unset ones are off on a test broker (its all-protocols port is not the standard 61616)."""
        import tomllib

        try:
            config = tomllib.loads(self.config_path.read_text())
        except (OSError, ValueError):
            return {}
        offset = config.get("port_offset", 0)
        offset = offset if isinstance(offset, int) else 0
        out = {}
        for setting in ACCEPTOR_SETTINGS:
            port = config.get(setting)
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                out[setting] = port + offset
        return out

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the broker takes connections on every port it was configured with: the
        all-protocols port, the STOMP port, the management port when asked for, and the MQTT,
        AMQP and WebSocket ports when the settings give them.

        Where /proc tells (`listening`), a port counts only once this broker's own process
        listens on it: a port some other process took meanwhile would answer a probe before
        the broker has bound anything (the broker then exits, unable to listen, and this says
        so), and no probe connection is made for the broker to count. Elsewhere a connection is
        the probe."""
        ports = [self.port, self.stomp_port, *self.acceptor_ports().values()]
        if self.http_port > 0:
            ports.append(self.http_port)
        waiting = list(ports)

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            while waiting:  # each port once: a probe is a connection the broker counts
                own = listening(self.proc.pid, waiting[0])
                if own is False:
                    return False
                if own is None:
                    try:
                        with socket.create_connection(("127.0.0.1", waiting[0]), timeout=1):
                            pass
                    except OSError:
                        return False
                waiting.pop(0)
            return True

        wait_for(ready, timeout, message=f"broker not ready in {timeout}s:\n{self.log()}")

    def health(self) -> dict:
        """``/health`` as JSON, whatever its status (needs ``http=True``); {} when it does not answer."""
        import json
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/health", timeout=2) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}")
        except (OSError, ValueError):
            return {}

    def wait_state(self, *states: str, timeout: float = 60.0) -> str:
        """Wait until ``/health`` says one of ``states`` ("ok" = live and serving, "backup", ...)."""
        def reached() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            status = self.health().get("status")
            return status if status in states else None

        return wait_for(reached, timeout, message=f"broker not {'/'.join(states)} in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except FileNotFoundError:
            return ""

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close_log()
        return self.proc.returncode

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def _close_log(self) -> None:
        _running.discard(self)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


#: The brokers started and not stopped yet: killed when the interpreter exits (a test session
#: that ends with one still running, its cleanup cut short). They run in sessions of their own,
#: which nothing sent to the test process's group reaches.
_running: set[BrokerProcess] = set()


@atexit.register
def _kill_leftovers() -> None:
    for broker in list(_running):
        broker.kill9()
