"""What the test tooling starts cannot outlive the test process: a `BrokerProcess` left running
(a session whose cleanup was cut short) is killed when the interpreter exits, and the chaos
drain topology's `Drainer` stops its run under way (a `petrel drain` in a process group of its
own) when the run ends before the drainer did. A leaked `petrel run` of a drain chaos test was
seen 90 minutes after its session."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from petrel.testing.chaos.drain import Drainer
from petrel.testing.chaos.timeline import Timeline
from petrel.testing.process import BrokerProcess, wait_for

pytestmark = pytest.mark.system


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for this purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def test_a_broker_left_running_dies_with_the_process_that_started_it(tmp_path):
    script = textwrap.dedent(f"""
        from petrel.testing.process import BrokerProcess
        b = BrokerProcess({str(tmp_path / "b")!r}).start()
        print(b.proc.pid, flush=True)
        # no stop: the interpreter exits with the broker running
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[0])
    try:
        wait_for(lambda: not alive(pid), 10, message=f"broker {pid} still runs after its starter exited")
    finally:
        if alive(pid):
            os.kill(pid, 9)


class _Sleeper(Drainer):
    """A drainer whose every run hangs (as `petrel drain` against a target that never answers)."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(300)"]


def test_a_drainer_stopped_mid_run_kills_its_run_and_starts_no_other(tmp_path):
    source, target = BrokerProcess(tmp_path / "s"), BrokerProcess(tmp_path / "t")  # never started
    drainer = _Sleeper(source, target, (), Timeline(), tmp_path)
    drainer.start()
    proc = wait_for(lambda: drainer.proc, 10)  # a run under way
    drainer.stop()
    assert drainer.done.is_set()
    assert proc.poll() is not None and not alive(proc.pid)
    assert drainer.runs == [-9]  # no run after it
