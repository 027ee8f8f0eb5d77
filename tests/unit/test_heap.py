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
