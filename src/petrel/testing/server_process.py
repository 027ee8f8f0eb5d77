"""A third-party server a test runs for real (ZooKeeper, OpenLDAP): one process in a process
group of its own, in a work directory, logging to a file, stopped with the test or at exit.

Subclasses write their configuration and define `start` (spawn with `_spawn`, then wait until
the server answers); this base owns the rest: SIGTERM or SIGKILL of the whole group, the log's
tail for error messages, the work directory a server made itself, and the servers still running
when the interpreter exits (killed, so that no test leaves one behind).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Self

__all__ = ["ServerProcess"]

_running: set[ServerProcess] = set()


class ServerProcess:
    def __init__(self, workdir: Path | str | None, *, prefix: str, log_name: str) -> None:
        self._owns_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix=prefix))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / log_name
        self.process: subprocess.Popen | None = None

    def start(self) -> Self:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _spawn(self, command: list[str]) -> None:
        """Start `command` in the work directory, its output appended to the log."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            cwd=self.workdir, start_new_session=True)
        _running.add(self)

    def _forget(self) -> None:
        """This server is no longer this process's to stop (exited, or detached)."""
        _running.discard(self)

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
                os.killpg(process.pid, signal.SIGCONT)  # a paused (SIGSTOP) server hears the signal too
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        self._forget()

    def close(self) -> None:
        """Kill the server, and remove its directory when it made one itself."""
        self.kill()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_running):
        server.kill()
