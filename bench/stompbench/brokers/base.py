"""A broker under test: a foreground process in its own process group and temp dir."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .. import procstat
from ..dialect import Dialect

log = logging.getLogger("stompbench.brokers")

READY_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0


class BrokerUnavailable(Exception):
    """The broker cannot be run here (not installed, not runnable yet)."""


class BrokerFailed(Exception):
    """The broker process exited or never became ready."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def stomp_ready(host: str, port: int, connect_headers: list[tuple[str, str]]) -> bool:
    """True if ``host:port`` answers a STOMP CONNECT with CONNECTED."""
    frame = "CONNECT\naccept-version:1.2\nheart-beat:0,0\n"
    frame += "".join(f"{k}:{v}\n" for k, v in connect_headers) + "\n\0"
    try:
        with socket.create_connection((host, port), timeout=2.0) as s:
            s.settimeout(5.0)
            s.sendall(frame.encode())
            data = b""
            while b"\0" not in data and len(data) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            ok = data.lstrip(b"\r\n").startswith(b"CONNECTED")
            if ok:
                s.sendall(b"DISCONNECT\n\n\0")
            return ok
    except OSError:
        return False


class Broker:
    """Subclasses set ``name``, ``dialect`` and implement ``command``/``environment``.

    ``start()`` makes a fresh temp directory, launches the process in a new
    session (its own process group), waits for STOMP readiness and finds the
    process whose CPU and memory are measured.  ``stop()`` signals the whole
    group, waits, kills what is left and removes the directory.
    """

    name = "broker"
    label = "broker"
    dialect: Dialect
    measured_comm: str | None = None  # process name to measure inside the tree

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.workdir: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.pid = 0  # the measured process
        self._log = None

    # -- for subclasses -----------------------------------------------------
    def check(self) -> None:
        """Raise :class:`BrokerUnavailable` if this broker cannot run here."""

    def version(self) -> str:
        return "?"

    def command(self, workdir: Path) -> list[str]:
        raise NotImplementedError

    def environment(self, workdir: Path) -> dict[str, str]:
        return dict(os.environ)

    def after_stop(self) -> None:
        """Clean up helpers the broker left outside its process group."""

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"stompbench-{self.name}-"))
        self.port = free_port(self.host)
        cmd = self.command(self.workdir)
        env = self.environment(self.workdir)
        self._log = open(self.workdir / "console.log", "wb")
        log.info("starting %s on port %d: %s", self.name, self.port, " ".join(cmd))
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerFailed(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            if stomp_ready(self.host, self.port, list(self.dialect.connect_headers)):
                pid = self.proc.pid
                if self.measured_comm:
                    pid = procstat.find_descendant(self.proc.pid, self.measured_comm) or 0
                    if not pid:
                        raise BrokerFailed(f"no {self.measured_comm} process under {self.proc.pid}")
                self.pid = pid
                return
            time.sleep(0.2)
        raise BrokerFailed(f"{self.name} not ready after {READY_TIMEOUT:.0f}s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        if self.workdir is None:
            return ""
        try:
            data = (self.workdir / "console.log").read_bytes()
        except OSError:
            return ""
        return data[-n:].decode("utf-8", "replace")

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            self._signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0fs, killing", self.name, STOP_TIMEOUT)
        if proc is not None:
            self._signal_group(proc.pid, signal.SIGKILL)  # anything left in the group
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.error("%s (pid %d) survived SIGKILL", self.name, proc.pid)
        self.proc = None
        self.pid = 0
        try:
            self.after_stop()
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "Broker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
