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

import shutil
import socket
import time
from pathlib import Path

from petrel.testing.process import free_port
from petrel.testing.server_process import ServerProcess

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


class ZooKeeperServer(ServerProcess):
    def __init__(self, workdir: Path | str | None = None, *, port: int | None = None,
                 start_timeout: float = 60.0) -> None:
        super().__init__(workdir, prefix="petrel-zk-", log_name="zookeeper.log")
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir(exist_ok=True)
        self.host = "127.0.0.1"
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.config_path = self.workdir / "zoo.cfg"
        #: Seconds the last `start()` took until the server answered.
        self.last_start_seconds: float | None = None
        self._write_config()

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

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
        self._spawn(command)
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

    def detach(self) -> int:
        """Let the running server outlive this object and this process (``petrel cluster up``
        leaves it to ``petrel cluster down``): it is no longer stopped by `stop`, `kill`,
        `close` or at exit. Returns its pid, which leads its own process group."""
        process = self.process
        if process is None or process.poll() is not None:
            raise ZooKeeperStartError(f"no running ZooKeeper on {self.connect_string} to detach")
        self.process = None
        self._forget()
        return process.pid

    def srvr(self) -> str:
        """The ``srvr`` report: version, mode, connections, zxid, node count."""
        return four_letter_word(self.host, self.port, "srvr")
