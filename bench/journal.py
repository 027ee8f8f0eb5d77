"""Micro benchmark of the journal (not part of the test suite).

One thread appends N adds of B bytes, each with a ``done`` callback, as the event
loop does; the writer thread group-commits them.  Reports appends/s (until the
last callback fired), records per fdatasync (what group commit achieved), the
append cost alone (encoding and queueing, no waiting), and the load rate.

``--inflight K`` keeps at most K appends unconfirmed, like K producers that each
wait for a durable send before the next: group commit then batches up to K.

    .venv/bin/python bench/journal.py [--records 100000] [--body 1024] [--inflight K]
                                      [--dir DIR] [--no-datasync] [--buffer-timeout-ns N] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from petrel.storage.journal import FileJournal


def run_once(directory: Path, records: int, body_size: int, datasync: bool, timeout_ns: int,
             file_size: int, inflight: int) -> dict:
    shutil.rmtree(directory, ignore_errors=True)
    journal = FileJournal(directory, file_size=file_size, datasync=datasync, buffer_timeout_ns=timeout_ns,
                          min_files=2, pool_files=10)
    journal.load()
    finished = threading.Event()
    fired = [0]
    window = threading.Semaphore(inflight) if inflight else None

    def done() -> None:
        fired[0] += 1
        if window is not None:
            window.release()
        if fired[0] == records:
            finished.set()

    def on_batch(callbacks) -> None:  # the server would hand these to the loop in one call
        for cb in callbacks:
            cb()

    journal.start(on_batch)
    body = b"x" * body_size
    add = journal.add
    t0 = time.perf_counter()
    cpu0 = time.thread_time()
    if window is None:
        for rid in range(1, records + 1):
            add(rid, 1, body, done)
    else:
        acquire = window.acquire
        for rid in range(1, records + 1):
            acquire()
            add(rid, 1, body, done)
    append_cpu = time.thread_time() - cpu0
    finished.wait()
    elapsed = time.perf_counter() - t0
    journal.stop()
    stats = journal.stats()
    t1 = time.perf_counter()
    reader = FileJournal(directory, file_size=file_size, datasync=datasync)
    loaded = reader.load()
    load_s = time.perf_counter() - t1
    reader.stop()
    assert len(loaded.records) == records
    return {
        "appends_per_s": records / elapsed,
        "append_us": append_cpu / records * 1e6,
        "records_per_sync": stats["records"] / max(1, stats["syncs"]),
        "batches": stats["batches"],
        "mb_per_s": stats["bytes"] / elapsed / 1e6,
        "load_per_s": records / load_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=0, help="unconfirmed appends allowed (0: no limit)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--no-datasync", action="store_true")
    parser.add_argument("--buffer-timeout-ns", type=int, default=0)
    parser.add_argument("--file-size", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="petrel-bench-journal-"))
    try:
        results = [run_once(base / "journal", args.records, args.body, not args.no_datasync,
                            args.buffer_timeout_ns, args.file_size, args.inflight) for _ in range(args.runs)]
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"journal: {args.records} adds of {args.body} B, datasync={not args.no_datasync}, "
          f"buffer_timeout_ns={args.buffer_timeout_ns}, inflight={args.inflight or 'unlimited'}, "
          f"median of {args.runs} runs")
    for key in ("appends_per_s", "append_us", "records_per_sync", "batches", "mb_per_s", "load_per_s"):
        print(f"  {key:18} {statistics.median(r[key] for r in results):12.1f}")


if __name__ == "__main__":
    main()
