"""The chaos run's AMQP 1.0 channels (python-qpid-proton's blocking API), behind the interface
of `channels`: a producer's batch returns once every transfer is accepted (each one answered
after the broker made it durable) or once its transaction's discharge is; a consumer accepts
what it received, in a transaction when the plan's ack mode is ``transacted``.

Acknowledgements: an AMQP receiver settles with its disposition and the broker answers
nothing, so an ``auto``, ``client`` or ``client-individual`` consumer's acceptances are only
ever *sent* in the ledger; a ``transacted`` one's are confirmed by the discharge's outcome.
"""

from __future__ import annotations

import socket
import struct
from itertools import count

from proton import Delivery, Described, Message, Terminus, symbol, ulong
from proton.reactor import Container, DurableSubscription, LinkOption
from proton.utils import BlockingConnection

from petrel.testing.chaos.channels import ChannelError, Delivery as ChaosDelivery, Spec, body_mid

__all__ = ["amqp_consumer", "amqp_producer"]

TIMEOUT = 60.0  # seconds for an outcome (a longer wait is reported as a hang)
_ids = count()
DECLARE = symbol("amqp:declare:list")
DISCHARGE = symbol("amqp:discharge:list")
TRANSACTIONAL_STATE = 0x34


def address_of(destination: str) -> str:
    """The harness's ``queue://chaos.q`` / ``topic://chaos.t`` are AMQP addresses as Qpid JMS
    sends them."""
    return destination


class _Coordinator(LinkOption):
    def apply(self, link) -> None:
        link.target.type = Terminus.COORDINATOR
        link.target.capabilities.put_object(symbol("amqp:local-transactions"))


def _connect(port: int, login: tuple[str, str] | None, container_id: str | None) -> BlockingConnection:
    container = Container()
    container.container_id = container_id or f"chaos-amqp-{next(_ids)}"
    kwargs = {}
    if login is not None:
        kwargs = {"user": login[0], "password": login[1], "allowed_mechs": "PLAIN"}
    try:
        return BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=15, container=container, **kwargs)
    except Exception as exc:  # noqa: BLE001 - refused, reset, timed out: a channel failure
        raise ChannelError(f"cannot connect: {exc!r}") from None


def _abort(conn: BlockingConnection) -> None:
    """Drop the connection at once (a TCP reset), nothing said."""
    endpoint = getattr(conn, "conn", None)  # None once closed
    selectable = getattr(getattr(endpoint, "transport", None), "_selectable", None)
    sock = getattr(selectable, "_delegate", None)
    if isinstance(sock, socket.socket):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        except OSError:
            pass
    _close(conn)


def _close(conn: BlockingConnection) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - the connection is going away anyway
        pass


class _Transactions:
    """Local transactions through the coordinator link: declare, then discharge."""

    def __init__(self, conn: BlockingConnection) -> None:
        self.conn = conn
        self.ctrl = conn.create_sender(None, name=f"txn-{next(_ids)}", options=_Coordinator())

    def _control(self, body: Described) -> Delivery:
        delivery = self.ctrl.link.send(Message(body=body))
        self.conn.wait(lambda: delivery.remote_state != 0 or delivery.settled, timeout=TIMEOUT,
                       msg="the coordinator's outcome")
        return delivery

    def declare(self) -> bytes:
        d = self._control(Described(DECLARE, [None]))
        if not d.remote.data:
            raise ChannelError(f"declare refused: {d.remote.condition}")
        return d.remote.data[0]

    def discharge(self, txn: bytes, fail: bool = False) -> None:
        d = self._control(Described(DISCHARGE, [txn, fail]))
        if d.remote_state != Delivery.ACCEPTED:
            raise ChannelError(f"discharge {'rollback' if fail else 'commit'} refused: "
                               f"{d.remote.condition or d.remote_state}")


def _check(conn: BlockingConnection, deliveries: list[Delivery], what: str) -> None:
    try:
        conn.wait(lambda: all(d.remote_state != 0 for d in deliveries), timeout=TIMEOUT, msg=what)
    except Exception as exc:  # noqa: BLE001 - timeout, connection lost
        raise ChannelError(f"no {what}: {exc!r}") from None
    refused = [d for d in deliveries if d.remote_state not in (Delivery.ACCEPTED, TRANSACTIONAL_STATE)]
    if refused:
        d = refused[0]
        raise ChannelError(f"{len(refused)} refused: {d.remote.condition or d.remote_state}")


