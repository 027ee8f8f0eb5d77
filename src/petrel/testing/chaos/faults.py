"""The faults of a chaos run, each applied and then healed.

- ``kill9`` / ``sigterm``: a broker killed (SIGKILL) or stopped (SIGTERM), started again after
  the hold; its ports and data directory stay. In a shared-store pair the fault hits the live
  process, the backup takes over, and the restarted process waits as the backup (or, the
  primary, takes over again: failback).
- ``link_cut`` / ``link_freeze``: every cluster link to and from one node goes through a
  `TcpProxy`; the fault resets them (and refuses new ones) or holds every byte, then heals.
- ``consumer_drop``: a consumer disconnects abruptly between a batch and its acknowledgement.
- ``disk_full``: the node's data directory (a pair's shared one) is a small tmpfs (only as root, where mount works);
  the fault fills it with a file, then deletes the file. Elsewhere it is skipped, with a message.
  In a replication pair both directories are mounts, and the live's is filled.
- ``backup_kill9``: a replication pair's backup killed, started again after the hold.
- In a replication pair ``link_cut`` / ``link_freeze`` hit the proxies between live and backup,
  and a live is killed only while its backup is in sync (else the fault is skipped: a double fault).
- ``drain``: the drain topology's source killed and emptied by ``petrel drain`` (`drain.DrainPair`).
- ``query_kill9``: the spark topology's query process group killed (SIGKILL), started again from
  its checkpoint after the hold (`spark.SparkQuery`).
- ``scale_down``: the spark-scale topology's node 1 leaves the cluster, its messages moved to
  node 0 (`scale_down.ScaleDown`); it is not started again.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

from petrel.testing.chaos.plan import Fault
from petrel.testing.chaos.timeline import Timeline
from petrel.testing.process import BrokerProcess
from petrel.testing.proxy import TcpProxy

__all__ = ["DiskMount", "Injector", "can_mount_tmpfs"]

TMPFS_SIZE = "96m"


def can_mount_tmpfs() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


class DiskMount:
    """A small tmpfs at `path` (the data directory of one broker), for the full-disk fault."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.mounted = False
        self.filler = self.path / "chaos-filler"

    def mount(self) -> str | None:
        """None when mounted; otherwise why not."""
        if not can_mount_tmpfs():
            return "not running as root"
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(self.path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            return f"mount failed: {done.stderr.strip()}"
        self.mounted = True
        return None

    def fill(self) -> int:
        """Fill the file system; the bytes written."""
        written = 0
        chunk = b"\0" * (1 << 20)
        with open(self.filler, "wb", buffering=0) as f:
            while True:
                try:
                    written += f.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                if written > (1 << 30):
                    break
            # the last few KiB too, so even a small record finds no room
            for size in (65536, 4096, 512, 1):
                try:
                    while True:
                        written += f.write(b"\0" * size)
                except OSError:
                    pass
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False


class Injector:
    """Applies and heals the plan's faults on `nodes` (proxies[(i, j)]: node i's link to j)."""

    def __init__(self, nodes: list[BrokerProcess], proxies: dict[tuple[int, int], TcpProxy],
                 disks: dict[int, DiskMount], workload, timeline: Timeline, drain=None) -> None:
        self.nodes = nodes
        self.drain = drain  # the drain topology's DrainPair
        self.proxies = proxies
        self.disks = disks
        self.workload = workload
        self.timeline = timeline
        self.injected: dict[str, int] = {}
        self.skipped: dict[str, str] = {}
        self.restarted = False
        self.drain_kills: tuple[float, ...] = ()
        self.query = None  # the spark topology's SparkQuery
        self.scale = None  # the spark-scale topology's ScaleDown
        self.scale_when = "now"
        self.waited = 0.0  # seconds the scale-down waited for its moment: the later faults shift as much

    def apply(self, fault: Fault) -> None:
        kind = fault.kind
        node = self.nodes[fault.node] if kind not in ("consumer_drop", "query_kill9") else None
        failovers = len(node.failovers) if hasattr(node, "failovers") else None
        if kind in ("kill9", "sigterm") and hasattr(node, "cannot_fail"):
            why = node.cannot_fail()
            if why is not None:
                self.skipped.setdefault(kind, why)
                self.timeline.note(f"{kind} of node {fault.node}'s live skipped: {why}")
                return
        if kind == "kill9":
            node.kill9()
        elif kind == "sigterm":
            code = node.stop()
            if code not in (0, -15):
                self.timeline.note(f"node {fault.node} exited with {code} on SIGTERM")
        elif kind in ("link_cut", "link_freeze") and hasattr(node, "cut"):  # a replication pair's own link
            node.cut() if kind == "link_cut" else node.freeze()
        elif kind in ("link_cut", "link_freeze"):
            for (i, j), proxy in self.proxies.items():
                if fault.node in (i, j):
                    proxy.cut() if kind == "link_cut" else proxy.freeze()
        elif kind == "backup_kill9":
            killed = node.kill_backup()
            if killed is None:
                self.timeline.note(f"backup_kill9 of node {fault.node}: no backup runs")
            else:
                self.timeline.note(f"node {fault.node}: backup {killed.workdir.name} killed, the live goes on alone")
        elif kind == "drain":
            self.drain.begin(self.drain_kills, self.timeline)
            self.restarted = True  # the source's non-durable messages die with it
        elif kind == "query_kill9":
            self.query.kill9()
        elif kind == "scale_down":
            self.waited += self.scale.begin(self.scale_when, self.query)
        elif kind == "consumer_drop":
            consumers = self.workload.consumers
            consumers[fault.node % len(consumers)].drop(fault.hold)
        elif kind == "disk_full":
            disk = self.disks.get(fault.node)
            if disk is None or not disk.mounted:
                reason = self.skipped.setdefault(kind, "no tmpfs for the data directory")
                self.timeline.note(f"disk_full skipped: {reason}")
                return
            self.timeline.note(f"disk_full: {disk.fill() >> 20} MiB written to fill node {fault.node}'s disk")
        self.injected[kind] = self.injected.get(kind, 0) + 1
        self.timeline.note(f"FAULT {fault.describe()}")
        if failovers is None or kind not in ("kill9", "sigterm"):
            return
        if len(node.failovers) > failovers:  # a shared-store pair: the other process took over
            self.timeline.note(f"node {fault.node}: the other process of the pair serves after "
                               f"{node.failovers[-1]:.2f}s")
        else:
            self.timeline.note(f"node {fault.node}: the other process of the pair was down too: nobody serves")

    def heal(self, fault: Fault) -> None:
        kind = fault.kind
        if kind in ("kill9", "sigterm", "backup_kill9"):
            self.restarted = True
            node = self.nodes[fault.node]
            if node.proc is None or node.proc.poll() is not None:
                # a replication pair settles (the restarted one syncs) while the run goes on
                node.start(wait=False) if hasattr(node, "cannot_fail") else node.start()
        elif kind == "query_kill9":
            self.query.start()
        elif kind in ("link_cut", "link_freeze"):
            if hasattr(self.nodes[fault.node], "cut"):
                self.nodes[fault.node].heal()
            for (i, j), proxy in self.proxies.items():
                if fault.node in (i, j):
                    proxy.heal()
        elif kind == "disk_full":
            disk = self.disks.get(fault.node)
            if disk is not None and disk.mounted:
                disk.free()
            node = self.nodes[fault.node]
            if node.proc is not None and node.proc.poll() is not None:
                self.timeline.note(f"node {fault.node} stopped on the full disk (exit {node.proc.returncode}); "
                                   "started again")
                self.restarted = True
                node.start()
        else:
            return
        self.timeline.note(f"HEAL {kind} node {fault.node}")

    def heal_all(self) -> None:
        for node in self.nodes:
            if hasattr(node, "cut"):
                node.heal()
        for proxy in self.proxies.values():
            proxy.heal()
        for disk in self.disks.values():
            if disk.mounted:
                disk.free()
