"""A small blocking STOMP 1.2 client for the CLI tools, on Petrel's own sans-IO codec.

Its shape is that of the synchronous CORE client (`petrel.client.Connection`), so the
tools drive either protocol through the same calls::

    client = StompClient("tcp://127.0.0.1:61616", user="guest", password="guest")
    session = client.session(transacted=False)
    session.producer("queue://TEST").send(Message(b"hello"))
    session.flush()                              # every persistent send has its receipt
    message = session.consumer("queue://TEST").receive(timeout=3)
    client.close()

Everything happens in the caller's thread: writes are coalesced up to ``coalesce`` bytes
and go out before any wait; reads happen while waiting for a receipt or a message.
Persistent sends ask for a receipt each (the broker writes it after its disk sync) and at
most ``window`` are outstanding; non-persistent ones ask for one every ``window`` sends.
Consumers use ``ack: client`` with a prefetch of ``window`` messages and acknowledge
cumulatively every half window (and on close); in a transacted session the last message
taken is acknowledged inside the transaction at commit.

Errors are the CORE client's classes: `ConnectionFailed` (cannot connect), `RequestFailed`
(the broker answered ERROR), `ConnectionClosed` (the connection went away).
"""

from __future__ import annotations

import itertools
import socket
import ssl
import time
from collections import deque
from typing import Any

from petrel.client.errors import ClientError, ConnectionClosed, ConnectionFailed, RequestFailed
from petrel.client.message import Message
from petrel.client.tls import client_context, handshake_error
from petrel.client.url import Endpoint, parse_endpoint, parse_url
from petrel.codec.errors import LocalProtocolError, RemoteProtocolError
from petrel.codec.stomp import NEED_DATA, Frame, Role, StompConnection

__all__ = ["StompClient", "StompSession", "StompProducer", "StompConsumer", "stomp_destination"]

DEFAULT_WINDOW = 1000
READ_SIZE = 256 * 1024
# MESSAGE headers that are the frame's own, not message properties.
MESSAGE_HEADERS = frozenset(
    {"subscription", "message-id", "destination", "persistent", "priority", "expires", "timestamp",
     "redelivered", "ack", "content-length"}
)


def stomp_destination(destination: str) -> str:
    """``queue://X`` -> ``/queue/X``, ``topic://X`` -> ``/topic/X``; anything else as given."""
    if destination.startswith("queue://"):
        return "/queue/" + destination[8:]
    if destination.startswith("topic://"):
        return "/topic/" + destination[8:]
    return destination


def parse_stomp_url(url: str) -> Endpoint:
    """``tcp://host:port``, ``ssl://host:port`` or ``stomp://host:port`` (failover URLs are a CORE
    client feature)."""
    text = url.strip()
    if text.startswith("failover:"):
        raise ValueError(f"STOMP takes a single tcp://host:port URL, not {url!r}")
    if text.startswith("stomp://"):
        text = "tcp://" + text[len("stomp://") :]
    return parse_endpoint(text)


