"""``spark.read.format("petrel-journal")``: the raw records of brokers' data directories.

Options
    ``path``         one or more data directories, comma-separated (an instance directory
                     holding ``data/`` is accepted too, as by ``petrel data print``); the
                     files must be readable where the tasks run
    ``largeBodies``  ``true`` (default): read large messages' bodies from ``large-messages/``;
                     ``false``: leave ``body`` null for them (``large_file``, ``large_size`` say
                     where and how big)
    ``view``         only ``raw`` here; the resolved view (what each queue still holds) needs
                     Spark joins: ``petrel.spark.read_journal(spark, path, view="resolved")``

One partition per file: each segment of ``journal/`` and ``bindings/``, each page file of
``paging/<queue id>/``. One row per record (journal_rows.py for the columns and how damage
shows), in file order. The files are read as they are; a broker that was killed may still
have to roll a pending compaction forward (``journal-rename-control.ctr``): such a
directory gets an error row saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.datasource import DataSourceReader, InputPartition

from petrel.spark.journal_rows import COLUMNS, JOURNALS, error_row, journal_rows, page_rows
from petrel.storage.journal.segment import CONTROL_FILE, Layout
from petrel.storage.server_lock import read_node_id

__all__ = ["JOURNAL_SCHEMA", "JournalFile", "JournalReader", "data_directories", "journal_files"]

JOURNAL_SCHEMA = ", ".join(f"{name} {dtype}" for name, dtype in COLUMNS)


@dataclass(frozen=True)
class JournalFile(InputPartition):
    """One file to read; everything a task needs, since it sees nothing of the driver."""

    data_dir: str
    node: str | None
    file: str  # relative to data_dir
    kind: str  # journal, bindings, page, control
    segment: int  # segment id, page file number (0 for a control file)
    queue_id: int | None  # page files: the queue they belong to
    large_bodies: bool


def data_directories(paths: str) -> list[Path]:
    """The data directories named by a comma-separated ``path`` option; ValueError for a
    directory that holds no journal."""
    found = []
    for part in paths.split(","):
        part = part.strip()
        if not part:
            continue
        d = Path(part).expanduser()
        if not (d / "journal").is_dir() and not (d / "bindings").is_dir():
            if (d / "data" / "journal").is_dir() or (d / "data" / "bindings").is_dir():
                d = d / "data"
            else:
                raise ValueError(f"petrel-journal: {d} holds no journal/ or bindings/ directory")
        found.append(d.resolve())
    if not found:
        raise ValueError("petrel-journal: option 'path' names no data directory (comma-separated list)")
    return found


def journal_files(data_dir: Path, large_bodies: bool = True) -> list[JournalFile]:
    """The partitions of one data directory: its segments in id order, then its page files."""
    node = read_node_id(data_dir)
    out: list[JournalFile] = []
    for sub, prefix, ext, kind in JOURNALS:
        directory = data_dir / sub
        if not directory.is_dir():
            continue
        if (directory / CONTROL_FILE).exists():
            out.append(JournalFile(str(data_dir), node, f"{sub}/{CONTROL_FILE}", "control", 0, None, large_bodies))
        for seg, path in Layout(directory, prefix, ext).data_files().items():
            out.append(JournalFile(str(data_dir), node, f"{sub}/{path.name}", kind, seg, None, large_bodies))
    paging = data_dir / "paging"
    if paging.is_dir():
        for qdir in sorted((p for p in paging.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)):
            for page in sorted((p for p in qdir.glob("*.page") if p.stem.isdigit()), key=lambda p: int(p.stem)):
                out.append(JournalFile(str(data_dir), node, f"paging/{qdir.name}/{page.name}", "page",
                                       int(page.stem), int(qdir.name), large_bodies))
    return out


def read_file_rows(part: JournalFile) -> Iterator[tuple]:
    """The rows of one partition (also usable without Spark)."""
    data_dir = Path(part.data_dir)
    base = {"node": part.node, "data_dir": part.data_dir, "file": part.file, "kind": part.kind,
            "segment": part.segment, "queue_id": part.queue_id}
    large_dir = data_dir / "large-messages" if part.large_bodies else None
    path = data_dir / part.file
    if part.kind == "control":
        yield error_row(base, 0, "a compaction's rename plan is pending: the broker rolls it forward at its next "
                                 "start, before reading; these segments are read as they are now")
    elif part.kind == "page":
        yield from page_rows(path, base, large_dir)
    else:
        yield from journal_rows(path, part.segment, base, large_dir)


class JournalReader(DataSourceReader):
    def __init__(self, options) -> None:
        view = (options.get("view") or "raw").lower()
        if view != "raw":
            raise ValueError("petrel-journal: this format gives the raw records (view=raw); for the resolved view "
                             "use petrel.spark.read_journal(spark, path, view='resolved')")
        path = options.get("path")
        if not path:
            raise ValueError("petrel-journal: option 'path' is required (one or more data directories, "
                             "comma-separated)")
        self.paths = [str(d) for d in data_directories(path)]
        flag = (options.get("largeBodies") or "true").lower()
        if flag not in ("true", "false"):
            raise ValueError(f"petrel-journal: largeBodies must be true or false, not {flag!r}")
        self.large_bodies = flag == "true"

    def partitions(self) -> list[JournalFile]:
        parts = [f for d in self.paths for f in journal_files(Path(d), self.large_bodies)]
        return parts or [JournalFile(self.paths[0], None, "", "empty", 0, None, False)]

    def read(self, partition: JournalFile) -> Iterator[tuple]:
        if partition.kind == "empty":
            return iter(())
        return read_file_rows(partition)
