"""The Makefile's venv bootstrap and `make test` exit-code handling.

Runs the real Makefile in a scratch directory with a fake ``python3`` that logs
what it is asked to do, so nothing is installed and the shared .venv is never
touched.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")

# A stand-in interpreter.  As the system python3 it can create a "venv" (a copy
# of itself); as the venv's python it logs pip and pytest calls.
FAKE_PYTHON = r"""#!/usr/bin/env bash
log="${FAKE_LOG:?}"
if [[ "$1" == "-c" ]]; then
    [[ -e "$(dirname "$0")/broken" ]] && exit 1
    exit 0
fi
if [[ "$1 $2" == "-m venv" ]]; then
    dir="${@: -1}"
    echo "venv $*" >> "$log"
    rm -rf "$dir"; mkdir -p "$dir/bin"
    cp "$0" "$dir/bin/python"
    printf '#!/usr/bin/env bash\necho "petrel $*" >> "%s"\n' "$log" > "$dir/bin/petrel"
    chmod +x "$dir/bin/python" "$dir/bin/petrel"
    exit 0
fi
if [[ "$1 $2" == "-m pip" ]]; then
    echo "pip $*" >> "$log"; exit "${FAKE_PIP_RC:-0}"
fi
if [[ "$1 $2" == "-m pytest" ]]; then
    echo "pytest $*" >> "$log"; exit "${FAKE_PYTEST_RC:-0}"
fi
echo "unexpected: $*" >> "$log"; exit 99
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "tests").mkdir()
    fake = tmp_path / "fake-python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return tmp_path


#: the Makefile's own variables, which the caller's environment would set (CI sets PYTEST_ARGS)
MAKE_KNOBS = ("PYTEST_ARGS", "PIP_FLAGS", "ARGS", "VENV", "PYTHON", "MAKEFLAGS", "MFLAGS")


def make(project: Path, *targets: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = project / "calls.log"
    log.write_text("")
    proc = subprocess.run(
        ["make", "--no-print-directory", f"PYTHON={project / 'fake-python3'}", *targets],
        cwd=project, capture_output=True, text=True, timeout=60,
        env={**{k: v for k, v in os.environ.items() if k not in MAKE_KNOBS}, "FAKE_LOG": str(log), **env},
    )
    return proc, log.read_text().splitlines()


def test_fresh_checkout_creates_venv_installs_and_runs_pytest(project: Path) -> None:
    proc, calls = make(project, "test")
    assert proc.returncode == 0, proc.stderr
    assert calls[0].startswith("venv -m venv --clear .venv")
    assert calls[1].startswith("pip -m pip install") and calls[1].endswith("-e .[dev,spark]")
    assert calls[2] == "pytest -m pytest -n 2 -p no:cacheprovider -q tests"
    assert len(calls) == 3
    assert (project / ".venv" / ".petrel-installed").exists()


def test_up_to_date_venv_is_reused(project: Path) -> None:
    assert make(project, "test")[0].returncode == 0
    proc, calls = make(project, "test")
    assert proc.returncode == 0
    assert [c.split()[0] for c in calls] == ["pytest"]


def test_changed_pyproject_reinstalls_without_recreating(project: Path) -> None:
    assert make(project, "test")[0].returncode == 0
    future = time.time() + 10
    os.utime(project / "pyproject.toml", (future, future))
    proc, calls = make(project, "test")
    assert proc.returncode == 0
    assert [c.split()[0] for c in calls] == ["pip", "pytest"]


def test_broken_venv_is_recreated(project: Path) -> None:
    assert make(project, "venv")[0].returncode == 0
    (project / ".venv" / "bin" / "broken").write_text("")
    os.utime(project / "pyproject.toml", (time.time() + 10,) * 2)
    proc, calls = make(project, "venv")
    assert proc.returncode == 0
    assert [c.split()[0] for c in calls] == ["venv", "pip"]


def test_failed_install_leaves_no_stamp(project: Path) -> None:
    proc, calls = make(project, "test", FAKE_PIP_RC="1")
    assert proc.returncode != 0
    assert not (project / ".venv" / ".petrel-installed").exists()
    assert not any(c.startswith("pytest") for c in calls)


@pytest.mark.parametrize(("rc", "message"), [(5, "no tests"), (1, "pytest exit 1"), (2, "pytest exit 2")])
def test_pytest_failures_fail_make_test(project: Path, rc: int, message: str) -> None:
    proc, _ = make(project, "test", FAKE_PYTEST_RC=str(rc))
    assert proc.returncode != 0
    assert message in proc.stderr


def test_make_run_starts_petrel_run(project: Path) -> None:
    proc, calls = make(project, "run", "ARGS=--port-offset 1")
    assert proc.returncode == 0, proc.stderr
    assert calls[-1] == "petrel run --port-offset 1"


def test_ci_script_is_executable_and_runs_make_test() -> None:
    script = REPO / ".ci" / "run"
    assert script.stat().st_mode & stat.S_IXUSR
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "make test" in text
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


@pytest.mark.skipif(not Path("/usr/share/java/zookeeper.jar").exists() or shutil.which("java") is None,
                    reason="the machine lacks what .ci/run would install (ZooKeeper, Java)")
def test_ci_script_reports_the_machine_sets_the_deadline_and_exits_with_make_tests_status(tmp_path: Path) -> None:
    (tmp_path / ".ci").mkdir()
    shutil.copy2(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_make = bin_dir / "make"
    fake_make.write_text('#!/bin/sh\necho "make $* deadline=$PETREL_TEST_DEADLINE args=$PYTEST_ARGS" > "$FAKE_LOG"\nexit 3\n')
    fake_make.chmod(0o755)
    log = tmp_path / "make.log"
    env = {k: v for k, v in os.environ.items() if k not in MAKE_KNOBS and not k.startswith(("PETREL_", "PIP_NO"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", FAKE_LOG=str(log))
    before = time.time()
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3, done.stderr  # make test's own status
    words = dict(w.split("=", 1) for w in log.read_text().split()[2:])
    assert log.read_text().startswith("make test ")
    assert before + 79 * 60 <= float(words["deadline"]) <= time.time() + 80 * 60
    assert words["args"] == "--maxfail=25"
    assert ".ci/run: machine: " in done.stderr and " cores, " in done.stderr, done.stderr
    assert ".ci/run: disk: " in done.stderr and "MiB free" in done.stderr, done.stderr
    assert ".ci/run: make test exited 3 after " in done.stderr, done.stderr
