"""The local orchestrator's drainers: ``python -m petrel drain ... --progress json`` run detached.

Each attempt runs under a small shell that writes the drainer's exit code to a file once it
exits, so that whoever looks later (another ``cluster scale``, ``cluster status``) knows how it
ended even though it did not start it: no file and no process means it was killed. Its JSON
progress lines and its stderr go to files beside it::

    petrel-cluster/drains/node-3.attempt-2.jsonl  .stderr  .rc
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from petrel.orchestrator.processes import child_environment, process_alive, wait_exec
from petrel.orchestrator.state import DrainRecord, Node

__all__ = ["DRAINS_DIR", "drain_command", "last_progress", "poll_drain", "spawn_drain", "stop_drain"]

DRAINS_DIR = "drains"

# $1..$3: the progress, stderr and exit-code files; the rest: the drainer's command line
_WRAPPER = 'out=$1 err=$2 rc=$3; shift 3; "$@" >"$out" 2>"$err"; echo $? >"$rc.tmp"; mv "$rc.tmp" "$rc"'


def drain_command(node: Node, target: Node) -> list[str]:
    """The drainer's command line for ``node``'s data directory onto ``target`` (the cluster
    credentials come from ``node``'s broker.toml)."""
    return [sys.executable, "-m", "petrel", "drain", "--data-dir", node.data_dir, "--target", target.url,
            "--config", node.config, "--progress", "json"]


def spawn_drain(data_root: Path, node: Node, target: Node, attempt: int, now: float) -> DrainRecord:
    folder = data_root / DRAINS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    files = [str(folder / f"{node.name}.attempt-{attempt}.{kind}") for kind in ("jsonl", "stderr", "rc")]
    for path in files:
        Path(path).unlink(missing_ok=True)
    proc = subprocess.Popen(["sh", "-c", _WRAPPER, "sh", *files, *drain_command(node, target)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=data_root, env=child_environment(), start_new_session=True)
    wait_exec(proc, files[2])  # until then it is not recognisable as this attempt's (poll_drain)
    return DrainRecord(index=node.index, node=node.name, data_dir=node.data_dir, target=target.url,
                       attempts=attempt, pid=proc.pid, started=now, progress=files[0], stderr=files[1],
                       rc_file=files[2])


def _reason(record: DrainRecord, code: int | None) -> str:
    """Why an attempt failed: its "failed" event, else its stderr's last line, else the exit code."""
    event = last_progress(record)
    if event.get("event") == "failed" and event.get("reason"):
        return str(event["reason"])
    try:
        lines = [line.strip() for line in Path(record.stderr).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    if lines:
        return lines[-1]
    return "the drainer was killed (no exit code)" if code is None else f"the drainer exited {code}"


def _exit_code(record: DrainRecord) -> int | None:
    try:
        return int(Path(record.rc_file).read_text().strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return -1


def poll_drain(record: DrainRecord, now: float) -> DrainRecord:
    """The record, moved on to succeeded or failed if its attempt has ended."""
    if record.phase != "running":
        return record
    code = _exit_code(record)
    if code is None and process_alive(record.pid, record.rc_file):
        return record
    if code is None:
        code = _exit_code(record)  # it may have written the file and exited between the two looks
    if code == 0:
        return replace(record, phase="succeeded", finished=now, reason=None)
    return replace(record, phase="failed", finished=now, last_failure=now, reason=_reason(record, code))


def last_progress(record: DrainRecord) -> dict:
    """The latest JSON line the attempt printed ({} before the first)."""
    try:
        with open(record.progress, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode(errors="replace").splitlines()
    except OSError:
        return {}
    for line in reversed(tail):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by the seek, or being written
        if isinstance(event, dict):
            return event
    return {}


def stop_drain(record: DrainRecord, timeout: float = 10.0) -> None:
    """SIGTERM the attempt's process group (the shell and the drainer), SIGKILL after ``timeout``."""
    if record.phase != "running" or not process_alive(record.pid, record.rc_file):
        return
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(record.pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process_alive(record.pid, record.rc_file):
                return
            time.sleep(0.05)
