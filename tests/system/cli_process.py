"""Running ``petrel`` commands as processes, for the CLI system tests (import by name: the
test directory is on ``sys.path``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from petrel.testing.process import HOST_DISK, TEST_SECURITY

__all__ = ["command", "environment", "ok", "petrel", "running", "spawn"]


def command(*args: str) -> list[str]:
    """The command line of ``petrel ARGS`` run by this interpreter."""
    return [sys.executable, "-m", "petrel", *args]


def environment() -> dict[str, str]:
    """This environment without its PETREL_* variables, but for the test run's own
    (`petrel.testing.process.HOST_DISK`: brokers do not look at the host's disk; `TEST_SECURITY`:
    nor ask for logins)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PETREL_") or k in HOST_DISK or k in TEST_SECURITY}


def petrel(*args: str, timeout: float = 60, as_shipped: bool = False) -> subprocess.CompletedProcess:
    """``petrel ARGS``; `as_shipped`: with the product's security (on), not the test run's (off)."""
    env = environment()
    if as_shipped:
        env = {k: v for k, v in env.items() if k not in TEST_SECURITY}
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout, env=env)


def ok(*args: str, timeout: float = 60) -> str:
    """The output of ``petrel ARGS``, which must exit 0."""
    out = petrel(*args, timeout=timeout)
    assert out.returncode == 0, f"exit {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out.stdout


def spawn(*args: str) -> subprocess.Popen:
    """``petrel ARGS`` in the background, its output piped as text."""
    return subprocess.Popen(command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environment())


@contextmanager
def running(*args: str) -> Iterator[subprocess.Popen]:
    """`spawn`, and kill the process on the way out if it is still running."""
    proc = spawn(*args)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
