"""The ``drain`` topology of a chaos run: two brokers, not clustered; the clients start on the
first (the source) and know the second (the target). The ``drain`` fault kills the source
(``kill -9``) mid-run and empties its data directory into the target with
``python -m petrel drain --data-dir <source> --target tcp://<target> --progress json``; the
drainer itself is killed (SIGKILL) at the plan's `drain_kills` moments and run again until it
exits 0 (an exit 1, say while the target is down, is run again too). The producers move over to
the target as soon as the source is gone.

The source is not started again: its directory was handed over (`retired`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from petrel.client import Connection
from petrel.testing.chaos.timeline import Timeline
from petrel.testing.process import BrokerProcess

__all__ = ["DrainPair", "Drainer"]

GIVE_UP = 180.0  # seconds of drainer runs before the run reports a drain that never finished


class Drainer(threading.Thread):
    """Runs ``petrel drain`` on `source`'s directory into `target`, killed after each of `kills`
    seconds (while it still runs), then again until it exits 0."""

    def __init__(self, source: BrokerProcess, target: BrokerProcess, kills: tuple[float, ...],
                 timeline: Timeline, log_dir: Path, login: list[str] | None = None) -> None:
        super().__init__(name="drainer", daemon=True)
        self.source, self.target, self.kills = source, target, kills
        self.login = login or []  # --user/--password: the target's cluster credentials
        self.timeline = timeline
        self.log_dir = Path(log_dir)
        self.runs: list[int] = []  # exit codes (-9: killed by the harness)
        self.moved = 0  # the total of the run that exited 0
        self.problem: str | None = None
        self.done = threading.Event()
        self.stopping = threading.Event()  # `stop`: no further run, the current one killed
        self.proc: subprocess.Popen | None = None  # the run under way

    def command(self) -> list[str]:
        return [sys.executable, "-m", "petrel", "drain", "--data-dir", str(self.source.data_dir),
                "--target", f"tcp://127.0.0.1:{self.target.port}", "--progress", "json", *self.login]

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the runner
            self.problem = f"the drainer loop crashed: {exc!r}"
        finally:
            self.done.set()

    def _run(self) -> None:
        deadline = time.monotonic() + GIVE_UP
        kills = list(self.kills)
        while time.monotonic() < deadline and not self.stopping.is_set():
            n = len(self.runs)
            out = open(self.log_dir / f"drain-{n}.out", "wb")
            err = open(self.log_dir / f"drain-{n}.err", "wb")
            proc = self.proc = subprocess.Popen(self.command(), stdout=out, stderr=err, start_new_session=True)
            if self.stopping.is_set():  # `stop` came between the check and the start: it missed this run
                os.killpg(proc.pid, signal.SIGKILL)
            kill_after = kills.pop(0) if kills else None
            try:
                code = proc.wait(kill_after if kill_after is not None else max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait(30)
                if kill_after is None:
                    self.problem = f"the drainer did not finish in {GIVE_UP:.0f}s"
                    self.runs.append(code)
                    return
                self.timeline.note(f"drainer run {n} killed after {kill_after:.2f}s "
                                   f"({self._progress(n)})")
            finally:
                out.close()
                err.close()
            self.runs.append(code)
            if code == 0:
                self.moved = self._total(n)
                self.timeline.note(f"drainer run {n} exited 0: {self._progress(n)}")
                return
            if code != -signal.SIGKILL:
                reason = (self.log_dir / f"drain-{n}.err").read_text(errors="replace").strip().splitlines()[-1:]
                self.timeline.note(f"drainer run {n} exited {code}: {reason[0] if reason else '?'}")
                time.sleep(0.5)
        self.problem = f"the drainer never exited 0 in {GIVE_UP:.0f}s (exit codes {self.runs})"

    def stop(self, timeout: float = 30.0) -> None:
        """No further run; the one under way killed (its own process group: the run's end does not
        reach it otherwise, it outlived a run that ended early); wait for the loop to end."""
        self.stopping.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.done.wait(timeout)

    def _events(self, n: int) -> list[dict]:
        events = []
        for line in (self.log_dir / f"drain-{n}.out").read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass  # the last line, cut by the kill
        return events

    def _progress(self, n: int) -> str:
        events = self._events(n)
        return json.dumps(events[-1]) if events else "no progress yet"

    def _total(self, n: int) -> int:
        for event in reversed(self._events(n)):
            for key in ("messages_moved", "moved"):
                if isinstance(event.get(key), int):
                    return event[key]
        return 0


class DrainPair:
    """The source (node 0) and the target (node 1) of the drain topology."""

    def __init__(self, workdir: Path, settings: str, login: list[str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.login = login or []  # the drainer's --user/--password
        self.source = BrokerProcess(self.workdir / "source", name="source", http=True, settings=settings)
        self.target = BrokerProcess(self.workdir / "target", name="target", http=True, settings=settings)
        self.nodes = [self.source, self.target]
        self.retired: set[int] = set()
        self.drainer: Drainer | None = None

    def create_subscriptions(self, topic: str, names: tuple[str, ...]) -> None:
        """The durable subscriptions on both brokers before the first send: the subscribers are on
        the target, the producers start on the source (the drainer merges the source's copies into
        the target's queues of the same names)."""
        for i, node in enumerate(self.nodes):
            if i in self.retired:
                continue
            with Connection(f"tcp://127.0.0.1:{node.port}", user=self.login[1] if self.login else None,
                            password=self.login[3] if self.login else None) as conn:  # as the cluster
                for name in names:
                    conn.create_queue(name, topic, "MULTICAST", exists_ok=True)

    def begin(self, kills: tuple[float, ...], timeline: Timeline) -> None:
        """The drain fault: kill the source, start the drainer."""
        self.source.kill9()
        self.retired.add(0)
        self.drainer = Drainer(self.source, self.target, kills, timeline, self.workdir, self.login)
        self.drainer.start()

    def close(self) -> None:
        """The end of the run, however it ended: the drainer stopped (an aborted run, or one whose
        `wait` gave up, left it running), and the source killed whatever became of it (retired
        nodes are not among those the runner stops)."""
        if self.drainer is not None:
            self.drainer.stop()
        self.source.kill9()

    def wait(self) -> list[str]:
        """Wait for the drainer to exit 0; the problems."""
        if self.drainer is None:
            return []
        self.drainer.done.wait(GIVE_UP + 60)
        if not self.drainer.done.is_set():
            return ["the drainer thread never ended"]
        return [self.drainer.problem] if self.drainer.problem else []
