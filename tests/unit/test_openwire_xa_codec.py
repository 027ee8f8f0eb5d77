"""OpenWire's XA pieces: TransactionInfo with an XATransactionId, the prepare vote
(IntegerResponse) and the recover answer (DataArrayResponse of XA ids), round trip and bytes."""

from __future__ import annotations

import struct

from petrel.codec.openwire import (
    NEED_DATA,
    ConnectionId,
    DataArrayResponse,
    IntegerResponse,
    OpenWireConnection,
    TransactionInfo,
    WireFormatInfo,
    XATransactionId,
)

XID = XATransactionId(format_id=0x1234, global_transaction_id=b"gtrid\x00\xff", branch_qualifier=b"bq")


def round_trip(commands) -> list:
    out = OpenWireConnection()
    wire = out.send(WireFormatInfo(12, {})) + b"".join(out.send(c) for c in commands)
    codec = OpenWireConnection()
    codec.receive_data(wire)
    got = []
    while (ev := codec.next_event()) is not NEED_DATA:
        got.append(ev)
    return got[1:]


def test_xa_commands_round_trip():
    commands = [
        TransactionInfo(command_id=5, response_required=True, connection_id=ConnectionId("ID:c-1"),
                        transaction_id=XID, type=1),
        IntegerResponse(correlation_id=5, result=3),
        DataArrayResponse(correlation_id=6, data=(XID, XATransactionId(1, b"g", b""))),
        DataArrayResponse(correlation_id=7, data=()),
    ]
    assert round_trip(commands) == commands


def test_integer_response_bytes():
    codec = OpenWireConnection()
    codec.send(WireFormatInfo(12, {}))
    wire = codec.send(IntegerResponse(command_id=0, correlation_id=9, result=3))
    assert wire == struct.pack(">iBibii", 14, 34, 0, 0, 9, 3)
