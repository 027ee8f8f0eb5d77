"""The collector around recovery (`petrel.server.heap`): paused inside, restored after; frozen
only in a process that is a broker."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

from petrel.server import heap


def test_paused_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with heap.paused():
        assert not gc.isenabled()
        with heap.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner one leaves it as the outer one set it
    assert gc.isenabled()
    gc.disable()
    try:
        with heap.paused():
            pass
        assert not gc.isenabled()  # disabled before: stays so
    finally:
        gc.enable()


def test_settle_freezes_nothing_in_a_process_that_is_not_a_broker(monkeypatch):
    monkeypatch.setattr(heap, "_owner", False)  # (whatever ran in this test process before)
    before = gc.get_freeze_count()
    heap.settle()
    assert gc.get_freeze_count() == before


def test_a_broker_process_freezes_what_recovery_built():
    script = textwrap.dedent("""
        import gc
        from petrel.server import heap
        heap.tune_process()
        assert gc.get_threshold()[0] == heap.YOUNG
        with heap.paused():
            built = [[i] for i in range(10_000)]  # lists: always tracked by the collector
            heap.settle()
        assert gc.get_freeze_count() >= 10_000, gc.get_freeze_count()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_drainer_keeps_freed_memory_in_a_process_of_its_own():
    """glibc takes every setting (mallopt answers 1), and a 16 MiB buffer freed and taken again
    then comes from the heap: the second time costs (almost) no page faults."""
    script = textwrap.dedent("""
        import resource
        from petrel.server import heap
        assert heap.keep_freed_memory() is True
        def faults():
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        first = faults()
        buf = bytearray(16 << 20)  # zeroed: every page touched
        del buf
        second = faults()
        buf = bytearray(16 << 20)
        third = faults()
        assert second - first >= 3000, second - first  # 4,096 pages the first time
        assert third - second < 500, third - second
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
