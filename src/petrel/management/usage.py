"""What the broker uses: process memory, the data directory on disk, message bytes per address."""

from __future__ import annotations

import os
import resource
import shutil
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from petrel.core.address import Address

__all__ = ["rss_bytes", "directory_bytes", "disk_usage", "address_memory_bytes", "journals"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# References looked at per address before the rest is estimated from their mean size.
MEMORY_SAMPLE = 10_000


def rss_bytes() -> int:
    """Resident set size of this process now (peak RSS where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if os.uname().sysname == "Darwin" else peak * 1024


def directory_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (their sizes; preallocated journal files count whole)."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    return total


def disk_usage(path: Path) -> dict[str, int | str]:
    """The data directory's own bytes and its file system's size and free space (blocking)."""
    used = directory_bytes(path)
    try:
        fs = shutil.disk_usage(path)
        total, free = fs.total, fs.free
    except OSError:
        total = free = -1
    return {"data_dir": str(path), "used_bytes": used, "fs_total_bytes": total, "fs_free_bytes": free}


def journals(store: object) -> dict[str, Any]:
    """The journals behind a store, by name (none for an in-memory store)."""
    found = {}
    for name in ("messages", "bindings"):
        journal = getattr(store, name, None)
        if journal is not None and hasattr(journal, "stats"):
            found[name] = journal
    return found


def address_memory_bytes(address: Address, sample: int = MEMORY_SAMPLE) -> int:
    """Body bytes of the messages held for an address (waiting or out with a consumer).

    A message shared by several of the address's queues counts once. Past ``sample``
    references the total is extrapolated from the ones seen, so a scrape stays cheap on a
    deep queue.
    """
    queues = address.queues
    if not queues:
        return 0
    held = sum(q.message_count for q in queues)
    if held == 0:
        return 0
    seen: set[int] = set()
    total = looked = 0
    for queue in queues:
        refs = chain(queue.iter_refs(), *(c.delivering.values() for c in queue.consumers))
        for ref in refs:
            if looked >= sample:
                break
            looked += 1
            message = ref.message
            key = id(message)
            if key not in seen:
                seen.add(key)
                total += len(message.body)
        if looked >= sample:
            break
    if looked and held > looked:
        total = total * held // looked
    return total
