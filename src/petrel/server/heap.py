"""Python's cyclic garbage collector and a broker's heap.

A broker holds its messages as long-lived objects: a million held messages are several million
objects that the collector would traverse again and again — while recovery builds them (two
thirds of the time a million-message recovery took: 28.7 s, 7.8 s with the collector paused)
and in every full collection afterwards (a pause of a second per million held). Held messages
form no reference cycles: reference counting frees them when they are acknowledged. So:

- recovery runs with the collector paused (`paused`), in any process;
- a process that is a broker (`petrel run`, the drainer: `tune_process`) collects young
  objects less often, and moves what recovery built out of the collector's reach
  (`settle`: `gc.freeze`), so later collections traverse only what came after.

A library user that starts a `Broker` inside its own process keeps its own collector settings.

The drainer also keeps the memory it frees (`keep_freed_memory`): it frees and allocates about
its directory's size again and again as messages move, and on a virtual machine every page the C
allocator gives back to the system costs a fault when it is taken again (measured on 500,000
messages of 1 KiB: a third fewer page faults, 7 % less CPU). It exits when done, so what it keeps
goes with it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["keep_freed_memory", "paused", "settle", "tune_process"]

#: Container allocations between young collections (CPython's default is 700): a broker
#: allocates a few per message, so the default collects every couple of hundred messages.
YOUNG = 50_000
MIDDLE = 20  # young collections per middle one
OLD = 100  # middle collections before a full one is considered

_owner = False  # this process is a broker: settle() freezes what recovery built

# glibc's mallopt parameters (malloc.h) and what keep_freed_memory sets them to
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_KEEP = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 64 << 20))


def tune_process() -> None:
    """This process is a broker (its entry point says so): tune the collector for it."""
    global _owner
    _owner = True
    gc.set_threshold(YOUNG, MIDDLE, OLD)


@contextmanager
def paused() -> Iterator[None]:
    """The collector does not run inside (it is restored after, as it was)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def settle() -> None:
    """Recovery is done: in a broker process, what it built leaves the collector's generations.

    Call it while still `paused`: the first young collection after a pause would traverse
    everything allocated during it."""
    if _owner:
        gc.freeze()


def keep_freed_memory() -> bool:
    """Ask the C allocator (glibc) to keep freed memory for the next allocations rather than give
    it back to the system: buffers up to 32 MiB come from its heap, which it trims only above
    1 GiB free, growing 64 MiB at a time. False where there is no glibc ``mallopt``."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    return all(mallopt(param, value) == 1 for param, value in _KEEP)
