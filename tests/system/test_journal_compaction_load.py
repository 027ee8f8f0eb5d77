"""Compaction under sustained persistent sends with duplicate IDs (issue 9, bug 9): with small
journal files and thresholds that make compaction run again and again, every receipt arrives,
and after a kill -9 (the sends still going, a compaction possibly half done) and a restart,
every receipted message is there once; the client's resends with the same duplicate IDs add
nothing twice."""

from __future__ import annotations

import pytest

from conftest import connect, receive_each_once
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system

SETTINGS = """
journal_file_size = 65536
journal_compact_min_files = 2
journal_compact_percentage = 90
"""
N = 3000
BODY = "k" * 700


def send(conn, i: int, tag: str) -> None:
    """A message to keep, with its duplicate ID, and three consumed at once (dead records)."""
    conn.send("/queue/keep", f"{i:05d}{BODY}",
              headers={"persistent": "true", "receipt": f"{tag}{i}", "_AMQ_DUPL_ID": f"keep-{i}"})
    for k in range(3):
        conn.send("/queue/churn", f"{i:05d}{BODY}", headers={"persistent": "true", "_AMQ_DUPL_ID": f"churn-{k}-{i}"})


def receipted(listener, into: set) -> set:
    while not listener.receipts.empty():
        into.add(int(listener.receipts.get()[1:]))
    return into


def compactions(b) -> int:
    return b.log_path.read_text(errors="replace").count("compacted ")


def test_receipts_and_messages_survive_compaction_under_load_and_a_kill_9(broker_factory):
    b = broker_factory(SETTINGS).start()
    consumer, consumed = connect(b)
    consumer.subscribe("/queue/churn", id="churn", ack="auto")
    conn, listener = connect(b)
    confirmed: set[int] = set()
    sent = 0
    while sent < N // 2 or (compactions(b) < 2 and sent < N * 3 // 4):  # compactions run meanwhile
        for i in range(sent, sent + 100):
            send(conn, i, "a")
        sent += 100
        receipted(listener, confirmed)
    wait_for(lambda: len(receipted(listener, confirmed)) == sent, 180,
             message=f"receipts while compacting ({len(confirmed)} of {sent}):\n{b.log()}")
    wait_for(lambda: compactions(b) >= 2, 60, message=f"compactions while sending:\n{b.log()}")
    for i in range(sent, N):  # more of the same, and the broker killed in the middle
        send(conn, i, "a")
        if i == (sent + N) // 2:
            b.kill9()
            break
    receipted(listener, confirmed)
    assert len(confirmed) < N, "the kill came after every send was confirmed"

    b.start()
    conn, listener = connect(b)
    resent: set[int] = set()
    for i in range(N):  # the client resends whatever it is unsure of: everything, same duplicate IDs
        send(conn, i, "b")
    wait_for(lambda: len(receipted(listener, resent)) == N, 180,
             message=f"receipts for the resends ({len(resent)} of {N})")

    conn.subscribe("/queue/keep", id="keep", ack="auto")
    receive_each_once(listener, N, confirmed=len(confirmed))
    conn.disconnect()
