"""References routed in a store transaction join their queues once it commits (issue 9, bug 2):
no consumer takes, and acknowledges (deleting it), a message whose add is not yet committed in
the journal. An auto-acknowledging consumer met it on a cluster node (forwarded messages are
added in one transaction per read) and after any transacted send.
"""

from __future__ import annotations

import threading

import pytest
from office_harness import ManualClock, Sink

from petrel.core.message import Message, RoutingType
from petrel.core.postoffice import PostOffice, SendOutcome
from petrel.core.queue import Consumer
from petrel.core.settings import AddressSettingsRepository
from petrel.core.transaction import Transaction
from petrel.storage.file_store import FileStore

ANY = RoutingType.ANYCAST


@pytest.fixture
def filed(tmp_path):
    """A post office on a real FileStore (a delete of an unknown record raises there)."""
    store = FileStore(tmp_path, file_size=256 * 1024)
    clock = ManualClock()
    office = PostOffice(store, AddressSettingsRepository({}), clock, clock=clock)
    office.recover(store.recover())
    office.ensure_defaults()
    yield office
    store.close()


def auto_ack(office, name: str) -> Sink:
    if name not in office.queues:
        office.create_queue(name, name, ANY)
    sink = Sink()
    office.queues[name].add_consumer(Consumer(office.queues[name], sink, auto_ack=True))
    return sink


def durable(office, address: str, body: bytes, **props) -> Message:
    return Message(id=office.store.next_id(), address=address, body=body, properties=props, durable=True,
                   timestamp=office.now())


def restart(office, tmp_path) -> PostOffice:
    done = threading.Event()
    office.store.sync(done.set)
    assert done.wait(10)
    office.store.close()
    store = FileStore(tmp_path, file_size=256 * 1024)
    clock = ManualClock()
    again = PostOffice(store, AddressSettingsRepository({}), clock, clock=clock)
    again.recover(store.recover())
    return again


def test_forwarded_messages_reach_consumers_once_their_transaction_commits(filed, tmp_path) -> None:
    sink = auto_ack(filed, "x")
    tx = filed.store.begin()  # the adapter's: one for every forwarded message of a read
    for i in range(3):
        result = filed.receive_forwarded(durable(filed, "x", b"%d" % i), ["x"], f"A:{i}", tx)
        assert result.outcome == SendOutcome.ROUTED
    assert sink.got == []  # not before the commit: its auto-ack would delete an unknown record
    filed.commit_store(tx)
    assert sink.bodies == [b"0", b"1", b"2"]
    again = restart(filed, tmp_path)
    assert again.queues["x"].message_count == 0  # acknowledged for good
    again.store.close()


def test_a_transacted_send_to_an_auto_ack_consumer(filed, tmp_path) -> None:
    sink = auto_ack(filed, "q")
    tx = Transaction()
    filed.send(durable(filed, "q", b"a"), ANY, tx)
    filed.send(durable(filed, "q", b"b"), ANY, tx)
    filed.commit(tx)
    assert sink.bodies == [b"a", b"b"]
    again = restart(filed, tmp_path)
    assert again.queues["q"].message_count == 0
    again.store.close()


def test_a_last_value_queue_replaces_within_one_transaction(filed, tmp_path) -> None:
    filed.create_queue("lv", "lv", ANY, attributes={"last_value_key": "k"})
    tx = Transaction()
    filed.send(durable(filed, "lv", b"old", k="1"), ANY, tx)
    filed.send(durable(filed, "lv", b"new", k="1"), ANY, tx)
    filed.commit(tx)
    assert [r.message.body for r in filed.queues["lv"].iter_refs()] == [b"new"]
    again = restart(filed, tmp_path)
    assert [r.message.body for r in again.queues["lv"].iter_refs()] == [b"new"]
    again.store.close()


