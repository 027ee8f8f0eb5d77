"""``timeout N python -m petrel.testing.chaos ...`` ends the harness with SIGTERM: the run it is
in must stop its brokers (its ``finally``), not leave them running, orphaned, after it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and "petrel" in cmdline and " run " in cmdline:
            found.append(int(entry.name))
    return found


def _wait(condition, deadline: float, what: str) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_sigterm_to_the_harness_stops_the_brokers_of_its_run(tmp_path):
    workdir = tmp_path / "chaos"
    harness = subprocess.Popen(
        [sys.executable, "-m", "petrel.testing.chaos", "--seed", "5", "--topology", "single",
         "--protocol", "STOMP", "--workdir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _processes_naming(str(workdir)), 60, "the run's broker to start")
        harness.send_signal(signal.SIGTERM)
        harness.wait(60)
        _wait(lambda: not _processes_naming(str(workdir)), 30, "the run's brokers to stop")
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(10)
        for pid in _processes_naming(str(workdir)):  # left behind: the test failed, clean up
            os.kill(pid, signal.SIGKILL)
