"""Duplicate detection with paging across a kill -9 (issue 9, bug 3): a client that resends every
message with its `_AMQ_DUPL_ID` after the crash finds each one in the queue exactly once, none
dropped as a duplicate of an ID whose message was lost."""

from __future__ import annotations

import pytest

from conftest import connect, receive_each_once
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system

SETTINGS = """
[address_settings."big"]
max_size_bytes = 65536
address_full_policy = "PAGE"
"""
N = 3000
BODY = "x" * 1000


def send_all(conn, listener, tag: str, n: int = N) -> None:
    for i in range(n):
        conn.send("/queue/big", f"{i:05d}{BODY}",
                  headers={"persistent": "true", "receipt": f"{tag}{i}", "_AMQ_DUPL_ID": f"id-{i}"})


def test_resending_with_duplicate_ids_after_a_kill_9_while_paging_gives_each_message_once(broker_factory):
    b = broker_factory(SETTINGS).start()
    conn, listener = connect(b)
    send_all(conn, listener, "a", N // 2)
    b.kill9()  # with half the sends just written, most not yet confirmed, the queue paging
    confirmed = set()
    while not listener.receipts.empty():
        confirmed.add(int(listener.receipts.get()[1:]))
    assert len(confirmed) < N // 2, "the kill came after every send was confirmed: nothing was in flight"
    assert (b.data_dir / "paging").exists()

    b.start()
    conn, listener = connect(b)
    send_all(conn, listener, "b")  # the client resends everything, each with its duplicate ID
    resent = set()

    def all_receipted() -> bool:
        while not listener.receipts.empty():
            resent.add(listener.receipts.get())
        return len(resent) == N

    wait_for(all_receipted, 180, message=f"receipts for the resends ({len(resent)} of {N})")

    conn.subscribe("/queue/big", id="1", ack="auto")
    receive_each_once(listener, N, confirmed=len(confirmed))
    conn.disconnect()
