"""The chaos run's OpenWire channels: real JMS clients (ActiveMQ Classic's activemq-client.jar)
behind the interface of `channels`.

Every channel is a JMS connection in one Java process (``ChaosJms.java`` beside this file,
compiled with `javac` on first use, then started once per harness process), which speaks a
line protocol on its stdin and stdout: so the JVM starts once, not per client or message. The
connections use ``failover:(...)`` URLs naming the worker's node first, then the others the
clients may go to (a pair's backup, a cluster's other nodes; a durable subscriber stays with
its own node, where its subscription lives). Sends are synchronous (``alwaysSyncSend``), so a
batch returns once the broker answered every send or the commit; acknowledgements are too
(``sendAcksAsync=false``), so a client-ack, individual-ack or transacted consumer's
acknowledgements are confirmed by the broker's response. ``auto`` acknowledges as JMS does,
after each receive, unanswered (only ever *sent* in the ledger).

Failover: the client's transport reconnects by itself and replays what had no response. A
broker deduplicates a failover client's replayed send by its message id, but only the broker
that had the first copy knows that id: a send replayed on *another* node of a cluster may be
there twice, as ActiveMQ's own network of brokers allows. Such sends are reported RESENT and
counted by the ledger as allowed repeats (`Ledger.may_repeat`), only in the cluster topology;
anywhere else a copy is a DUPLICATE. An acknowledgement with a failover since its deliveries
is refused (in doubt) by the Java side, as the client's delivered list was reset.
"""

from __future__ import annotations

import atexit
import hashlib
import queue
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from petrel.testing.chaos.channels import ChannelError, Delivery, Spec

__all__ = ["OpenWireTarget", "java_missing", "openwire_consumer", "openwire_producer", "start_jvm"]

JAVA_DIR = Path("/usr/share/java")
JARS = ("activemq-client.jar", "geronimo-jms_1.1_spec.jar", "hawtbuf.jar", "slf4j-api.jar", "slf4j-nop.jar",
        "geronimo-j2ee-management-1.1-spec.jar")
SOURCE = Path(__file__).with_name("ChaosJms.java")
TIMEOUT = 60.0  # seconds for an answer (a longer wait is reported as a hang)
FAILOVER = "randomize=false&initialReconnectDelay=50&maxReconnectDelay=500"
_ids = count()


def java_missing() -> str | None:
    """Why the OpenWire channels cannot run here, or None."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"no {tool}: install a JDK (Debian: openjdk-17-jdk-headless) for the OpenWire chaos runs"
    missing = [jar for jar in JARS if not (JAVA_DIR / jar).exists()]
    if missing:
        return (f"missing {', '.join(missing)} in {JAVA_DIR}: install Debian's libactivemq-java and "
                "libgeronimo-jms-1.1-spec-java for the OpenWire chaos runs")
    return None


@dataclass(frozen=True)
class OpenWireTarget:
    """Where a channel connects: ports in failover order; `repeats`: a send replayed after a
    failover may have a copy on another node (the cluster topology)."""

    ports: tuple[int, ...]
    repeats: bool = False
    anchored: bool = False  # the first port only, and no cluster members learned from the broker

    def url(self) -> str:
        ports = self.ports[:1] if self.anchored else tuple(dict.fromkeys(self.ports))
        uris = ",".join(f"tcp://127.0.0.1:{p}" for p in ports)
        extra = "&updateURIsSupported=false" if self.anchored else ""
        return f"failover:({uris})?{FAILOVER}{extra}"


class _Jvm:
    """The one Java process of the harness: requests written, answers matched by (channel, seq)."""

    def __init__(self) -> None:
        missing = java_missing()
        if missing:
            raise RuntimeError(missing)
        classes = Path(tempfile.gettempdir()) / f"petrel-chaos-jms-{hashlib.sha1(SOURCE.read_bytes()).hexdigest()[:12]}"
        classpath = ":".join([str(classes), *(str(JAVA_DIR / jar) for jar in JARS)])
        if not (classes / "ChaosJms.class").exists():
            build = Path(tempfile.mkdtemp(prefix="petrel-chaos-javac-"))
            proc = subprocess.run(["javac", "-d", str(build), "-cp", classpath, str(SOURCE)],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"javac ChaosJms.java failed:\n{proc.stdout}{proc.stderr}")
            try:
                build.rename(classes)
            except OSError:  # another process compiled it meanwhile
                shutil.rmtree(build, ignore_errors=True)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(["java", "-Xss512k", "-cp", classpath, "ChaosJms"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.lock = threading.Lock()
        self.waiting: dict[tuple[str, str], queue.Queue] = {}
        self.listeners: dict[str, object] = {}  # channel -> what it says unasked (its failovers)
        self.reader = threading.Thread(target=self._read, name="chaos-jms-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) < 3:
                continue
            with self.lock:
                box = self.waiting.pop((parts[0], parts[1]), None)
                listener = self.listeners.get(parts[0]) if parts[1] == "*" else None
            if box is not None:
                box.put(parts[2])
            elif listener is not None:
                listener(parts[2])
        with self.lock:
            boxes, self.waiting = list(self.waiting.values()), {}
        for box in boxes:
            box.put(None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, channel: str, request: str, timeout: float = TIMEOUT) -> str:
        """Send one request; its answer's text after OK (raises ChannelError on ERR or no answer)."""
        seq = str(next(_ids))
        box: queue.Queue = queue.Queue(1)
        with self.lock:
            self.waiting[(channel, seq)] = box
            try:
                self.proc.stdin.write(f"{channel} {seq} {request}\n")
                self.proc.stdin.flush()
            except (OSError, ValueError) as exc:
                self.waiting.pop((channel, seq), None)
                raise ChannelError(f"the JMS process is gone: {exc!r}") from None
        try:
            answer = box.get(timeout=timeout)
        except queue.Empty:
            with self.lock:
                self.waiting.pop((channel, seq), None)
            raise ChannelError(f"no answer to {request.split(' ', 1)[0]} within {timeout:.0f}s") from None
        if answer is None:
            raise ChannelError("the JMS process exited")
        if answer.startswith("ERR"):
            raise ChannelError(answer[4:])
        return answer[3:]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except Exception:  # noqa: BLE001
            self.proc.kill()
            self.proc.wait(10)


