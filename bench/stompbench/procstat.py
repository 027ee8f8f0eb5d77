"""Broker process figures from /proc: CPU seconds, peak RSS, and finding the process."""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read().decode("ascii", "replace")
    # comm may hold spaces or parentheses: the fields start after the last ')'
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all its threads), in seconds."""
    fields = _stat_fields(pid)
    # after comm: state(0) ppid(1) ... utime is field 14 of stat, i.e. index 11 here
    return (int(fields[11]) + int(fields[12])) / _TICK


def status_kib(pid: int, key: str) -> int:
    """A ``kB`` line of /proc/<pid>/status (``VmHWM``, ``VmRSS``), 0 if absent."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(key.encode() + b":"):
                return int(line.split()[1])
    return 0


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the resident-set high-water mark since the process started."""
    return status_kib(pid, "VmHWM") / 1024.0


def children(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if int(_stat_fields(int(entry))[1]) == pid:
                found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def find_descendant(root: int, name: str) -> int | None:
    """The first process named ``name`` in ``root``'s tree (``root`` included)."""
    todo = [root]
    seen = set()
    while todo:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        if comm(pid) == name:
            return pid
        todo.extend(children(pid))
    return None


def loadavg_1m() -> float | None:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def run_queue_wait_ns(pid: int) -> int:
    """Nanoseconds the process's threads have spent runnable but waiting for a CPU
    (/proc/<pid>/task/*/schedstat, second field): the time a loaded machine took from it."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total
