"""OpenWire tight encoding and versions 10 to 12 with ActiveMQ's own code: the JMS client's
URL's ``wireFormat.tightEncodingEnabled=true`` (its default) and ``=false`` both work, and the
bytes between them, recorded by a proxy, show which encoding each connection spoke (every frame
after the WireFormatInfo decodes in it, the client's not in the other); ``wireFormat.version=10``
and ``11`` work; and the frames ActiveMQ's marshaller writes for every command, in both encodings
and each version, read back and write again byte for byte."""

from __future__ import annotations

import socket
import threading

import pytest

from jms import compile_program, run
from petrel.codec.openwire import NEED_DATA, Message, MessageDispatch, OpenWireConnection, OpenWireProtocolError, \
    WireFormatInfo, text_of
from petrel.codec.openwire.loose import decode_command, encode_command
from petrel.codec.openwire.tight import decode_tight, encode_tight
from petrel.testing.process import BrokerProcess

pytestmark = pytest.mark.system

N = 50


class Recorder:
    """A TCP proxy to `port` keeping what each side of each connection sent."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.streams: list[tuple[bytearray, bytearray]] = []  # (client's bytes, broker's bytes) a connection
        self.threads: list[threading.Thread] = []
        self._start(self._accept)

    def _start(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            broker = socket.create_connection(("127.0.0.1", self.upstream))
            sent, got = bytearray(), bytearray()
            self.streams.append((sent, got))
            self._start(self._pump, client, broker, sent)
            self._start(self._pump, broker, client, got)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, keep: bytearray) -> None:
        try:
            while data := src.recv(65536):
                keep += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()
        for t in self.threads:
            t.join(timeout=10)


def decode(data: bytes, tight: bool) -> list:
    """The commands of one side's recorded bytes, read by a codec that prefers `tight`."""
    codec = OpenWireConnection(tight_encoding=tight)
    codec.receive_data(data)
    out = []
    while (ev := codec.next_event()) is not NEED_DATA:
        out.append(ev)
    assert codec.buffered_bytes == 0
    return out


@pytest.mark.parametrize("tight", [True, False])
def test_the_jms_client_in_tight_and_loose_encoding(tmp_path, tight):
    classpath = compile_program("JmsQueueRoundTrip", tmp_path / "classes")
    broker = BrokerProcess(tmp_path / "b").start()
    proxy = Recorder(broker.port)
    try:
        url = f"tcp://127.0.0.1:{proxy.port}?wireFormat.tightEncodingEnabled={str(tight).lower()}"
        lines = run(classpath, "JmsQueueRoundTrip", url, "tight.orders", str(N), "both", "auto")
        assert f"SENT {N}" in lines and f"RECEIVED {N}" in lines, lines[-5:]
        assert [line.split(" ")[1] for line in lines if line.startswith("GOT ")] == [str(i) for i in range(N)]
    finally:
        proxy.close()
        broker.stop()
    assert proxy.streams
    for client_bytes, broker_bytes in proxy.streams:
        from_client = decode(bytes(client_bytes), tight)
        assert isinstance(from_client[0], WireFormatInfo)
        assert from_client[0].properties["TightEncodingEnabled"] is tight
        from_broker = decode(bytes(broker_bytes), tight)
        assert from_broker[0].properties["TightEncodingEnabled"] is True  # Petrel offers it; both must say so
        messages = [c for c in from_client if isinstance(c, Message)]
        dispatched = [c for c in from_broker if isinstance(c, MessageDispatch) and c.message is not None]
        assert len(messages) == N and len(dispatched) == N
        assert dispatched[0].message.properties["index"] == 0
        if tight:  # what the client sent after its WireFormatInfo is not loose encoding
            with pytest.raises(OpenWireProtocolError):
                decode(bytes(client_bytes), False)


@pytest.mark.parametrize("version", [10, 11])
def test_the_jms_client_at_older_versions(tmp_path, version):
    classpath = compile_program("JmsQueueRoundTrip", tmp_path / "classes")
    broker = BrokerProcess(tmp_path / "b").start()
    proxy = Recorder(broker.port)
    try:
        lines = run(classpath, "JmsQueueRoundTrip", f"tcp://127.0.0.1:{proxy.port}?wireFormat.version={version}",
                    "old.orders", "10", "both", "auto")
        assert "SENT 10" in lines and "RECEIVED 10" in lines, lines[-5:]
    finally:
        proxy.close()
        broker.stop()
    client_wire_format = decode(bytes(proxy.streams[0][0]), True)[0]
    assert client_wire_format.version == version


@pytest.mark.parametrize("version", [10, 11, 12])
@pytest.mark.parametrize("tight", [True, False])
def test_activemq_marshalled_frames_read_back_byte_for_byte(tmp_path, version, tight):
    classpath = compile_program("OpenWireFrames", tmp_path / "classes")
    decode_one, encode_one = (decode_tight, encode_tight) if tight else (decode_command, encode_command)
    seen, count = {}, 0
    for line in run(classpath, "OpenWireFrames", str(version), str(tight).lower()):
        name, wire = line.split(" ")
        frame = bytes.fromhex(wire)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        command = decode_one(frame[4:])
        assert encode_one(command) == frame[4:], name
        seen[name] = command  # (of the two TransactionInfos, the XA one)
        count += 1
    assert count == 25 and seen["TransactionInfo"].transaction_id.global_transaction_id == b"\x01\x02\x03"
    text = seen["ActiveMQTextMessage"]
    assert text_of(text.content) == "h\u00e9llo" and text.properties == {"i": 3} and text.persistent
    assert text.reply_to.name == "replies" and text.broker_out_time == 1 << 40 and text.jmsx_group_first_for_consumer
    assert seen["ActiveMQBytesMessage"].content == b"\x00\x01\xff" and seen["ActiveMQBytesMessage"].expiration == -1
    assert seen["MessageAck"].poison_cause.message == "why" and seen["MessageDispatch"].redelivery_counter == 2
    assert seen["ConnectionControl"].token == b"\x01\x02" and seen["RemoveInfo"].last_delivered_sequence_id == 42
    assert seen["ExceptionResponse"].exception.class_name == "javax.jms.JMSException"