_jvm: _Jvm | None = None
_jvm_lock = threading.Lock()


def start_jvm() -> None:
    """Compile and start the JMS process now (a RuntimeError says why it cannot run)."""
    _the_jvm()


def _the_jvm() -> _Jvm:
    global _jvm
    with _jvm_lock:
        if _jvm is None or not _jvm.alive():
            _jvm = _Jvm()
            atexit.register(_jvm.close)
        return _jvm


class _Channel:
    def __init__(self, target: OpenWireTarget, role: str, destination: str, mode: str, client_id: str | None,
                 subscription: str | None, login: tuple[str, str] | None, note=None) -> None:
        self.jvm = _the_jvm()
        self.id = f"c{next(_ids)}"
        if note is not None:  # (the worker's timeline, with its name)
            with self.jvm.lock:
                self.jvm.listeners[self.id] = note
        user, password = login if login is not None else ("-", "-")
        try:
            self.jvm.call(self.id, f"OPEN {role} {target.url()} {destination} {mode} {client_id or '-'} "
                                   f"{subscription or '-'} {user} {password}")
        except ChannelError as exc:
            self.abort()
            raise ChannelError(f"cannot connect: {exc}") from None

    def _end(self, verb: str, timeout: float) -> bool:
        """ABORT or CLOSE (its failovers no longer noted); whether it was answered OK."""
        with self.jvm.lock:
            self.jvm.listeners.pop(self.id, None)
        try:
            self.jvm.call(self.id, verb, timeout=timeout)
        except ChannelError:
            return False
        return True

    def abort(self) -> None:
        self._end("ABORT", 15)

    def close(self) -> None:
        if not self._end("CLOSE", 20):
            self.abort()


class openwire_producer(_Channel):
    def __init__(self, target: OpenWireTarget, destination: str, transacted: bool, confirmed, *,
                 login: tuple[str, str] | None = None, may_repeat=None, note=None) -> None:
        super().__init__(target, "P", destination, "transacted" if transacted else "auto", None, None, login, note)
        self.confirmed = confirmed
        self.may_repeat = may_repeat if target.repeats else None
        self.note = note

    def send(self, batch: list[Spec]) -> None:
        specs = ";".join(f"{s.mid},{len(s.body)},{int(s.durable)},{'-' if s.priority is None else s.priority},"
                         f"{s.group or '-'},{s.duplicate_id or '-'}" for s in batch)  # (no delay: not over OpenWire)
        answer = self.jvm.call(self.id, f"SEND {specs}")
        mids = [s.mid for s in batch]
        if answer == "RESENT":
            if self.note is not None:
                self.note(f"a batch of {len(batch)} confirmed across a failover (replayed by the transport)")
            if self.may_repeat is not None:
                self.may_repeat(mids)
        self.confirmed(mids)


class openwire_consumer(_Channel):
    """`mode`: auto, client (the last of a batch acknowledged, and so all of it), client-individual
    (ActiveMQ's INDIVIDUAL_ACKNOWLEDGE, each one) or transacted (the session committed per batch)."""

    def __init__(self, target: OpenWireTarget, destination: str, mode: str, *, client_id: str | None,
                 subscription: str | None, on_delivery, on_ack_confirmed,
                 login: tuple[str, str] | None = None, note=None) -> None:
        super().__init__(target, "C", destination, mode, client_id, subscription, login, note)
        self.mode = mode
        self.on_delivery = on_delivery
        self.on_ack_confirmed = on_ack_confirmed

    def receive(self, timeout: float) -> Delivery | None:
        answer = self.jvm.call(self.id, f"RECV {int(timeout * 1000)}", timeout=timeout + TIMEOUT)
        if answer == "NONE":
            return None
        _, mid, redelivered = answer.split(" ")
        d = Delivery(mid, redelivered == "1", None)
        self.on_delivery(d)
        return d

    def ack(self, batch: list[Delivery], sent) -> None:
        if self.mode == "auto" or not batch:
            return
        sent(batch)
        self.jvm.call(self.id, "ACK")
        self.on_ack_confirmed(batch)