class StompClient:
    """One STOMP connection, used from one thread at a time."""

    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        client_id: str | None = None,
        connect_timeout: float = 10.0,
        receipt_timeout: float = 30.0,
        window: int = DEFAULT_WINDOW,
        coalesce: int = 64 * 1024,
    ) -> None:
        self.endpoint = parse_stomp_url(url)
        self.client_id = client_id
        self.receipt_timeout = receipt_timeout
        self.window = max(int(window), 1)
        self.coalesce = coalesce
        self._codec = StompConnection(Role.CLIENT)
        self._out: list[bytes] = []
        self._out_size = 0
        self._pending: set[str] = set()  # receipt ids not yet received
        self._receipt_ids = itertools.count(1)
        self._names = itertools.count(1)  # subscription and transaction names
        self._subscriptions: dict[str, StompConsumer] = {}
        self._failure: ClientError | None = None
        self._closed = False
        tls = client_context(parse_url(url).options) if self.endpoint.tls else None  # ssl:// (petrel.client.tls)
        try:
            self._sock = socket.create_connection((self.endpoint.host, self.endpoint.port), timeout=connect_timeout)
            if tls is not None:
                self._sock = tls.wrap_socket(self._sock, server_hostname=self.endpoint.host)
        except ssl.SSLError as exc:
            raise handshake_error(exc, self.endpoint) from None
        except OSError as exc:
            reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
            raise ConnectionFailed(f"could not connect to {self.endpoint}: {reason}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        headers = {"accept-version": "1.2", "host": self.endpoint.host, "heart-beat": "0,0"}
        if user is not None:
            headers["login"] = user
        if password is not None:
            headers["passcode"] = password
        if client_id:
            headers["client-id"] = client_id
        self._connected: Frame | None = None
        try:
            self._sock.sendall(self._codec.send(Frame("CONNECT", headers)))
            deadline = time.monotonic() + connect_timeout
            while self._connected is None:
                if not self._pump(deadline):
                    raise ConnectionFailed(f"{self.endpoint} did not answer CONNECT within {connect_timeout:g}s")
        except RequestFailed as exc:
            self._abort()
            raise ConnectionFailed(f"{self.endpoint} refused the connection: {exc}") from None
        except ConnectionClosed as exc:
            self._abort()
            raise ConnectionFailed(f"{self.endpoint} closed the connection during CONNECT ({exc})") from None
        except BaseException:
            self._abort()
            raise
        self.server = self._connected.headers.get("server", "")

    # -- properties shared with the CORE client ---------------------------------------------------

    @property
    def connected(self) -> bool:
        return not self._closed and self._failure is None

    def session(self, *, transacted: bool = False) -> StompSession:
        self._check()
        return StompSession(self, transacted)

    # -- I/O ----------------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise ConnectionClosed("the STOMP connection is closed")

    def _write(self, frame: Frame) -> None:
        self._check()
        try:
            data = self._codec.send(frame)
        except LocalProtocolError as exc:
            raise ValueError(f"cannot send this {frame.command} frame: {exc}") from None
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= self.coalesce:
            self._flush_out()

    def _flush_out(self) -> None:
        if not self._out:
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._out_size = 0
        try:
            self._sock.settimeout(self.receipt_timeout)
            self._sock.sendall(data)
        except OSError as exc:
            self._fail(ConnectionClosed(f"lost the connection to {self.endpoint}: {exc.strerror or exc}"))

    def _next_receipt(self) -> str:
        receipt = str(next(self._receipt_ids))
        self._pending.add(receipt)
        return receipt

    def _pump(self, deadline: float | None) -> bool:
        """Read once (until ``deadline``, None: forever) and handle what arrived; False on timeout."""
        self._flush_out()
        self._check()
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            return False
        try:
            self._sock.settimeout(timeout)
            data = self._sock.recv(READ_SIZE)
        except (TimeoutError, socket.timeout):
            return False
        except OSError as exc:
            self._fail(ConnectionClosed(f"lost the connection to {self.endpoint}: {exc.strerror or exc}"))
        if not data:
            self._fail(ConnectionClosed(f"{self.endpoint} closed the connection"))
        codec = self._codec
        try:
            codec.receive_data(data)
            while (event := codec.next_event()) is not NEED_DATA:
                if isinstance(event, Frame):
                    self._on_frame(event)
        except RemoteProtocolError as exc:
            self._fail(ConnectionClosed(f"{self.endpoint} broke the STOMP protocol: {exc}"))
        return True

    def _on_frame(self, frame: Frame) -> None:
        command = frame.command
        if command == "MESSAGE":
            consumer = self._subscriptions.get(frame.headers.get("subscription", ""))
            if consumer is not None:
                consumer._items.append(frame)
        elif command == "RECEIPT":
            self._pending.discard(frame.headers.get("receipt-id", ""))
        elif command == "CONNECTED":
            self._connected = frame
        elif command == "ERROR":
            text = frame.headers.get("message") or frame.body.decode(errors="replace").strip() or "ERROR"
            self._fail(RequestFailed(" ".join(text.split())))

    def _fail(self, error: ClientError) -> None:
        """The connection is unusable from now on: remember why, close the socket, raise."""
        if self._failure is None:
            self._failure = error
        self._abort()
        raise self._failure

    def _abort(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        except (OSError, AttributeError):
            pass

    def _wait_receipts(self, at_most: int, receipt: str | None = None) -> None:
        """Read until at most ``at_most`` receipts are outstanding (and ``receipt`` has come)."""
        deadline = time.monotonic() + self.receipt_timeout
        pending = self._pending
        while len(pending) > at_most or (receipt is not None and receipt in pending):
            if not self._pump(deadline):
                self._fail(ConnectionClosed(
                    f"no receipt from {self.endpoint} within {self.receipt_timeout:g}s ({len(pending)} outstanding)"))

    def _request(self, command: str, headers: dict[str, str]) -> None:
        """Send a frame with a receipt and wait for that receipt."""
        receipt = self._next_receipt()
        self._write(Frame(command, {**headers, "receipt": receipt}))
        self._wait_receipts(len(self._pending), receipt)

    def _new_name(self, prefix: str) -> str:
        return f"{prefix}-{next(self._names)}"

    # -- closing ------------------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Acknowledge what consumers took, wait for outstanding receipts, DISCONNECT."""
        if self._closed:
            return
        try:
            for consumer in list(self._subscriptions.values()):
                consumer._settle()
            self.receipt_timeout = min(self.receipt_timeout, timeout)
            self._request("DISCONNECT", {})
        except ClientError:
            pass
        finally:
            self._abort()

    def __enter__(self) -> StompClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<StompClient {'open' if self.connected else 'closed'} {self.endpoint}>"


class StompSession:
    """Sends and consumes; a transacted one runs a STOMP transaction from BEGIN to COMMIT."""

    def __init__(self, client: StompClient, transacted: bool) -> None:
        self.client = client
        self.transacted = transacted
        self._tx: str | None = None
        self._consumers: list[StompConsumer] = []
        self._unreceipted = 0
        if transacted:
            self._begin()

    def _begin(self) -> None:
        self._tx = self.client._new_name("tx")
        self.client._write(Frame("BEGIN", {"transaction": self._tx}))

    # -- sending -------------------------------------------------------------------------------------

    def producer(self, destination: str | None = None) -> StompProducer:
        self.client._check()
        return StompProducer(self, destination)

    def _send(self, destination: str, message: Message) -> None:
        client = self.client
        headers = {str(k): _header_value(v) for k, v in message.properties.items()} if message.properties else {}
        headers["destination"] = stomp_destination(destination)
        if message.durable:
            headers["persistent"] = "true"
        if message.priority != 4:
            headers["priority"] = str(message.priority)
        if message.expiration:
            headers["expires"] = str(message.expiration)
        if self._tx is not None:
            headers["transaction"] = self._tx
        else:
            self._unreceipted += 1
            if message.durable or self._unreceipted >= client.window:
                headers["receipt"] = client._next_receipt()
                self._unreceipted = 0
        client._write(Frame("SEND", headers, message.body))
        if len(client._pending) >= client.window:
            client._wait_receipts(client.window // 2)

    def flush(self) -> None:
        """Wait until the broker has taken every message sent so far (persistent ones: on disk)."""
        client = self.client
        if self._unreceipted and self._tx is None:
            # A throw-away transaction is a barrier: its receipt follows the sends before it.
            barrier = client._new_name("barrier")
            client._write(Frame("BEGIN", {"transaction": barrier}))
            client._request("ABORT", {"transaction": barrier})
            self._unreceipted = 0
        client._wait_receipts(0)

    # -- consuming -----------------------------------------------------------------------------------

    def consumer(self, destination: str, *, filter: str | None = None, subscription: str | None = None,
                 window: int | None = None) -> StompConsumer:
        """Subscribe to ``queue://X`` or ``topic://X`` (durable when ``subscription`` names it)."""
        client = self.client
        prefetch = max(int(window if window else client.window), 1)
        sub_id = client._new_name("sub")
        headers = {"destination": stomp_destination(destination), "id": sub_id, "ack": "client",
                   "activemq.prefetchSize": str(prefetch)}
        if filter:
            headers["selector"] = filter
        if subscription:
            headers["durable-subscription-name"] = subscription
            if client.client_id:
                headers["client-id"] = client.client_id
        consumer = StompConsumer(self, sub_id, destination, prefetch)
        client._subscriptions[sub_id] = consumer
        try:
            client._request("SUBSCRIBE", headers)
        except BaseException:
            client._subscriptions.pop(sub_id, None)
            raise
        self._consumers.append(consumer)
        return consumer

    def browser(self, queue: str, *, filter: str | None = None, batch: int = 100):
        raise ClientError("STOMP has no way to browse a queue without consuming it: use --protocol core")

    # -- transactions ---------------------------------------------------------------------------------

    def commit(self) -> None:
        if self._tx is None:
            raise ClientError("commit needs a transacted session")
        for consumer in self._consumers:
            consumer._settle()
        self.client._request("COMMIT", {"transaction": self._tx})
        self._begin()

    def rollback(self) -> None:
        """Abort the transaction: its sends are dropped (messages taken stay with this consumer
        until it closes, then the broker redelivers them)."""
        if self._tx is None:
            raise ClientError("rollback needs a transacted session")
        for consumer in self._consumers:
            consumer._forget()
        self.client._request("ABORT", {"transaction": self._tx})
        self._begin()

    def close(self) -> None:
        client = self.client
        if not client.connected:
            return
        for consumer in list(self._consumers):
            consumer.close()
        if self._tx is not None:
            client._request("ABORT", {"transaction": self._tx})
            self._tx = None
        else:
            self.flush()

    def __enter__(self) -> StompSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StompProducer:
    def __init__(self, session: StompSession, destination: str | None) -> None:
        self.session = session
        self.destination = destination

    def send(self, message: Message | bytes | str, *, destination: str | None = None, **fields: Any) -> None:
        dest = destination or self.destination
        if dest is None:
            raise ValueError("this producer has no destination: pass destination=...")
        if not isinstance(message, Message):
            message = Message(message, **fields)
        elif fields:
            raise TypeError("pass message fields either in the Message or as arguments, not both")
        self.session._send(dest, message)

    def flush(self) -> None:
        self.session.flush()


class StompConsumer:
    """``receive(timeout)`` returns a `Message` (auto-acknowledged in batches) or None."""

    def __init__(self, session: StompSession, sub_id: str, destination: str, prefetch: int) -> None:
        self.session = session
        self.id = sub_id
        self.destination = destination
        self._items: deque[Frame] = deque()
        self._ack_every = max(prefetch // 2, 1)
        self._last_ack: str | None = None  # ack id of the last message taken, not yet acknowledged
        self._taken = 0
        self._closed = False

    @property
    def queue(self) -> str:
        return self.destination

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after ``timeout`` seconds (None: wait forever)."""
        items = self._items
        if not items:
            if self._closed:
                return None
            client = self.session.client
            deadline = None if timeout is None else time.monotonic() + timeout
            while not items:
                if not client._pump(deadline):
                    return None
        frame = items.popleft()
        headers = frame.headers
        self._last_ack = headers.get("ack") or headers.get("message-id")
        self._taken += 1
        if self._taken >= self._ack_every and self.session._tx is None:
            self._settle()
        return _message(frame)

    def receive_no_wait(self) -> Message | None:
        return self.receive(0)

    def _settle(self) -> None:
        """Acknowledge (cumulatively) everything taken so far; inside the transaction if any."""
        if self._last_ack is None:
            return
        headers = {"id": self._last_ack}
        if self.session._tx is not None:
            headers["transaction"] = self.session._tx
        self._last_ack = None
        self._taken = 0
        client = self.session.client
        client._write(Frame("ACK", headers))
        client._flush_out()  # the broker's window for us opens only when it has the ack

    def _forget(self) -> None:
        self._last_ack = None
        self._taken = 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        client = self.session.client
        if client.connected:
            if self.session._tx is None:
                self._settle()
            client._request("UNSUBSCRIBE", {"id": self.id})
        client._subscriptions.pop(self.id, None)
        if self in self.session._consumers:
            self.session._consumers.remove(self)
        self._items.clear()

    def __enter__(self) -> StompConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _header_value(value: object) -> str:
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


def _message(frame: Frame) -> Message:
    headers = frame.headers
    properties = {k: v for k, v in headers.items() if k not in MESSAGE_HEADERS}
    try:
        priority = min(max(int(headers.get("priority", "4")), 0), 9)
    except ValueError:
        priority = 4
    message = Message(frame.body, properties, durable=headers.get("persistent") == "true", priority=priority)
    message.message_id = headers.get("message-id", "")  # type: ignore[assignment]
    message.address = headers.get("destination", "")
    message.delivery_count = 1 if headers.get("redelivered") == "true" else 0
    message.timestamp = _int(headers.get("timestamp"))
    message.expiration = _int(headers.get("expires"))
    return message


def _int(text: str | None) -> int:
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        return 0
