"""Malformed AMQP from a raw socket against a real `petrel run`: each gets the close with its
error condition (or, where AMQP has no way to say it, a closed socket), and the broker keeps
serving a well-behaved proton client throughout."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from proton import Message
from proton.utils import BlockingConnection

from petrel.codec.amqp.performatives import Attach, Begin, Open, Target, Transfer
from petrel.codec.amqp.types import encode

HEADER = b"AMQP\x00\x01\x00\x00"


def frame(performative=None, payload: bytes = b"", *, raw: bytes | None = None, ftype: int = 0) -> bytes:
    body = raw if raw is not None else encode(performative) + payload
    return struct.pack(">IBBH", 8 + len(body), 2, ftype, 0) + body


OPEN = frame(Open(container_id="raw"))
BEGIN = frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100))

CASES = {
    "before-open": (HEADER + BEGIN, b"amqp:illegal-state"),
    "bad-format-code": (HEADER + OPEN + frame(raw=b"\x00\x53\x11\xc0\x05\x03\x40\xff\xff\xff"), b"amqp:decode-error"),
    "oversize-frame": (HEADER + OPEN + b"\x7f\x00\x00\x00\x02\x00\x00\x00", b"amqp:connection:framing-error"),
    "unattached-handle": (HEADER + OPEN + BEGIN + frame(Transfer(handle=7, delivery_id=0, delivery_tag=b"t"), b"x"),
                          b"amqp:session:unattached-handle"),
    "no-session": (HEADER + OPEN + frame(Attach(name="l", handle=0, role=False, target=Target(address="q"))),
                   b"amqp:illegal-state"),
    "second-open": (HEADER + OPEN + OPEN, b"amqp:illegal-state"),
    "handle-over-max": (HEADER + OPEN + BEGIN + frame(Attach(name="l", handle=70000, role=False,
                                                             target=Target(address="q"))),
                        b"amqp:resource-limit-exceeded"),
    "sasl-frame-after-open": (HEADER + OPEN + frame(raw=b"\x00\x53\x41\xc0\x03\x01\xa3\x00", ftype=1),
                              b"amqp:connection:framing-error"),
    "bad-message": (HEADER + OPEN + BEGIN + frame(Attach(name="l", handle=0, role=False, target=Target(address="q")))
                    + frame(Transfer(handle=0, delivery_id=0, delivery_tag=b"t"), b"\x00\x53\x77\xa1\x09short"),
                    b"amqp:decode-error"),
}


def exchange(port: int, data: bytes) -> bytes:
    """Send `data`, read until the broker closes (10 s at most)."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
    return out


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from conftest import module_broker

    yield from module_broker(tmp_path_factory, "amqp-errors")


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_input_gets_its_condition_and_the_broker_serves_others(shared, case):
    data, condition = CASES[case]
    good = BlockingConnection(f"amqp://127.0.0.1:{shared.port}", timeout=20)
    try:
        reply = exchange(shared.port, data)
        assert reply.startswith(HEADER)
        assert condition in reply
        assert b"\x00\x53\x18" in reply  # a close performative
        s = good.create_sender("queue://alive")
        r = good.create_receiver("queue://alive")
        s.send(Message(body=case))
        assert r.receive(timeout=10).body == case
        r.accept()
    finally:
        good.close()


def test_garbage_in_the_sasl_exchange_closes_the_socket(shared):
    reply = exchange(shared.port, b"AMQP\x03\x01\x00\x00" + b"\x00\x00\x00\x10\x02\x01\x00\x00" + b"\xff" * 8)
    assert reply.startswith(b"AMQP\x03\x01\x00\x00")  # the mechanisms went out; then the socket closed
    good = BlockingConnection(f"amqp://127.0.0.1:{shared.port}", timeout=20)
    good.close()
