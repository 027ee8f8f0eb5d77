"""`petrel data print DIR`: decode a broker's journals offline, like `artemis data print`."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from petrel.storage.file_store import RecordKind, unpack
from petrel.storage.journal import RecordType, read_segments
from petrel.storage.server_lock import read_node_id

JOURNALS = (("bindings", "petrel-bindings", "bindings"), ("journal", "petrel-data", "pj"))


@click.group("data", help="Inspect a broker's data directory offline.")
def data() -> None:
    pass


@data.command("print", help="Decode the journals of DIR: segments, records, queues and message counts.")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--records/--no-records", default=False, help="List every record, not only the summary.")
def print_(directory: Path, records: bool) -> None:
    console = Console()
    if not (directory / "journal").is_dir() and not (directory / "bindings").is_dir():
        # Accept the instance directory too (the one holding broker.toml and data/).
        if (directory / "data" / "journal").is_dir():
            directory = directory / "data"
        else:
            click.echo(f"petrel: error: {directory} holds no journal/ or bindings/ directory", err=True)
            sys.exit(2)
    console.print(f"[bold]data directory[/] {directory}   node id {read_node_id(directory) or '(none)'}")
    queues: dict[int, str] = {}
    migrating: list[str] = []
    live_refs: Counter[int] = Counter()
    for sub, prefix, ext in JOURNALS:
        path = directory / sub
        if not path.is_dir():
            continue
        seg_table = Table(title=f"{sub}/ segments", show_lines=False)
        for col in ("SEGMENT", "FILE", "RECORDS", "BYTES"):
            seg_table.add_column(col, justify="right" if col != "FILE" else "left")
        kinds: Counter[str] = Counter()
        state: dict[int, tuple[int, bytes, list]] = {}
        pending: dict[int, list] = {}
        record_rows = []
        for info, recs in read_segments(path, prefix, ext):
            n = used = 0
            for offset, rec in recs:
                n += 1
                used = offset
                kinds[_kind_name(rec)] += 1
                if records:
                    record_rows.append((info.id, offset, rec))
                _replay(state, pending, rec)
            seg_table.add_row(str(info.id), Path(info.path).name, str(n), str(used))
        console.print(seg_table)
        kind_table = Table(title=f"{sub}/ record kinds")
        kind_table.add_column("KIND")
        kind_table.add_column("COUNT", justify="right")
        for k, v in sorted(kinds.items()):
            kind_table.add_row(k, str(v))
        console.print(kind_table)
        if records:
            rec_table = Table(title=f"{sub}/ records")
            for col in ("SEGMENT", "OFFSET", "TYPE", "ID", "TX", "KIND", "BODY"):
                rec_table.add_column(col)
            for seg, off, rec in record_rows:
                rec_table.add_row(str(seg), str(off), rec.type.name, str(rec.id), str(rec.tx_id or ""),
                                  _user_kind(rec), _body(rec))
            console.print(rec_table)
        for rid, (utype, body, updates) in state.items():
            if utype == RecordKind.QUEUE:
                name, address, rt, filt, *_ = unpack(body)
                queues[rid] = f"{name} ({address}, {'ANYCAST' if rt == 0 else 'MULTICAST'})"
            elif utype == RecordKind.MIGRATION_OPEN:
                migrating.append(str(unpack(body)[1]))
            elif utype == RecordKind.MESSAGE:
                _, refs = unpack(body)
                acked = {unpack(b) for k, b in updates if k == RecordKind.ACK}
                for qid, _seq in refs:
                    if qid not in acked:
                        live_refs[qid] += 1
    q_table = Table(title="queues (durable)")
    q_table.add_column("ID", justify="right")
    q_table.add_column("QUEUE")
    q_table.add_column("MESSAGES", justify="right")
    for qid, name in sorted(queues.items()):
        q_table.add_row(str(qid), name, str(live_refs.get(qid, 0)))
    orphans = sum(v for k, v in live_refs.items() if k not in queues)
    console.print(q_table)
    if orphans:
        console.print(f"{orphans} message references to queues that no longer exist")
    if migrating:
        console.print(f"migrations begun here and not finished, from: {', '.join(sorted(migrating))}",
                      soft_wrap=True)  # (node ids whole, for scripts)


def _replay(state: dict, pending: dict, rec) -> None:
    t = rec.type
    if t == RecordType.ADD:
        state[rec.id] = (rec.user_type, rec.body, [])
    elif t == RecordType.UPDATE:
        if rec.id in state:
            state[rec.id][2].append((rec.user_type, rec.body))
    elif t == RecordType.DELETE:
        state.pop(rec.id, None)
    elif t in (RecordType.ADD_TX, RecordType.UPDATE_TX, RecordType.DELETE_TX):
        pending.setdefault(rec.tx_id, []).append(rec)
    elif t == RecordType.COMMIT:
        for r in pending.pop(rec.tx_id, []):
            if r.type == RecordType.ADD_TX:
                state[r.id] = (r.user_type, r.body, [])
            elif r.type == RecordType.UPDATE_TX and r.id in state:
                state[r.id][2].append((r.user_type, r.body))
            elif r.type == RecordType.DELETE_TX:
                state.pop(r.id, None)
    elif t in (RecordType.ROLLBACK, RecordType.PREPARE):
        if t == RecordType.ROLLBACK:
            pending.pop(rec.tx_id, None)


def _kind_name(rec) -> str:
    if rec.type in (RecordType.ADD, RecordType.UPDATE, RecordType.ADD_TX, RecordType.UPDATE_TX):
        return f"{rec.type.name} {_user_kind(rec)}"
    return rec.type.name


def _user_kind(rec) -> str:
    if rec.type in (RecordType.ADD, RecordType.UPDATE, RecordType.ADD_TX, RecordType.UPDATE_TX):
        try:
            return RecordKind(rec.user_type).name
        except ValueError:
            return str(rec.user_type)
    return ""


def _body(rec) -> str:
    if not rec.body:
        return ""
    try:
        value = unpack(rec.body)
    except Exception:
        return rec.body[:40].hex()
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
