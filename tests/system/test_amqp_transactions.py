"""AMQP 1.0 transactions through the coordinator, with proton's reactor API against a real
`petrel run`: transactional sends and acceptances, committed and rolled back."""

from __future__ import annotations

import threading

from proton import Message
from proton.handlers import TransactionalClientHandler
from proton.reactor import Container
from proton.utils import BlockingConnection


class TxSender(TransactionalClientHandler):
    """Send each batch in a transaction of its own: commit it when its flag is True, else roll back."""

    def __init__(self, url: str, address: str, batches: list[tuple[list[str], bool]]) -> None:
        super().__init__()
        self.url, self.address, self.batches = url, address, list(batches)
        self.outcomes: list[str] = []

    def on_start(self, event) -> None:
        self.conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(self.conn, self.address)
        self.container = event.container
        self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event) -> None:
        bodies, commit = self.batches[0]
        for body in bodies:
            event.transaction.send(self.sender, Message(body=body, durable=True))
        event.transaction.commit() if commit else event.transaction.abort()

    def _next(self, outcome: str) -> None:
        self.outcomes.append(outcome)
        self.batches.pop(0)
        if self.batches:
            self.container.declare_transaction(self.conn, handler=self)
        else:
            self.conn.close()

    def on_transaction_committed(self, event) -> None:
        self._next("committed")

    def on_transaction_aborted(self, event) -> None:
        self._next("aborted")

    def on_transaction_commit_failed(self, event) -> None:
        self._next("commit failed")


class TxReceiver(TransactionalClientHandler):
    """Accept `count` messages in one transaction, then commit or roll it back."""

    def __init__(self, url: str, address: str, count: int, commit: bool) -> None:
        super().__init__(prefetch=count)
        self.url, self.address, self.count, self.commit = url, address, count, commit
        self.bodies: list[str] = []
        self.outcome: str | None = None
        self.tx = None

    def on_start(self, event) -> None:
        self.conn = event.container.connect(self.url)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event) -> None:
        self.tx = event.transaction
        event.container.create_receiver(self.conn, self.address)

    def on_message(self, event) -> None:
        if len(self.bodies) == self.count:  # more credit came (proton tops it up): left unsettled
            return
        self.bodies.append(event.message.body)
        self.accept(event.delivery, self.tx)
        if len(self.bodies) == self.count:
            self.tx.commit() if self.commit else self.tx.abort()

    def on_transaction_committed(self, event) -> None:
        self.outcome = "committed"
        self.conn.close()

    def on_transaction_aborted(self, event) -> None:
        self.outcome = "aborted"
        self.conn.close()


def run(handler) -> None:
    thread = threading.Thread(target=Container(handler).run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the proton reactor did not finish"


def bodies_in(broker, address: str) -> list[str]:
    c = BlockingConnection(f"amqp://127.0.0.1:{broker.port}", timeout=20)
    try:
        r = c.create_receiver(address)
        got = []
        while True:
            try:
                m = r.receive(timeout=1.5)
            except Exception:
                return got
            r.accept()
            got.append(m.body)
    finally:
        c.close()


def test_transactional_sends_commit_and_rollback(broker):
    url = f"amqp://127.0.0.1:{broker.port}"
    sender = TxSender(url, "queue://tx.sends", [(["a1", "a2"], False), (["c1", "c2", "c3"], True), (["a3"], False)])
    run(sender)
    assert sender.outcomes == ["aborted", "committed", "aborted"]
    assert bodies_in(broker, "queue://tx.sends") == ["c1", "c2", "c3"]


def test_transactional_acceptance_rollback_returns_commit_removes(broker):
    url = f"amqp://127.0.0.1:{broker.port}"
    c = BlockingConnection(url, timeout=20)
    s = c.create_sender("queue://tx.acks")
    for i in range(4):
        s.send(Message(body=f"m{i}", durable=True))
    c.close()
    rolled_back = TxReceiver(url, "queue://tx.acks", 2, commit=False)
    run(rolled_back)
    assert (rolled_back.outcome, rolled_back.bodies) == ("aborted", ["m0", "m1"])
    committed = TxReceiver(url, "queue://tx.acks", 4, commit=True)
    run(committed)
    assert committed.outcome == "committed"
    assert sorted(committed.bodies) == ["m0", "m1", "m2", "m3"]
    assert bodies_in(broker, "queue://tx.acks") == []


def test_a_commit_is_durable_through_kill_9(broker_factory):
    b = broker_factory().start()
    url = f"amqp://127.0.0.1:{b.port}"
    sender = TxSender(url, "queue://tx.kill", [([f"k{i}" for i in range(20)], True)])
    run(sender)
    assert sender.outcomes == ["committed"]
    b.kill9()
    b.start()
    assert bodies_in(b, "queue://tx.kill") == [f"k{i}" for i in range(20)]
