"""What `make test` prints so that a run cut short still says what went wrong.

Loaded by ``-p petrel.testing.pytest_plugin`` (pyproject's addopts); it acts in the process that
reports (the xdist controller, or pytest itself without xdist):

- **a line per failure as it happens** — ``FAILED <test> (<seconds>s): <first line of the
  error>`` — instead of only an ``F`` until the summary, which a run killed from outside (a CI
  time limit) never prints;
- **a deadline for the run** (``PETREL_TEST_DEADLINE``: seconds since the epoch, as `.ci/run`
  sets it): once it has passed no further test starts, the running ones finish, and pytest
  prints its summary and exits non-zero ("stopped at the run's deadline");
- **brokers independent of the host's disk**: every broker a test starts inherits
  ``PETREL_MAX_DISK_USAGE=100`` (unless the environment sets it), so a machine whose disk is
  over the default 90 % in use does not block every producer of every test until its timeout
  (a CI machine did: the run ended at its time limit). A test of the disk limit sets its own, on
  a small tmpfs (``BrokerProcess(env=OWN_DISK_LIMIT)``);
- **brokers without security**: they inherit ``PETREL_SECURITY_ENABLED=false`` (secure is the
  product's default); a test of security starts its brokers with ``env=OWN_SECURITY``;
- **SIGTERM as Ctrl-C** (``timeout 600 pytest ...``, a CI runner's stop): the interrupted test's
  ``finally`` blocks and fixtures still stop its brokers, and those left are killed at exit
  (`petrel.testing.process`); by default SIGTERM ends Python at once, and the brokers, in
  sessions of their own, ran on.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from petrel.testing.process import HOST_DISK, TEST_SECURITY

DEADLINE_ENV = "PETREL_TEST_DEADLINE"


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def deadline() -> float | None:
    value = os.environ.get(DEADLINE_ENV, "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise pytest.UsageError(f"{DEADLINE_ENV}={value!r} is not a time (seconds since the epoch)") from None


def failure_line(report: pytest.TestReport) -> str:
    """``FAILED <nodeid> (<duration>s): <the error's last line>``; a setup or teardown error says
    which it was."""
    what = "FAILED" if report.when == "call" else f"ERROR at {report.when} of"
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        reason = crash.message
    else:
        reason = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""
    reason = reason.strip().splitlines()[0] if reason.strip() else "(no message)"
    return f"{what} {report.nodeid} ({report.duration:.1f}s): {reason[:300]}"


class Reporter:
    def __init__(self, config: pytest.Config, until: float | None) -> None:
        self.config = config
        self.until = until
        self.stopped = False
        self.session: pytest.Session | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._say(failure_line(report), red=True)
        if self.until is not None and not self.stopped and time.time() >= self.until:
            self.stop(f"stopped at the run's deadline ({DEADLINE_ENV}); the tests not yet started did not run")

    def stop(self, why: str) -> None:
        self.stopped = True
        self._say(why, yellow=True)
        dsession = self.config.pluginmanager.get_plugin("dsession")  # xdist's controller
        if dsession is not None:
            dsession.shouldstop = why
        if self.session is not None:
            self.session.shouldstop = why

    def _say(self, line: str, **markup: bool) -> None:
        """``line`` on a line of its own, between the progress characters."""
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            return
        if terminal._tw.width_of_current_line:  # after "..F": end that line first
            terminal._tw.line()
        terminal.write_line(line, **markup)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    for name, value in (HOST_DISK | TEST_SECURITY).items():
        os.environ.setdefault(name, value)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    if _is_controller(config):
        config.pluginmanager.register(Reporter(config, deadline()), "petrel-reporter")
