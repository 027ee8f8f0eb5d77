"""petrel.testing.pytest_plugin: failures reported as they happen, and the run's deadline —
run on a small suite of its own in a pytest subprocess, with and without xdist."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SUITE = '''
import time

def test_a_passes():
    pass

def test_b_fails():
    assert 1 + 1 == 3, "arithmetic is broken"

def test_c_slow():
    time.sleep(0.3)
''' + "".join(f"\ndef test_more_{i}():\n    time.sleep(0.05)\n" for i in range(40))


def run(tmp_path: Path, *args: str, deadline: float | None = None) -> tuple[int, str]:
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PETREL_TEST"))}
    if deadline is not None:
        env["PETREL_TEST_DEADLINE"] = str(deadline)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "petrel.testing.pytest_plugin", "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), *args, "test_suite.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["plain", "xdist"])
def test_a_failure_is_reported_on_its_own_line_when_it_happens(tmp_path: Path, xdist: list[str]) -> None:
    code, out = run(tmp_path, *xdist)
    assert code == 1, out
    line = next(line for line in out.splitlines() if line.startswith("FAILED test_suite.py::test_b_fails ("))
    assert "arithmetic is broken" in line, line
    assert "43 passed" not in out and "42 passed" in out, out  # the deadline is not set: everything ran


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["plain", "xdist"])
def test_a_passed_deadline_stops_the_run_with_its_summary(tmp_path: Path, xdist: list[str]) -> None:
    code, out = run(tmp_path, *xdist, deadline=time.time() - 1)
    assert code != 0, out
    assert "stopped at the run's deadline" in out, out
    assert " passed" in out or " failed" in out, out  # the summary is printed
    assert "42 passed" not in out, out  # the tests after the deadline did not run


def test_a_malformed_deadline_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "PETREL_TEST_DEADLINE": "soon"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "petrel.testing.pytest_plugin", "-q",
                           "-c", os.devnull, "--rootdir", str(tmp_path), "test_suite.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "PETREL_TEST_DEADLINE='soon'" in done.stdout + done.stderr
