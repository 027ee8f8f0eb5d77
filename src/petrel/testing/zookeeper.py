"""`ZooKeeperServer`: a real standalone ZooKeeper in a subprocess, for tests.

It runs Debian's `zookeeper` package (``apt-get install -y --no-install-recommends
zookeeper``; OpenJDK 17) as ``java ... org.apache.zookeeper.server.ZooKeeperServerMain
zoo.cfg``, on a free loopback port chosen at run time, with its own data directory::

    with ZooKeeperServer(tmp_path / "zk") as zk:
        manager = ZooKeeperLockManager(zk.connect_string, session_ms=2000)
        zk.stop()    # SIGTERM, wait for the exit
        zk.start()   # the same port and data: znodes and sessions survive
        zk.kill()    # SIGKILL
        zk.start()
        pid = zk.detach()  # leave it running past this process (the orchestrator's ZooKeeper)

`start()` returns once the server answers ``srvr`` with its mode (``ruok`` says ``imok``
before it serves requests), or raises
`ZooKeeperStartError` (with the tail of its log) after ``start_timeout`` seconds. The tick
is 500 ms and the smallest session 1000 ms, so tests can use short sessions (ZooKeeper
raises a session timeout below ``minSessionTimeout`` to it). Every server still running at
interpreter exit is killed, so a failed test never leaves a JVM behind.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from petrel.testing.process import free_port

__all__ = ["ZOOKEEPER_JAR", "ZooKeeperServer", "ZooKeeperStartError", "zookeeper_available"]

#: Debian's jar; its manifest's Class-Path names every dependency (netty, slf4j, jute, ...).
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_MS = 500
MIN_SESSION_MS = 1000
MAX_SESSION_MS = 60000
#: A small JVM that starts fast: tests start several servers on a shared machine.
JVM_OPTIONS = (
    "-Xmx128m",
    "-Xss512k",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dzookeeper.jmx.log4j.disable=true",
)

_running: set[ZooKeeperServer] = set()


class ZooKeeperStartError(RuntimeError):
    """The server did not answer in time, or its process exited."""


def zookeeper_available() -> str | None:
    """None when a server can start here; otherwise what is missing and how to install it."""
    if shutil.which("java") is None:
        return "no `java` on PATH: install OpenJDK 17 (apt-get install -y openjdk-17-jre-headless)"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing: apt-get install -y --no-install-recommends zookeeper"
    return None


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter command (``ruok``, ``srvr``) and return the whole reply."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer:
    def __init__(self, workdir: Path | str | None = None, *, port: int | None = None,
                 start_timeout: float = 60.0) -> None:
        self._owns_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="petrel-zk-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir(exist_ok=True)
        self.host = "127.0.0.1"
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.config_path = self.workdir / "zoo.cfg"
        self.log_path = self.workdir / "zookeeper.log"
        self.process: subprocess.Popen | None = None
        #: Seconds the last `start()` took until the server answered.
        self.last_start_seconds: float | None = None
        self._write_config()

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _write_config(self) -> None:
        self.config_path.write_text(
            f"tickTime={TICK_MS}\n"
            f"minSessionTimeout={MIN_SESSION_MS}\n"
            f"maxSessionTimeout={MAX_SESSION_MS}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
        )

    def start(self) -> ZooKeeperServer:
        """Start the server (again: the same port and data) and wait until it answers."""
        if self.running:
            return self
        missing = zookeeper_available()
        if missing is not None:
            raise ZooKeeperStartError(missing)
        began = time.monotonic()
        command = [shutil.which("java") or "java", *JVM_OPTIONS, "-cp", str(ZOOKEEPER_JAR), MAIN_CLASS,
                   str(self.config_path)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            cwd=self.workdir, start_new_session=True)
        _running.add(self)
        deadline = began + self.start_timeout
        while True:
            if self.process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with {self.process.returncode} while starting on {self.connect_string}:\n"
                    f"{self.log_tail()}")
            try:
                if "Mode:" in four_letter_word(self.host, self.port, "srvr", timeout=1.0):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise ZooKeeperStartError(
                    f"ZooKeeper did not answer on {self.connect_string} within {self.start_timeout}s:\n"
                    f"{self.log_tail()}")
            time.sleep(0.05)
        self.last_start_seconds = time.monotonic() - began
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM and wait for the exit (SIGKILL after `timeout`)."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as in a crash."""
        self._signal(signal.SIGKILL, 15.0)

    def _signal(self, signum: int, timeout: float) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        _running.discard(self)

    def detach(self) -> int:
        """Let the running server outlive this object and this process (``petrel cluster up``
        leaves it to ``petrel cluster down``): it is no longer stopped by `stop`, `kill`,
        `close` or at exit. Returns its pid, which leads its own process group."""
        process = self.process
        if process is None or process.poll() is not None:
            raise ZooKeeperStartError(f"no running ZooKeeper on {self.connect_string} to detach")
        self.process = None
        _running.discard(self)
        return process.pid

    def close(self) -> None:
        """Kill the server, and remove its directory when it made one itself."""
        self.kill()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def srvr(self) -> str:
        """The ``srvr`` report: version, mode, connections, zxid, node count."""
        return four_letter_word(self.host, self.port, "srvr")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_running):
        server.kill()
