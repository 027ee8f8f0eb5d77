"""The ``spark`` topology of a chaos run: one broker, the producers as in every run, and for the
consumer a Spark streaming query, ``readStream.format("petrel")`` -> Parquet with a checkpoint
(`spark_job`, a process of its own that runs ``Trigger.AvailableNow`` pass after pass).

The ``query_kill9`` fault kills the query's whole process group (driver, JVM, Python workers)
with SIGKILL; the heal starts it again from its checkpoint. After the broker faults are healed
and the producers are done, `finish` lets the query run once more to the end of the queue and
read its output back through Spark (``_spark_metadata`` leaves out what killed tasks and batches
wrote); `feed` gives the ledger every row: a message's first row is its delivery and its
acknowledgement, any further row of it a DUPLICATE; a confirmed message without a row is LOST.
What the queue still holds afterwards is the last batch (its cursor moves one batch late) and is
not drained: it is in the output already.

The ``spark-sink`` topology turns it round: the query writes JSON files of rows into the queue
through ``writeStream.format("petrel")`` (its duplicate IDs from the query, batch, partition and
row), killed and restarted the same way; after its last run the queue is drained and each row
must be there exactly once (`count_drained`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from petrel.testing.chaos.ledger import Ledger
from petrel.testing.chaos.timeline import Timeline
from petrel.testing.process import wait_for

__all__ = ["SparkQuery", "spark_available"]

READY_TIMEOUT = 120.0  # a JVM start on a loaded 2-core machine
FINISH_TIMEOUT = 240.0
MAX_FAILURES = 3  # query processes that failed by themselves before the run gives up on the query


def spark_available() -> str | None:
    """None when pyspark and pyarrow import; else why not."""
    for module in ("pyspark", "pyarrow"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install petrel[spark])"
    return None


class SparkQuery:
    """The query process: `start`, `kill9` (the fault), `finish` (the last run), `result`."""

    def __init__(self, workdir: Path, url: str, queue: str, timeline: Timeline, *, max_per_batch: int = 0,
                 sink_chunk: int = 0) -> None:
        """`sink_chunk`: the sink's rows per broker transaction (0: the query is the source)."""
        self.dir = Path(workdir) / "spark"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.url, self.queue, self.timeline = url, queue, timeline
        self.max_per_batch = max_per_batch
        self.sink_chunk = sink_chunk
        self.input = self.dir / "input"
        if sink_chunk:
            self.input.mkdir(exist_ok=True)  # empty until the query is ready
        self.finish_file = self.dir / "finish"
        self.result_file = self.dir / "result.json"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.kills = 0
        self.mid_batch = 0  # kills that came between a batch's offsets and its commit
        self.failures: list[str] = []  # exits the harness did not cause

    def command(self) -> list[str]:
        d = self.dir
        return [sys.executable, "-m", "petrel.testing.chaos.spark_job", "--url", self.url, "--queue", self.queue,
                "--output", str(d / "output"), "--checkpoint", str(d / "checkpoint"), "--scratch", str(d / "scratch"),
                "--finish", str(self.finish_file), "--result", str(self.result_file),
                "--max-per-batch", str(self.max_per_batch)] + (
                    ["--mode", "sink", "--input", str(self.input), "--chunk", str(self.sink_chunk)]
                    if self.sink_chunk else [])

    def write_input(self, mids: list[str], per_file: int, body_size: int) -> None:
        """The sink's input: JSON files of `per_file` rows (one micro-batch each)."""
        self.input.mkdir(parents=True, exist_ok=True)
        for n, at in enumerate(range(0, len(mids), per_file)):
            lines = [json.dumps({"body": f"{mid}|" + "x" * max(body_size - len(mid) - 1, 0)})
                     for mid in mids[at:at + per_file]]
            tmp = self.dir / f"part-{n:05d}.json"
            tmp.write_text("\n".join(lines) + "\n")
            tmp.replace(self.input / tmp.name)

    def _log(self, n: int, kind: str) -> Path:
        return self.dir / f"query-{n}.{kind}"

    def start(self) -> None:
        if self.running():
            return
        self._reap()
        n = self.starts
        with open(self._log(n, "out"), "wb") as out, open(self._log(n, "err"), "wb") as err:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=err, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.starts += 1
        self.timeline.note(f"spark query process {n} started")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def events(self, n: int | None = None) -> list[dict]:
        n = self.starts - 1 if n is None else n
        path = self._log(n, "out")
        out = []
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut by the kill
        return out

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        def ready() -> bool:
            if not self.running():
                failed = [e["error"] for e in self.events() if e.get("event") == "failed"]
                raise RuntimeError(f"the spark query exited {self.proc.returncode if self.proc else '?'} "
                                   f"before it was ready: {failed[-1] if failed else self._stderr_tail()}")
            return any(e.get("event") == "ready" for e in self.events())
        wait_for(ready, timeout, 0.1, message=f"the spark query was not ready in {timeout:.0f}s")

    def kill9(self) -> None:
        """SIGKILL to the query's process group (the driver, its JVM and Python workers)."""
        if not self.running():
            self.timeline.note("query_kill9: the spark query is not running")
            return
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.kills += 1
        planned, done = self.batches()
        if planned > done:
            self.mid_batch += 1
        state = f"mid-batch (batch {planned - 1} planned, not committed)" if planned > done else \
            f"between batches ({done} committed)"
        self.timeline.note(f"spark query process {self.starts - 1} killed {state}")

    def batches(self) -> tuple[int, int]:
        """(micro-batches planned, committed) by the checkpoint's offset and commit logs."""
        def count(kind: str) -> int:
            d = self.dir / "checkpoint" / kind
            return sum(1 for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else 0
        return count("offsets"), count("commits")

    def _reap(self) -> None:
        """Record an exit the harness did not cause (a failed query)."""
        if self.proc is None or self.proc.returncode in (None, 0, -signal.SIGKILL):
            return
        failed = [e for e in self.events() if e.get("event") == "failed"]
        why = failed[-1]["error"] if failed else self._stderr_tail()
        self.failures.append(f"spark query process {self.starts - 1} exited {self.proc.returncode}: {why}")
        self.timeline.note(self.failures[-1][:300])
        self.proc = None

    def _stderr_tail(self, n: int | None = None) -> str:
        path = self._log(self.starts - 1 if n is None else n, "err")
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def finish(self, timeout: float = FINISH_TIMEOUT) -> list[str]:
        """One last run from after now to the end of the queue, then the output read back; the
        problems (the query failing again and again, or not finishing)."""
        self.finish_file.touch()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.running():
                time.sleep(0.1)
                continue
            if self.proc is not None and self.proc.returncode == 0 and self.result_file.exists():
                for n in range(self.starts):
                    runs = [e for e in self.events(n) if e.get("event") == "run"]
                    self.timeline.note(f"spark query process {n}: {len(runs)} runs: " + ", ".join(
                        f"{e['batches']} batches {e['rows']} rows {e['seconds']}s" for e in runs))
                done = [e for e in self.events() if e.get("event") == "done"]
                if done and self.sink_chunk:
                    self.timeline.note("spark sink query finished")
                elif done:
                    self.timeline.note(f"spark query finished: {done[-1]['rows']} rows read back through Spark, "
                                       f"{done[-1]['raw_rows']} rows in {done[-1]['files']} Parquet files "
                                       f"({done[-1].get('torn_files', 0)} unreadable)")
                return list(self.failures)
            self._reap()
            if len(self.failures) >= MAX_FAILURES:
                return list(self.failures)
            self.start()
        self.stop()
        return self.failures + [f"the spark query did not finish in {timeout:.0f}s"]

    def result(self) -> list[list]:
        """[mid, dup_id, node, seq] per row of the committed output."""
        return json.loads(self.result_file.read_text())["rows"] if self.result_file.exists() else []

    def feed(self, ledger: Ledger, stream: str, dup_prefix: str | None) -> list[str]:
        """The output into the ledger; the problems (a row whose dup_id column is not its
        message's duplicate ID)."""
        seen: set[str] = set()
        problems = []
        for mid, dup_id, node, seq in self.result():
            ledger.delivered(stream, mid)
            if mid not in seen:
                seen.add(mid)
                ledger.ack_confirmed(stream, [mid])
            want = None if dup_prefix is None else f"{dup_prefix}-{mid}"
            if dup_id != want and len(problems) < 5:
                problems.append(f"row {node}/{seq} of {mid}: dup_id {dup_id!r}, sent with {want!r}")
        return problems

    @staticmethod
    def count_drained(ledger: Ledger, stream: str, mids: list[str]) -> None:
        """What a drain of the sink's queue found into the ledger: a row's first copy is its
        delivery and acknowledgement, any further copy a DUPLICATE."""
        seen: set[str] = set()
        for mid in mids:
            ledger.delivered(stream, mid)
            if mid not in seen:
                seen.add(mid)
                ledger.ack_confirmed(stream, [mid])

    def stop(self) -> None:
        if self.running():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
