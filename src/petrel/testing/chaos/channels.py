"""One client connection of a chaos run, over STOMP (stomp.py) or CORE (petrel.client), behind
the same small interface, so the producers and consumers of `workload` are protocol-neutral.

A producer channel sends a batch and returns once the batch is confirmed (receipts, the send
confirmations or the commit); a consumer channel hands out deliveries and acknowledges a batch,
returning once the acknowledgement is confirmed. Any failure raises: the caller records what is
in doubt and connects again.
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
from dataclasses import dataclass
from itertools import count

import stomp

from petrel.client import Connection, Message

__all__ = ["ChannelError", "Delivery", "Spec", "core_consumer", "core_producer", "stomp_consumer",
           "stomp_producer"]

CONFIRM_TIMEOUT = 60.0  # a receipt later than this is reported as a hang
ABORT_TIMEOUT = 10.0  # how long an abort waits for stomp.py's receiver thread to let go of the socket
_ids = count()


class ChannelError(Exception):
    """The connection failed, the broker refused, or a confirmation did not come in time."""


@dataclass(frozen=True)
class Spec:
    """One message to send."""

    mid: str
    body: bytes
    durable: bool
    priority: int | None = None
    delay: int | None = None  # ms
    group: str | None = None
    duplicate_id: str | None = None


@dataclass
class Delivery:
    mid: str
    redelivered: bool
    handle: object  # the protocol's message (STOMP ack id / CORE Message)


def body_mid(body: bytes | str) -> str:
    if isinstance(body, str):
        body = body.encode()
    return body.split(b"|", 1)[0].decode()


# -- STOMP ------------------------------------------------------------------------------------------


class _StompListener(stomp.ConnectionListener):
    def __init__(self, on_receipt=None, on_message=None) -> None:
        self.cond = threading.Condition()
        self.receipts: set[str] = set()
        self.error: str | None = None
        self.closed = False
        self.connected = False
        self._on_receipt = on_receipt
        self._on_message = on_message

    def on_connected(self, frame) -> None:
        with self.cond:
            self.connected = True
            self.cond.notify_all()

    def on_receipt(self, frame) -> None:
        rid = frame.headers.get("receipt-id")
        if self._on_receipt is not None:
            self._on_receipt(rid)
        with self.cond:
            self.receipts.add(rid)
            self.cond.notify_all()

    def on_error(self, frame) -> None:
        with self.cond:
            self.error = frame.headers.get("message", "") + " " + (frame.body or "")[:200]
            self.cond.notify_all()

    def on_disconnected(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def on_message(self, frame) -> None:
        if self._on_message is not None:
            self._on_message(frame)

    def wait(self, predicate, timeout: float, what: str) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: predicate() or self.error or self.closed, timeout)
            if predicate():
                return
            if self.error:
                raise ChannelError(f"STOMP ERROR: {self.error.strip()}")
            if self.closed:
                raise ChannelError(f"connection lost waiting for {what}")
            if not ok:
                raise ChannelError(f"no {what} within {timeout:.0f}s")


class _Stomp:
    def __init__(self, port: int, listener: _StompListener, client_id: str | None = None,
                 login: tuple[str, str] = ("guest", "guest")) -> None:
        self.listener = listener
        self.conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), reconnect_attempts_max=1,
                                       timeout=10)
        self.conn.set_listener("chaos", listener)
        try:
            self.conn.connect(*login, wait=False,
                              headers={"client-id": client_id} if client_id else {})
        except (stomp.exception.StompException, OSError) as exc:  # OSError: accepted, then reset
            raise ChannelError(f"cannot connect: {exc!r}") from None
        listener.wait(lambda: listener.connected, 15, "CONNECTED")

    def abort(self) -> None:
        """Drop the connection at once (a TCP reset), nothing acknowledged or said.

        stomp.py's receiver thread sits in a blocking recv() on the socket. On Linux, closing
        the descriptor does not wake that recv, and the socket lives on (still ESTABLISHED,
        no RST, no FIN) for as long as the recv holds it: until the broker happens to write
        again, which an idle consumer's broker never does. The broker then keeps the
        consumer, and its unacknowledged messages, to the next restart. So shut the reading
        side down first: the recv returns at once, and the last close sends the reset."""
        sock = getattr(self.conn.transport, "socket", None)
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RD)  # wakes the receiver thread; sends nothing yet
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        self.close(graceful=False)
        if sock is not None:  # the receiver thread has left recv(), releasing the socket, once it reports
            with self.listener.cond:
                self.listener.cond.wait_for(lambda: self.listener.closed, ABORT_TIMEOUT)

    def close(self, graceful: bool = True) -> None:
        try:
            if graceful and self.conn.is_connected():
                rid = f"bye-{next(_ids)}"
                self.conn.disconnect(receipt=rid)
            else:
                self.conn.transport.stop()
        except Exception:  # noqa: BLE001 - the connection is going away anyway
            pass


class stomp_producer:
    def __init__(self, port: int, destination: str, transacted: bool, confirmed, *,
                 login: tuple[str, str] = ("guest", "guest")) -> None:
        self.pending: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        self.confirmed = confirmed
        self.listener = _StompListener(on_receipt=self._receipt)
        self.s = _Stomp(port, self.listener, login=login)
        self.destination = destination
        self.transacted = transacted

    def _receipt(self, rid: str) -> None:
        with self.lock:
            mids = self.pending.pop(rid, None)
        if mids:
            self.confirmed(mids)

    def send(self, batch: list[Spec]) -> None:
        try:
            self._send(batch)
        except (stomp.exception.StompException, OSError) as exc:
            raise ChannelError(f"send failed: {exc!r}") from None

    def _send(self, batch: list[Spec]) -> None:
        conn, rids = self.s.conn, []
        tx = f"tx-{next(_ids)}" if self.transacted else None
        if tx:
            conn.begin(transaction=tx)
        for spec in batch:
            headers = {"persistent": "true" if spec.durable else "false"}
            if spec.priority is not None:
                headers["priority"] = str(spec.priority)
            if spec.delay is not None:
                headers["AMQ_SCHEDULED_DELAY"] = str(spec.delay)
            if spec.group is not None:
                headers["JMSXGroupID"] = spec.group
            if spec.duplicate_id is not None:
                headers["_AMQ_DUPL_ID"] = spec.duplicate_id
            if tx:
                headers["transaction"] = tx
            else:
                rid = f"r-{next(_ids)}"
                headers["receipt"] = rid
                with self.lock:
                    self.pending[rid] = [spec.mid]
                rids.append(rid)
            self._io(lambda: conn.send(self.destination, spec.body, headers=headers))
        if tx:
            rid = f"c-{next(_ids)}"
            with self.lock:
                self.pending[rid] = [s.mid for s in batch]
            rids.append(rid)
            self._io(lambda: conn.commit(transaction=tx, headers={"receipt": rid}))
        self.listener.wait(lambda: all(r in self.listener.receipts for r in rids), CONFIRM_TIMEOUT, "receipt")

    def _io(self, fn) -> None:
        if self.listener.error or self.listener.closed:
            self.listener.wait(lambda: False, 0, "send")
        try:
            fn()
        except (stomp.exception.StompException, OSError) as exc:
            raise ChannelError(f"send failed: {exc!r}") from None

    def abort(self) -> None:
        self.s.abort()

    def close(self) -> None:
        self.s.close()


class stomp_consumer:
    """`mode`: auto, client, client-individual or transacted (client-individual acks in a
    transaction). `on_delivery(Delivery)` runs in the receiving thread, in socket order."""

    def __init__(self, port: int, destination: str, mode: str, *, client_id: str | None,
                 subscription: str | None, on_delivery, on_ack_confirmed,
                 login: tuple[str, str] = ("guest", "guest")) -> None:
        self.mode = mode
        self.deliveries: queue.Queue = queue.Queue()
        self.acks: dict[str, list[Delivery]] = {}
        self.lock = threading.Lock()
        self.on_delivery = on_delivery
        self.on_ack_confirmed = on_ack_confirmed
        self.listener = _StompListener(on_receipt=self._receipt, on_message=self._message)
        self.s = _Stomp(port, self.listener, client_id, login)
        headers = {}
        if subscription:
            headers["durable-subscription-name"] = subscription
        ack = "client-individual" if mode == "transacted" else mode
        rid = f"sub-{next(_ids)}"
        try:
            self.s.conn.subscribe(destination, id="s", ack=ack, headers={**headers, "receipt": rid})
        except (stomp.exception.StompException, OSError) as exc:
            raise ChannelError(f"subscribe failed: {exc!r}") from None
        self.listener.wait(lambda: rid in self.listener.receipts, CONFIRM_TIMEOUT, "subscribe receipt")

    def _message(self, frame) -> None:
        d = Delivery(body_mid(frame.body), frame.headers.get("redelivered") == "true",
                     frame.headers.get("ack") or frame.headers.get("message-id"))
        self.on_delivery(d)
        self.deliveries.put(d)

    def _receipt(self, rid: str) -> None:
        with self.lock:
            batch = self.acks.pop(rid, None)
        if batch:
            self.on_ack_confirmed(batch)

    def receive(self, timeout: float) -> Delivery | None:
        try:
            return self.deliveries.get(timeout=timeout)
        except queue.Empty:
            if self.listener.error or self.listener.closed:
                self.listener.wait(lambda: False, 0, "a message")
            return None

    def ack(self, batch: list[Delivery], sent) -> None:
        """Acknowledge `batch` (call `sent(batch)` once the outcome is in doubt); returns once confirmed."""
        if self.mode == "auto" or not batch:
            return
        conn = self.s.conn
        rid = f"a-{next(_ids)}"
        with self.lock:
            self.acks[rid] = list(batch)
        try:
            if self.mode == "client":
                sent(batch)
                conn.ack(batch[-1].handle, receipt=rid)
            elif self.mode == "client-individual":
                sent(batch)
                for d in batch[:-1]:
                    conn.ack(d.handle)
                conn.ack(batch[-1].handle, receipt=rid)
            else:
                tx = f"tx-{next(_ids)}"
                conn.begin(transaction=tx)
                for d in batch:
                    conn.ack(d.handle, transaction=tx)
                sent(batch)
                conn.commit(transaction=tx, headers={"receipt": rid})
        except (stomp.exception.StompException, OSError) as exc:
            raise ChannelError(f"ack failed: {exc!r}") from None
        self.listener.wait(lambda: rid in self.listener.receipts, CONFIRM_TIMEOUT, "ack receipt")

    def abort(self) -> None:
        self.s.abort()

    def close(self) -> None:
        self.s.close()


# -- CORE --------------------------------------------------------------------------------------------


def _core_call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every client failure is a channel failure here
        raise ChannelError(f"{type(exc).__name__}: {exc}") from None


def _core_abort(conn: Connection) -> None:
    def abort() -> None:
        t = conn.async_connection._transport
        if t is not None:
            t.abort()

    try:
        conn._runner.call(abort)
    except Exception:  # noqa: BLE001
        pass
    try:
        conn.close(timeout=2)
    except Exception:  # noqa: BLE001
        pass


class core_producer:
    def __init__(self, port: int, destination: str, transacted: bool, confirmed, *, login: dict | None = None) -> None:
        self.conn = _core_call(Connection, f"tcp://127.0.0.1:{port}", **(login or {}))
        self.session = _core_call(self.conn.session, transacted=transacted)
        self.producer = self.session.producer(destination)
        self.transacted = transacted
        self.confirmed = confirmed

    def send(self, batch: list[Spec]) -> None:
        for spec in batch:
            props = {"JMSXGroupID": spec.group} if spec.group is not None else None
            message = Message(spec.body, props, durable=spec.durable,
                              priority=4 if spec.priority is None else spec.priority,
                              delay=spec.delay, duplicate_id=spec.duplicate_id)
            _core_call(self.producer.send, message)
        _core_call(self.session.commit if self.transacted else self.session.flush)
        self.confirmed([s.mid for s in batch])

    def abort(self) -> None:
        _core_abort(self.conn)

    def close(self) -> None:
        try:
            self.conn.close(timeout=5)
        except Exception:  # noqa: BLE001
            pass


class core_consumer:
    def __init__(self, port: int, destination: str, mode: str, *, client_id: str | None,
                 subscription: str | None, on_delivery, on_ack_confirmed, login: dict | None = None) -> None:
        self.mode = mode
        self.on_delivery = on_delivery
        self.on_ack_confirmed = on_ack_confirmed
        self.conn = _core_call(Connection, f"tcp://127.0.0.1:{port}", client_id=client_id, **(login or {}))
        self.session = _core_call(self.conn.session, transacted=mode == "transacted")
        self.consumer = _core_call(self.session.consumer, destination, subscription=subscription,
                                   ack="auto" if mode == "auto" else "client")

    def receive(self, timeout: float) -> Delivery | None:
        m = _core_call(self.consumer.receive, timeout)
        if m is None:
            if not self.conn.connected:
                raise ChannelError("connection lost waiting for a message")
            return None
        d = Delivery(body_mid(m.body), m.delivery_count > 0, m)
        self.on_delivery(d)
        return d

    def ack(self, batch: list[Delivery], sent) -> None:
        if self.mode == "auto" or not batch:
            return
        last = batch[-1].handle
        if self.mode == "transacted":
            for d in batch:
                d.handle.ack()
            sent(batch)
            _core_call(self.session.commit)
        else:
            if self.mode == "client-individual":
                for d in batch[:-1]:
                    d.handle.ack()
            sent(batch)
            _core_call(self.session._run, self.consumer._async.ack(last, cumulative=self.mode == "client"))
        self.on_ack_confirmed(batch)

    def abort(self) -> None:
        _core_abort(self.conn)

    def close(self) -> None:
        try:
            self.consumer.close()
            self.conn.close(timeout=5)
        except Exception:  # noqa: BLE001
            pass