class amqp_producer:
    def __init__(self, port: int, destination: str, transacted: bool, confirmed, *,
                 login: tuple[str, str] | None = None) -> None:
        self.conn = _connect(port, login, None)
        self.confirmed = confirmed
        try:
            self.sender = self.conn.create_sender(address_of(destination))
            self.tx = _Transactions(self.conn) if transacted else None
        except ChannelError:
            raise
        except Exception as exc:  # noqa: BLE001
            _abort(self.conn)
            raise ChannelError(f"attach failed: {exc!r}") from None

    def send(self, batch: list[Spec]) -> None:
        try:
            self._send(batch)
        except ChannelError:
            raise
        except Exception as exc:  # noqa: BLE001 - proton's ConnectionException, LinkDetached, Timeout
            raise ChannelError(f"send failed: {exc!r}") from None

    def _send(self, batch: list[Spec]) -> None:
        txn = self.tx.declare() if self.tx is not None else None
        deliveries = []
        for spec in batch:
            properties = {}
            if spec.group is not None:
                properties["JMSXGroupID"] = spec.group
            if spec.duplicate_id is not None:
                properties["_AMQ_DUPL_ID"] = spec.duplicate_id
            annotations = {symbol("x-opt-delivery-delay"): spec.delay} if spec.delay is not None else None
            message = Message(body=spec.body, durable=spec.durable, properties=properties or None,
                              annotations=annotations)
            if spec.priority is not None:
                message.priority = spec.priority
            d = self.sender.link.send(message)
            if txn is not None:
                d.local.data = [txn]
                d.update(TRANSACTIONAL_STATE)
            deliveries.append(d)
        _check(self.conn, deliveries, "acceptance of the transfers")
        for d in deliveries:
            d.settle()
        if txn is not None:
            self.tx.discharge(txn)
        self.confirmed([s.mid for s in batch])

    def abort(self) -> None:
        _abort(self.conn)

    def close(self) -> None:
        _close(self.conn)


class amqp_consumer:
    """`mode`: auto (accepted as received), client and client-individual (accepted per batch),
    or transacted (accepted in a transaction, committed per batch). A durable subscription is
    the container id (`client_id`) and the link name (`subscription`)."""

    def __init__(self, port: int, destination: str, mode: str, *, client_id: str | None,
                 subscription: str | None, on_delivery, on_ack_confirmed,
                 login: tuple[str, str] | None = None) -> None:
        self.mode = mode
        self.on_delivery = on_delivery
        self.on_ack_confirmed = on_ack_confirmed
        self.conn = _connect(port, login, client_id)
        try:
            options = DurableSubscription() if subscription else None
            self.receiver = self.conn.create_receiver(address_of(destination), credit=100, name=subscription,
                                                      options=options)
            self.tx = _Transactions(self.conn) if mode == "transacted" else None
        except Exception as exc:  # noqa: BLE001
            _abort(self.conn)
            raise ChannelError(f"attach failed: {exc!r}") from None

    def receive(self, timeout: float) -> ChaosDelivery | None:
        fetcher = self.receiver.fetcher
        try:
            if not self.receiver.link.credit:
                self.receiver.link.flow(1)
            self.conn.wait(lambda: fetcher.has_message, timeout=timeout, msg="a message")
        except Exception as exc:  # noqa: BLE001 - Timeout, or the link or connection gone
            if type(exc).__name__ == "Timeout":
                return None
            raise ChannelError(f"receive failed: {exc!r}") from None
        message, delivery = fetcher.incoming.popleft()  # (not left in the fetcher's unsettled list)
        d = ChaosDelivery(body_mid(bytes(message.body)), bool(message.delivery_count), delivery)
        self.on_delivery(d)
        if self.mode == "auto":
            self._settle([d])
        return d

    def _settle(self, batch: list[ChaosDelivery], txn: bytes | None = None) -> None:
        for d in batch:
            delivery: Delivery = d.handle
            if txn is not None:
                delivery.local.data = [txn, Described(ulong(Delivery.ACCEPTED), [])]  # transactional-state(accepted)
                delivery.update(TRANSACTIONAL_STATE)
            else:
                delivery.update(Delivery.ACCEPTED)
            delivery.settle()

    def ack(self, batch: list[ChaosDelivery], sent) -> None:
        if self.mode == "auto" or not batch:
            return
        try:
            if self.mode == "transacted":
                txn = self.tx.declare()
                self._settle(batch, txn)
                sent(batch)
                self.tx.discharge(txn)
                self.on_ack_confirmed(batch)
            else:
                sent(batch)
                self._settle(batch)
                self.conn.wait(lambda: True, timeout=TIMEOUT)  # the dispositions go out
        except ChannelError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ChannelError(f"ack failed: {exc!r}") from None

    def abort(self) -> None:
        _abort(self.conn)

    def close(self) -> None:
        _close(self.conn)
