"""Compaction under load (not part of the test suite).

One thread keeps appending what a broker with duplicate detection writes: per
send a transaction (message ADD_TX + duplicate-ID ADD_TX + COMMIT) with a sync
callback, acknowledgements (UPDATE + DELETE of older messages), while ``--live``
records stay live.  Compaction is forced ``--compactions`` times.  Reports the
longest gap between two sync confirmations while compaction runs and outside it,
and how long each compaction took against the live data it copied.

    .venv/bin/python bench/journal_compact.py [--live 200000] [--body 256] [--compactions 3]
                                              [--dir DIR] [--no-datasync] [--pipelined] [--between S]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from petrel.storage.journal import FileJournal


def run(directory: Path, live: int, body_size: int, compactions: int, datasync: bool, file_size: int,
        pipelined: bool, between: float) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    journal = FileJournal(directory, file_size=file_size, datasync=datasync, compact_percentage=0)
    journal.load()
    confirmations: list[float] = []
    lock = threading.Lock()
    window = threading.Semaphore(64)  # 64 producers waiting for their receipts

    def done() -> None:
        with lock:
            confirmations.append(time.perf_counter())
        window.release()

    journal.start(lambda callbacks: [cb() for cb in callbacks])
    body = b"m" * body_size
    print(f"filling {live} live records ...", flush=True)
    for rid in range(1, live + 1):
        journal.add(rid, 1, body)
        if rid % 3 == 0:
            journal.update(rid, 2, b"delivery")
    done_fill = threading.Event()
    journal.sync(done_fill.set)
    done_fill.wait()

    stop = threading.Event()
    next_id = [10_000_000]
    tx = [1]

    def load() -> None:
        inflight: list[int] = []
        while not stop.is_set():
            window.acquire()
            rid = next_id[0]
            next_id[0] += 2
            t = tx[0]
            tx[0] += 1
            journal.add_tx(t, rid, 1, body)
            journal.add_tx(t, rid + 1, 3, b"dup-%d" % rid)  # the duplicate ID, in the message's tx
            if not pipelined:
                journal.commit(t, done)
            elif t > 1:  # committed once the next send has begun: one is always open
                journal.commit(t - 1, done)
            inflight.append(rid)
            if len(inflight) > 2000:  # acked: the message goes, its duplicate ID stays
                old = inflight.pop(0)
                journal.update(old, 2, b"ack")
                journal.delete(old)

    producer = threading.Thread(target=load, daemon=True)
    producer.start()
    time.sleep(2.0)
    spans = []
    for _ in range(compactions):
        time.sleep(between)  # let dead records pile up
        t0 = time.perf_counter()
        replaced = journal.compact()
        t1 = time.perf_counter()
        spans.append((t0, t1, replaced))
    time.sleep(1.0)
    stop.set()
    producer.join()
    journal.stop()

    def gaps(inside: bool) -> float:
        worst = 0.0
        for a, b in zip(confirmations, confirmations[1:]):
            in_span = any(s0 <= b and a <= s1 for s0, s1, _ in spans)
            if in_span == inside:
                worst = max(worst, b - a)
        return worst

    worst = max(zip(confirmations, confirmations[1:]), key=lambda ab: ab[1] - ab[0])
    print(f"worst gap: {(worst[1] - worst[0]) * 1000:.1f} ms, "
          f"{worst[0] - spans[0][0]:+.3f} s from the start of the first compaction")
    for t0, t1, replaced in spans:
        print(f"compaction: {t1 - t0:.3f} s, {replaced} segments replaced, live {live}")
    print(f"confirmations: {len(confirmations)}")
    print(f"longest gap between confirmations during compaction: {gaps(True) * 1000:.1f} ms")
    print(f"longest gap between confirmations otherwise: {gaps(False) * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=200_000)
    parser.add_argument("--body", type=int, default=256)
    parser.add_argument("--compactions", type=int, default=3)
    parser.add_argument("--file-size", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--no-datasync", action="store_true")
    parser.add_argument("--between", type=float, default=1.0, help="seconds of load before each compaction")
    parser.add_argument("--pipelined", action="store_true",
                        help="commit each send after the next one has begun (a transaction open across every boundary)")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="petrel-compact-bench-"))
    try:
        run(directory / "journal", args.live, args.body, args.compactions, not args.no_datasync, args.file_size,
            args.pipelined, args.between)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
