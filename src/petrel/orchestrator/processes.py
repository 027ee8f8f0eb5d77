"""The orchestrator's processes: started detached (their own session, so they outlive the
command that started them), found again by pid plus the config file on their command line, and
stopped with SIGTERM, then SIGKILL after a deadline."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from petrel.config import ENV_PREFIX, env_settable
from petrel.errors import PetrelError
from petrel.orchestrator.state import HOST, Node

__all__ = ["Process", "Progress", "child_environment", "find_broker_process", "log_tail", "pid_listening_on",
           "port_free", "process_alive", "quiet", "signal_process", "spawn_broker", "stop_processes", "wait_exec"]

Progress = Callable[[str], None]


def quiet(_message: str) -> None:
    pass


@dataclass(frozen=True)
class Process:
    """Something to stop: a broker or the ZooKeeper."""

    name: str
    pid: int
    config: str | None  #: a file named on its command line (None: the pid alone identifies it)


def process_alive(pid: int, config: str | None = None) -> bool:
    """Whether ``pid`` runs (a zombie does not count); with ``config``, also whether its command
    line names that file, so a recycled pid is not taken for a broker."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return config is None  # someone else's process: not one of ours
    proc = Path("/proc") / str(pid)
    try:
        stat = (proc / "stat").read_text()
        if stat[stat.rindex(")") + 2:].startswith(("Z", "X")):
            return False
        if config is not None:
            return config in (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except FileNotFoundError:
        return False  # exited between the checks
    except OSError:
        pass  # no /proc (not Linux): os.kill said it exists
    return True


def find_broker_process(config: str) -> int | None:
    """The lowest pid of a broker run with ``--config <config>`` (``petrel run``, as a node
    restarted by hand), or None. Other commands naming the file (a drainer reads the cluster
    credentials from it) are not brokers."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "run" in args and (f"--config={config}" in args or any(
                a == "--config" and b == config for a, b in zip(args, args[1:]))):
            found.append(int(entry.name))
    alive = [pid for pid in sorted(found) if process_alive(pid)]
    return alive[0] if alive else None


def pid_listening_on(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` on this host, when it is ours to see."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(entry.name)
        except OSError:
            continue
    return None


def signal_process(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker binds
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def log_tail(path: str, lines: int = 3) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


#: The settings `petrel cluster up` writes into each node's broker.toml (`broker_toml`): the
#: environment's would override them on every node alike (a shared PETREL_PORT: the nodes collide).
NODE_SETTINGS = frozenset({"name", "data_dir", "persistence_enabled", "host", "port", "port_offset", "stomp_port",
                           "http_port", "cluster_user", "cluster_password"})


def child_environment() -> dict[str, str]:
    """This environment for a node (or a drainer) of the cluster: of its PETREL_* variables, the
    settings every node may share (``PETREL_MAX_DISK_USAGE``, say) and those of the logging and
    the tooling; not the ones that are each node's own (`NODE_SETTINGS`), nor a client's
    (``PETREL_URL``), which a broker would refuse as no setting of its."""
    shared = {ENV_PREFIX + key.upper() for key in env_settable() - NODE_SETTINGS}
    keep = ("PETREL_LOG_LEVEL", "PETREL_LOG_FORMAT", "PETREL_TEST_", "PETREL_BENCH_")
    return {k: v for k, v in os.environ.items() if not k.startswith("PETREL_") or k.startswith(keep) or k in shared}


def wait_exec(proc: subprocess.Popen, arg: str, timeout: float = 5.0) -> None:
    """Until ``proc`` runs its own program (its command line has ``arg``) or has exited: between
    fork and exec it still looks like its parent, and `process_alive` with ``arg`` would take it
    for gone."""
    deadline = time.monotonic() + timeout
    cmdline = Path("/proc") / str(proc.pid) / "cmdline"
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if arg in cmdline.read_bytes().decode(errors="replace").split("\0"):
                return
        except OSError:
            return  # no /proc: nothing to wait for
        time.sleep(0.005)


def spawn_broker(node: Node) -> subprocess.Popen:
    """``petrel run --config <node's broker.toml>``, detached, its output appended to its log."""
    with open(node.log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "petrel", "run", "--config", node.config],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            cwd=node.node_dir, env=child_environment(), start_new_session=True,
        )
    wait_exec(proc, node.config)
    return proc


def stop_processes(processes: Sequence[Process], *, timeout: float, progress: Progress = quiet) -> None:
    """SIGTERM all at once, wait up to ``timeout`` for the exits, then SIGKILL the stragglers."""
    running = [p for p in processes if process_alive(p.pid, p.config)]
    for p in processes:
        if p not in running:
            progress(f"{p.name} (pid {p.pid}) is not running")
    for p in running:
        signal_process(p.pid, signal.SIGTERM)
        progress(f"stopping {p.name} (pid {p.pid})")
    started = time.monotonic()
    next_report = started + 2.0
    while running:
        still = [p for p in running if process_alive(p.pid, p.config)]
        for p in running:
            if p not in still:
                progress(f"{p.name} stopped")
        running = still
        now = time.monotonic()
        if not running or now - started > timeout:
            break
        if now >= next_report:
            progress(f"waiting for {', '.join(p.name for p in running)} to stop "
                     f"({now - started:.0f} s of {timeout:g} s)")
            next_report = now + 2.0
        time.sleep(0.05)
    for p in running:
        progress(f"{p.name} (pid {p.pid}) did not stop within {timeout:g} s; killing it")
        signal_process(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while running and time.monotonic() < deadline:
        running = [p for p in running if process_alive(p.pid, p.config)]
        time.sleep(0.05)
    if running:
        raise PetrelError(f"{', '.join(f'{p.name} pid {p.pid}' for p in running)} still running after SIGKILL")
