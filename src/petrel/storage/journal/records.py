"""Journal records: pure encode/decode functions, no I/O.

On-disk format (all integers little-endian)
===========================================

A journal is a directory of fixed-size, preallocated segment files named
``<prefix>-<segment_id>.<ext>``.  Segment ids are u64, strictly increasing, and
define the order in which segments are replayed.

Segment header, 16 bytes at offset 0::

    0  4s   magic b"PTRJ"
    4  u16  format version (1)
    6  u16  reserved (0)
    8  u64  segment id

Records follow the header back to back.  Every record starts with a common
16-byte header and ends with a CRC32 trailer::

    0  u8   type (RecordType)
    1  u8   user type (the caller's meaning; 0 for PREPARE/COMMIT/ROLLBACK)
    2  u32  total length of the record, header and trailer included
    6  u64  segment id of the segment the record was written into
    14 u16  header check: zlib.crc32(bytes 0..14) & 0xFFFF
    16 ...  type-specific fields (below), then the body
    -4 u32  zlib.crc32 of every byte of the record before it

Type-specific fields:

    ADD, UPDATE, DELETE, MARK         u64 id (MARK: a durable offset, see below)
    ADD_TX, UPDATE_TX, DELETE_TX      u64 tx_id, u64 id
    PREPARE, COMMIT                   u64 tx_id, u32 count
    ROLLBACK                          u64 tx_id

A MARK (no body, user type 0) says "everything of this segment before offset ``id``
was synced when this record was appended": the appender adds one before the first
record it places after the writer reports a completed sync, so recovery can tell
a hole a power loss may leave (after the last sync point) from damage to data
that was synced (see recovery.py).  MARKs are dead on arrival: compaction drops them.

The body is whatever the caller stored.  A COMMIT's body lists, for each segment
that holds records of the transaction, ``u64 segment id, u32 records`` (see
:func:`encode_tx_counts`), so a transaction whose older segments were reclaimed
can still be checked on load.  A PREPARE's body is the caller's data.

Why this layout reads safely:

* A zeroed region has a zero header: end of data (``TornRecord``).
* A record left from a file's previous life carries that life's segment id
  (files are reused without re-zeroing): with a valid header check and a foreign
  segment id it is end of data (``TornRecord``).
* A flipped bit anywhere is caught: in the first 16 bytes by the header check
  (the header is ours when its segment id is ours, or when putting our id in
  its place makes the check match: only that field was hit), elsewhere by the
  record CRC.  Either way ``CorruptRecord``.
* A record whose header is sound but that runs past the end of the buffer is
  incomplete (a truncated file): ``TornRecord``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from zlib import crc32

__all__ = [
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "RECORD_HEADER_SIZE",
    "SEGMENT_ID_OFFSET",
    "CorruptRecord",
    "Record",
    "RecordError",
    "RecordType",
    "TornRecord",
    "decode",
    "decode_raw",
    "decode_run",
    "decode_segment_header",
    "decode_tx_counts",
    "encode",
    "encode_segment_header",
    "encode_tx_counts",
    "find_candidate",
    "record_size",
]

MAGIC = b"PTRJ"
FORMAT_VERSION = 1
HEADER_SIZE = 16  # segment header
RECORD_HEADER_SIZE = 16  # common record header
SEGMENT_ID_OFFSET = 6  # where a record keeps its segment id (used to rescan damage)
TRAILER_SIZE = 4

_SEGMENT_HEADER = struct.Struct("<4sHHQ")
_COMMON = struct.Struct("<BBIQ")  # 14 bytes, followed by the u16 header check
_CHECK = struct.Struct("<H")
_CRC = struct.Struct("<I")
_ID = struct.Struct("<HQ")  # header check + id
_TX_ID = struct.Struct("<HQQ")  # header check + tx_id + id
_TX_COUNT = struct.Struct("<HQI")  # header check + tx_id + count
_TX_ONLY = struct.Struct("<HQ")  # header check + tx_id
_PAIR = struct.Struct("<QI")
_U64 = struct.Struct("<Q")
_MAX_U64 = (1 << 64) - 1


class RecordType(IntEnum):
    ADD = 11
    UPDATE = 12
    ADD_TX = 13
    UPDATE_TX = 14
    DELETE_TX = 15
    DELETE = 16
    PREPARE = 17
    COMMIT = 18
    ROLLBACK = 19
    MARK = 20


# The types as plain module globals for the per-record code of the journal, its ledger
# and recovery (a global load is cheaper there than an enum attribute lookup).
ADD = RecordType.ADD
UPDATE = RecordType.UPDATE
DELETE = RecordType.DELETE
ADD_TX = RecordType.ADD_TX
UPDATE_TX = RecordType.UPDATE_TX
DELETE_TX = RecordType.DELETE_TX
PREPARE = RecordType.PREPARE
COMMIT = RecordType.COMMIT
ROLLBACK = RecordType.ROLLBACK
MARK = RecordType.MARK

_BY_CODE = {int(t): t for t in RecordType}


@dataclass(frozen=True, slots=True)
class Record:
    type: RecordType
    id: int = 0  # record id (u64); unused for PREPARE/COMMIT/ROLLBACK
    user_type: int = 0  # u8, the caller's meaning
    body: bytes = b""
    tx_id: int = 0  # u64, for *_TX, PREPARE, COMMIT, ROLLBACK
    count: int = 0  # COMMIT/PREPARE: number of records of this tx


class RecordError(Exception):
    """Nothing decodable at this offset."""


class TornRecord(RecordError):
    """Nothing valid here: zeros, a record of another segment, or an incomplete record.

    ``ours`` is true when a sound header of this segment is here but the record
    runs past the end of the buffer (a truncated file, or a torn write).
    """

    def __init__(self, message: str, ours: bool = False) -> None:
        super().__init__(message)
        self.ours = ours


class CorruptRecord(RecordError):
    """A plausible record of this segment whose checks fail."""


# type code -> (fields struct including the header check, layout kind)
_ID_KIND, _TX_KIND, _COUNT_KIND, _TX_ONLY_KIND = range(4)
_LAYOUT = {
    RecordType.ADD: (_ID, _ID_KIND),
    RecordType.UPDATE: (_ID, _ID_KIND),
    RecordType.DELETE: (_ID, _ID_KIND),
    RecordType.MARK: (_ID, _ID_KIND),
    RecordType.ADD_TX: (_TX_ID, _TX_KIND),
    RecordType.UPDATE_TX: (_TX_ID, _TX_KIND),
    RecordType.DELETE_TX: (_TX_ID, _TX_KIND),
    RecordType.PREPARE: (_TX_COUNT, _COUNT_KIND),
    RecordType.COMMIT: (_TX_COUNT, _COUNT_KIND),
    RecordType.ROLLBACK: (_TX_ONLY, _TX_ONLY_KIND),
}
# smallest valid total length per type code
_MIN_LENGTH = {int(t): _COMMON.size + s.size + TRAILER_SIZE for t, (s, _) in _LAYOUT.items()}
_OVERHEAD = _MIN_LENGTH  # bytes a record of that type takes beyond its body
_HEAD = struct.Struct("<BBIQH")  # the common header, check included
# type code -> (minimum length, layout kind, fields after the common header)
_DECODE = {
    int(t): (_MIN_LENGTH[t], kind, struct.Struct("<" + fields.format[2:]))
    for t, (fields, kind) in _LAYOUT.items()
}


def record_size(rtype: int, body_len: int) -> int:
    """Total encoded length of a record of type ``rtype`` with a body of ``body_len`` bytes."""
    return _OVERHEAD[rtype] + body_len


def _finish(head: bytes, fields: bytes, body: bytes) -> bytes:
    crc = crc32(body, crc32(fields, crc32(head)))
    return b"".join((head, fields, body, _CRC.pack(crc)))


def encode_data(rtype: int, segment_id: int, user_type: int, id: int, body: bytes) -> bytes:
    """Encode ADD/UPDATE/DELETE without building a Record (the append hot path)."""
    head = _COMMON.pack(rtype, user_type, _OVERHEAD[rtype] + len(body), segment_id)
    fields = _ID.pack(crc32(head) & 0xFFFF, id)
    return b"".join((head, fields, body, _CRC.pack(crc32(body, crc32(fields, crc32(head))))))


def encode_tx_data(rtype: int, segment_id: int, user_type: int, tx_id: int, id: int,
                   body: bytes) -> bytes:
    """Encode ADD_TX/UPDATE_TX/DELETE_TX without building a Record."""
    head = _COMMON.pack(rtype, user_type, _OVERHEAD[rtype] + len(body), segment_id)
    fields = _TX_ID.pack(crc32(head) & 0xFFFF, tx_id, id)
    return _finish(head, fields, body)


def encode_tx_run(rtype: int, segment_id: int, user_type: int, tx_id: int,
                  records: list[tuple[int, bytes]], out: bytearray) -> None:
    """`encode_tx_data` of each (id, body) of ``records``, one after the other, onto ``out``
    (the records of one transaction placed together: a run of contiguous bytes)."""
    overhead = _OVERHEAD[rtype]
    rtype = int(rtype)
    common, fields, trailer = _COMMON.pack, _TX_ID.pack, _CRC.pack
    for id, body in records:
        head = common(rtype, user_type, overhead + len(body), segment_id)
        check = crc32(head)
        head_fields = fields(check & 0xFFFF, tx_id, id)
        out += head
        out += head_fields
        out += body
        out += trailer(crc32(body, crc32(head_fields, check)))


def encode_delete_run(segment_id: int, ids: list[int], out: bytearray) -> None:
    """`encode_data(DELETE, segment_id, 0, id, b"")` of each id, one after the other, onto ``out``
    (the header is the same for all of them: packed and checked once)."""
    head = _COMMON.pack(int(RecordType.DELETE), 0, _OVERHEAD[RecordType.DELETE], segment_id)
    check = crc32(head)
    short = check & 0xFFFF
    fields, trailer = _ID.pack, _CRC.pack
    for id in ids:
        head_fields = fields(short, id)
        out += head
        out += head_fields
        out += trailer(crc32(head_fields, check))


def encode_tx_end(rtype: int, segment_id: int, tx_id: int, count: int, body: bytes) -> bytes:
    """Encode PREPARE/COMMIT (``count`` is used) or ROLLBACK (``count`` ignored)."""
    head = _COMMON.pack(rtype, 0, _OVERHEAD[rtype] + len(body), segment_id)
    if rtype == RecordType.ROLLBACK:
        fields = _TX_ONLY.pack(crc32(head) & 0xFFFF, tx_id)
    else:
        fields = _TX_COUNT.pack(crc32(head) & 0xFFFF, tx_id, count)
    return _finish(head, fields, body)


def encode(record: Record, segment_id: int) -> bytes:
    """Encode ``record`` as written into segment ``segment_id``."""
    rtype = RecordType(record.type)
    body = bytes(record.body)
    if not 0 <= record.user_type <= 0xFF:
        raise ValueError(f"user_type {record.user_type} does not fit in a byte")
    if not 0 < segment_id <= _MAX_U64:
        raise ValueError(f"segment id {segment_id} out of range")
    kind = _LAYOUT[rtype][1]
    if kind == _ID_KIND:
        return encode_data(rtype, segment_id, record.user_type, record.id, body)
    if kind == _TX_KIND:
        return encode_tx_data(rtype, segment_id, record.user_type, record.tx_id, record.id, body)
    return encode_tx_end(rtype, segment_id, record.tx_id, record.count, body)


def decode(buf, offset: int, segment_id: int) -> tuple[Record, int]:
    """Decode the record at ``offset`` of ``buf`` (bytes, bytearray or memoryview).

    Returns the record and the offset just past it.  Raises :class:`TornRecord`
    when nothing valid is here, :class:`CorruptRecord` when a record of this
    segment is here but fails its checks.
    """
    code, user_type, rid, tx_id, count, body, stop = decode_raw(buf, offset, segment_id)
    return Record(_BY_CODE[code], rid, user_type, body, tx_id, count), stop


def decode_raw(buf, offset: int, segment_id: int) -> tuple[int, int, int, int, int, bytes, int]:
    """:func:`decode` without building a Record (the load hot path):
    ``(type code, user_type, id, tx_id, count, body, next offset)``."""
    try:
        code, user_type, length, seg, check = _HEAD.unpack_from(buf, offset)
    except struct.error:
        raise TornRecord(f"incomplete record header at offset {offset}") from None
    if seg != segment_id or check != crc32(buf[offset:offset + 14]) & 0xFFFF:
        _bad_header(buf, offset, segment_id, seg, check)
    layout = _DECODE.get(code)
    if layout is None:
        raise CorruptRecord(f"unknown record type {code} at offset {offset}")
    minimum, kind, fields = layout
    if length < minimum:
        raise CorruptRecord(f"bad record length {length} at offset {offset}")
    stop = offset + length
    crc_at = stop - TRAILER_SIZE
    if stop > len(buf):
        raise TornRecord(f"incomplete record at offset {offset} ({length} bytes, {len(buf) - offset} left)",
                         ours=True)
    if crc32(buf[offset:crc_at]) != _CRC.unpack_from(buf, crc_at)[0]:
        raise CorruptRecord(f"CRC mismatch in record at offset {offset}")
    body = bytes(buf[offset + minimum - TRAILER_SIZE:crc_at])
    at = offset + RECORD_HEADER_SIZE
    if kind == _ID_KIND:
        return code, user_type, fields.unpack_from(buf, at)[0], 0, 0, body, stop
    if kind == _TX_KIND:
        tx_id, rid = fields.unpack_from(buf, at)
        return code, user_type, rid, tx_id, 0, body, stop
    if kind == _COUNT_KIND:
        tx_id, count = fields.unpack_from(buf, at)
        return code, user_type, 0, tx_id, count, body, stop
    return code, user_type, 0, fields.unpack_from(buf, at)[0], 0, body, stop


def decode_run(buf, offset: int, segment_id: int, append) -> int:
    """Decode records from ``offset`` on, as :func:`decode_raw` does, appending each as
    ``(offset, type code, user_type, id, tx_id, count, body, size)``; returns the offset of the
    first one that :func:`decode_raw` would not accept (or the end of ``buf``). The load's hot
    loop: sound ADD/UPDATE/DELETE/MARK records are taken here, anything else by decode_raw."""
    size = len(buf)
    head = _HEAD.unpack_from
    layouts = _DECODE
    crc_of = _CRC.unpack_from
    while offset < size:
        if offset + RECORD_HEADER_SIZE <= size:
            code, user_type, length, seg, check = head(buf, offset)
            layout = layouts.get(code)
            stop = offset + length
            if seg == segment_id and layout is not None and layout[1] == _ID_KIND and length >= layout[0] \
                    and stop <= size and check == crc32(buf[offset:offset + 14]) & 0xFFFF:
                crc_at = stop - TRAILER_SIZE
                if crc32(buf[offset:crc_at]) == crc_of(buf, crc_at)[0]:
                    append((offset, code, user_type, layout[2].unpack_from(buf, offset + RECORD_HEADER_SIZE)[0], 0, 0,
                            bytes(buf[offset + layout[0] - TRAILER_SIZE:crc_at]), length))
                    offset = stop
                    continue
        try:
            code, user_type, rid, tx_id, count, body, stop = decode_raw(buf, offset, segment_id)
        except RecordError:
            return offset
        append((offset, code, user_type, rid, tx_id, count, body, stop - offset))
        offset = stop
    return offset


def _bad_header(buf, offset: int, segment_id: int, seg: int, check: int):
    """Classify a header that is not a sound header of ``segment_id``; always raises."""
    head = bytes(buf[offset:offset + 14])
    if check == crc32(head) & 0xFFFF:
        raise TornRecord(f"record of segment {seg} at offset {offset}")
    if seg == segment_id:
        raise CorruptRecord(f"record header check failed at offset {offset}")
    if check == crc32(head[:SEGMENT_ID_OFFSET] + _U64.pack(segment_id)) & 0xFFFF:
        raise CorruptRecord(f"damaged segment id in record at offset {offset}")
    if not any(head) and not check:
        raise TornRecord(f"zeros at offset {offset}")
    raise TornRecord(f"no record at offset {offset}")


def find_candidate(buf, start: int, segment_id: int) -> int:
    """Offset >= ``start`` of the next place that may hold a record of ``segment_id``, or -1.

    Only a hint for rescanning damage: the caller still has to decode there.
    """
    hit = buf.find(_U64.pack(segment_id), start + SEGMENT_ID_OFFSET)
    return hit - SEGMENT_ID_OFFSET if hit >= 0 else -1


def encode_segment_header(segment_id: int) -> bytes:
    return _SEGMENT_HEADER.pack(MAGIC, FORMAT_VERSION, 0, segment_id)


def decode_segment_header(buf) -> int:
    """Segment id from a segment header; ValueError when it is not one."""
    if len(buf) < HEADER_SIZE:
        raise ValueError("short segment header")
    magic, version, _reserved, segment_id = _SEGMENT_HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise ValueError(f"bad magic {magic!r}")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported format version {version}")
    return segment_id


def encode_tx_counts(counts: dict[int, int]) -> bytes:
    """COMMIT body: per segment id, how many records of the transaction it holds."""
    return b"".join(_PAIR.pack(seg, n) for seg, n in counts.items())


def decode_tx_counts(body: bytes) -> dict[int, int]:
    if len(body) % _PAIR.size:
        raise ValueError("COMMIT body is not a list of (segment, count)")
    return dict(_PAIR.iter_unpack(body))
