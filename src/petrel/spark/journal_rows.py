"""Rows of one file of a broker's data directory: a journal segment, a bindings segment or
a page file. Plain Python (no Spark), so the journal reader's tasks and tests share it.

Segments are scanned with the journal's own recovery scan (storage/journal/recovery.py):
the same records recovery replays, and, where recovery would stop the broker or drop bytes,
an *error row* (``record_type`` null, ``error`` saying what and where) instead of a failure:

* an unreadable segment header: one error row at offset 0, no records;
* damaged bytes followed by valid records: an error row at the hole, the records after it
  kept; when no MARK of the segment vouches for the hole (it may be a power loss's torn
  tail), the records after it have ``after_unsynced_hole`` set: recovery drops them when
  the segment is the newest of its journal holding data (the resolved view does the same);
* a torn or corrupt last record: an error row at its offset (recovery drops it when no
  later segment holds data, else it is damage).

Page files are read like the broker reads them: records until the first one that is cut
short or fails its CRC (an error row there when bytes follow).

MARK records are bookkeeping and, as in ``petrel data print``, not listed.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from petrel.storage.file_store import RecordKind, unpack
from petrel.storage.journal import RecordType
from petrel.storage.journal.records import decode_tx_counts
from petrel.storage.journal.recovery import scan
from petrel.storage.journal.segment import check_header, read_file
from petrel.storage.paging import PageFormatError, _records_start

__all__ = ["COLUMNS", "JOURNALS", "journal_rows", "page_rows", "error_row"]

#: (directory, file prefix, extension, kind) of the two journals of a data directory.
JOURNALS = (("journal", "petrel-data", "pj", "journal"), ("bindings", "petrel-bindings", "bindings", "bindings"))

#: The raw view's columns, in order (journal.py builds the Spark schema from this).
COLUMNS = (
    ("node", "string"), ("data_dir", "string"), ("file", "string"), ("kind", "string"),
    ("segment", "long"), ("offset", "long"), ("size", "int"),
    ("record_type", "string"), ("user_type", "string"), ("record_id", "long"),
    ("tx_id", "long"), ("tx_count", "int"), ("tx_segments", "map<long,int>"),
    ("after_unsynced_hole", "boolean"),
    ("queue_id", "long"), ("refs", "array<struct<queue_id:long,seq:long>>"),
    ("message_id", "long"), ("seq", "long"),
    ("address", "string"), ("queue", "string"), ("routing_type", "string"),
    ("durable", "boolean"), ("priority", "int"), ("timestamp", "long"), ("expiration", "long"),
    ("scheduled", "long"), ("user_id", "string"), ("duplicate_id", "string"),
    ("properties", "map<string,string>"), ("body", "binary"),
    ("large_file", "string"), ("large_size", "long"), ("delivery_count", "int"),
    ("page_file", "long"), ("page_offset", "long"), ("detail", "string"), ("error", "string"),
)
_INDEX = {name: i for i, (name, _) in enumerate(COLUMNS)}
_WIDTH = len(COLUMNS)
_DUPLICATE_ID = "_AMQ_DUPL_ID"
_ROUTING = {0: "ANYCAST", 1: "MULTICAST"}
_PAGE_HEAD = struct.Struct("<II")  # u32 length, u32 crc32 (storage/paging.py)
_USER_TYPED = (RecordType.ADD, RecordType.UPDATE, RecordType.ADD_TX, RecordType.UPDATE_TX)


class _Row:
    """A row being filled by column name; ``done()`` gives the tuple Spark takes."""

    __slots__ = ("values",)

    def __init__(self, base: dict) -> None:
        self.values = [None] * _WIDTH
        for k, v in base.items():
            self.values[_INDEX[k]] = v

    def set(self, **fields) -> _Row:
        for k, v in fields.items():
            self.values[_INDEX[k]] = v
        return self

    def get(self, name: str):
        return self.values[_INDEX[name]]

    def done(self) -> tuple:
        return tuple(self.values)


def error_row(base: dict, offset: int, error: str) -> tuple:
    return _Row(base).set(offset=offset, error=error).done()


def journal_rows(path: Path, segment: int, base: dict, large_dir: Path | None) -> Iterator[tuple]:
    """Every record of one journal (or bindings) segment, and its damage as error rows.

    ``base`` holds the columns shared by the file's rows (node, data_dir, file, kind,
    segment); ``large_dir``: where to read large bodies from (None: leave ``body`` null)."""
    try:
        buf = read_file(path)
    except OSError as exc:
        yield error_row(base, 0, f"cannot read {path}: {exc}")
        return
    problem = check_header(path, buf, segment)
    if problem is not None:
        yield error_row(base, 0, f"{problem} (recovery sets the file aside as .damaged)")
        return
    result = scan(buf, segment)
    mark = int(RecordType.MARK)
    vouched = max((raw[3] for raw in result.records if raw[1] == mark), default=0)
    hole = result.damage[0].offset if result.damage else None
    unsynced_hole = hole is not None and hole >= vouched
    rows: list[tuple[int, tuple]] = []
    for off, code, user_type, rid, tx_id, count, body, size in result.records:
        if code == mark:
            continue
        row = _Row(base).set(offset=off, size=size, record_type=RecordType(code).name,
                             after_unsynced_hole=bool(unsynced_hole and off > hole))
        _fill_record(row, RecordType(code), user_type, rid, tx_id, count, body, large_dir)
        rows.append((off, row.done()))
    for d in result.damage:
        note = ("; no sync MARK covers it: a torn tail if this is the journal's newest segment holding data, "
                "else damage" if d is result.damage[0] and unsynced_hole else
                "; damage (the broker starts only with --skip-damaged)")
        rows.append((d.offset, error_row(base, d.offset, f"damaged bytes ({d.reason}); next valid record "
                                                        f"at offset {d.resume}{note}")))
    if result.torn:
        rows.append((result.end, error_row(base, result.end, f"torn tail ({result.tail}); recovery drops it when no "
                                                             "later segment of the journal holds data, else it is "
                                                             "damage (the broker starts only with --skip-damaged)")))
    rows.sort(key=lambda r: r[0])
    for _, row in rows:
        yield row


def _fill_record(row: _Row, rtype: RecordType, user_type: int, rid: int, tx_id: int, count: int,
                 body: bytes, large_dir: Path | None) -> None:
    if rtype in (RecordType.PREPARE, RecordType.COMMIT, RecordType.ROLLBACK):
        row.set(tx_id=tx_id, tx_count=count if rtype != RecordType.ROLLBACK else None)
        if rtype == RecordType.COMMIT and body:
            try:
                row.set(tx_segments=decode_tx_counts(body))
            except ValueError as exc:
                row.set(error=f"COMMIT body: {exc}")
        elif rtype == RecordType.PREPARE and body:
            row.set(detail=body[:64].hex())
        return
    row.set(record_id=rid)
    if rtype in (RecordType.ADD_TX, RecordType.UPDATE_TX, RecordType.DELETE_TX):
        row.set(tx_id=tx_id)
    if rtype not in _USER_TYPED:
        return
    try:
        kind = RecordKind(user_type)
    except ValueError:
        row.set(user_type=str(user_type), detail=body[:64].hex())
        return
    row.set(user_type=kind.name)
    try:
        value = unpack(body)
        _fill_kind(row, kind, rtype, rid, value, large_dir)
    except Exception as exc:  # a body that does not decode is reported, never fatal
        row.set(error=f"{kind.name} body does not decode: {exc}")


def _fill_kind(row: _Row, kind: RecordKind, rtype: RecordType, rid: int, value, large_dir: Path | None) -> None:
    update = rtype in (RecordType.UPDATE, RecordType.UPDATE_TX)
    if kind == RecordKind.MESSAGE:
        encoded, refs = value
        row.set(message_id=rid, refs=[(int(q), int(s)) for q, s in refs])
        _fill_message(row, encoded, large_dir)
    elif kind == RecordKind.ACK:
        row.set(queue_id=int(value))
    elif kind == RecordKind.DELIVERY:
        qid, n = value
        row.set(queue_id=int(qid), delivery_count=int(n))
    elif kind == RecordKind.DUPLICATE_ID:
        address, dup_id = value
        row.set(address=address, duplicate_id=str(dup_id))
    elif kind == RecordKind.DUPLICATE_IDS:  # a migration's batch of origin IDs
        address, dup_ids = value
        text = repr([str(d) for d in dup_ids])
        row.set(address=address, detail=f"{len(dup_ids)} ids: " + (text if len(text) <= 200 else text[:197] + "..."))
    elif kind == RecordKind.PAGE_CURSOR:
        if update:
            f, off = value
        else:
            qid, f, off = value
            row.set(queue_id=int(qid))
        row.set(page_file=int(f), page_offset=int(off))
    elif kind == RecordKind.QUEUE:
        if update:
            return
        name, address, rt, filt, auto, client_id, sub, seq, *rest = value
        row.set(queue_id=rid, queue=name, address=address, routing_type=_ROUTING.get(rt, str(rt)), seq=int(seq),
                detail=repr({"filter": filt, "auto_created": auto, "client_id": client_id, "subscription": sub,
                             **(rest[0] if rest else {})}))
    elif kind == RecordKind.QUEUE_SEQ:
        row.set(seq=int(value))
    elif kind == RecordKind.ADDRESS:
        name, rts, auto = value
        row.set(address=name, detail=repr({"routing_types": [_ROUTING.get(r, r) for r in rts], "auto_created": auto}))
    else:  # ID_COUNTER, DIVERT
        text = repr(value)
        row.set(detail=text if len(text) <= 200 else text[:197] + "...")


def _fill_message(row: _Row, encoded: bytes, large_dir: Path | None) -> None:
    """The fields of an encoded message (core/message.py ``encode_message``: a msgpack tuple)."""
    address, body, props, durable, priority, expiration, timestamp, scheduled, rt, user_id, *large = unpack(encoded)
    props = props or {}
    dup = props.get(_DUPLICATE_ID)
    row.set(address=address, durable=bool(durable), priority=int(priority), expiration=int(expiration),
            timestamp=int(timestamp), scheduled=int(scheduled), user_id=user_id,
            routing_type=_ROUTING.get(rt) if rt is not None and rt >= 0 else None,
            duplicate_id=None if dup is None else str(dup),
            properties={str(k): None if v is None else str(v) for k, v in props.items()}, body=bytes(body))
    if large:
        name, size = large[0]
        row.set(large_file=name, large_size=int(size), body=None)
        if large_dir is not None:
            try:
                with open(os.path.join(large_dir, name), "rb") as f:
                    row.set(body=f.read())
            except FileNotFoundError:
                row.set(error=f"large-message file {name} is missing from {large_dir}")
            except OSError as exc:
                row.set(error=f"large-message file {name}: {exc}")


def page_rows(path: Path, base: dict, large_dir: Path | None) -> Iterator[tuple]:
    """Every record of one page file (``paging/<queue id>/<n>.page``), as the broker reads it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        yield error_row(base, 0, f"cannot read {path}: {exc}")
        return
    try:
        pos = _records_start(data[:12], path)
    except PageFormatError as exc:
        yield error_row(base, 0, str(exc))
        return
    end = len(data)
    while pos + _PAGE_HEAD.size <= end:
        length, crc = _PAGE_HEAD.unpack_from(data, pos)
        stop = pos + _PAGE_HEAD.size + length
        if length == 0:
            if any(data[pos:]):
                yield error_row(base, pos, "page record of length 0 followed by data; the broker reads no further")
            return
        if stop > end:
            yield error_row(base, pos, f"torn page record ({length} bytes, {end - pos - 8} left); the broker "
                                       "reads no further")
            return
        payload = data[pos + _PAGE_HEAD.size:stop]
        if zlib.crc32(payload) != crc:
            yield error_row(base, pos, "page record fails its CRC; the broker reads no further")
            return
        row = _Row(base).set(offset=pos, size=stop - pos, record_type="PAGE", user_type="MESSAGE")
        try:
            seq, durable, message_id, encoded, *home = unpack(payload)
            row.set(seq=int(seq), message_id=int(message_id), record_id=int(message_id))
            _fill_message(row, encoded, large_dir)
            row.set(durable=bool(durable), detail="home" if home and home[0] else None)
        except Exception as exc:
            row.set(error=f"page record does not decode: {exc}")
        yield row.done()
        pos = stop
    if pos < end and any(data[pos:]):
        yield error_row(base, pos, "a page record header cut short; the broker reads no further")
