"""``petrel spark ...``: the Spark jobs of the data pipeline, from the command line.

* ``petrel spark recover --data-dir DIR [--data-dir DIR2] --target URL``: move what a failed or
  partial drain left in data directories to a live broker, with the drainer's duplicate IDs
  (``petrel.spark.recover``). Exit 0 only when the target confirmed every message; 1 with the
  reason otherwise (run it again: nothing arrives twice); 2 on bad usage.
* ``petrel spark reconcile --audit PATH [--data-dir DIR ...] [--since/--until T | --migration NODE]
  [--out FILE]``: per queue, produced, consumed, duplicated, lost and still held, from an audit
  stream and the journals (``petrel.spark.reconcile``), printed and written (CSV or Parquet).
  Exit 0 when nothing was lost or duplicated, 1 otherwise.

Spark runs locally (``--master local[2]`` by default) in this process; ``--master
spark://host:7077`` sends the work to a cluster whose executors can read the directories.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from petrel.errors import PetrelError, UsageError

__all__ = ["spark"]

log = logging.getLogger("petrel.cli.spark")


def _session(master: str, app: str):
    """(session, whether this command started it): a SparkSession whose Python workers run this
    interpreter (which has Petrel and pyarrow), or the one already active in this process."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise UsageError("pyspark is not installed: pip install petrel[spark]") from None
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    session = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session, True


@click.group("spark")
def spark() -> None:
    """Spark jobs: recover a data directory, reconcile an audit stream."""


@spark.command("recover")
@click.option("--data-dir", "data_dirs", multiple=True, required=True,
              type=click.Path(file_okay=False, path_type=Path), help="A data directory to move (repeatable).")
@click.option("--target", required=True, metavar="URL", help="A live broker: tcp://host:port.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A broker.toml to take the cluster credentials from.")
@click.option("--user", help="Cluster user (default: cluster_user of --config, or the default).")
@click.option("--password", envvar="PETREL_CLUSTER_PASSWORD",
              help="Cluster password (env PETREL_CLUSTER_PASSWORD; default: from --config).")
@click.option("--chunk", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Messages of one queue per Spark task (at most half the target's MIGRATION cache).")
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
@click.pass_context
def recover(ctx: click.Context, data_dirs: tuple[Path, ...], target: str, config_file: Path | None,
            user: str | None, password: str | None, chunk: int, master: str) -> None:
    """Move every message held in DATA_DIR(s) to TARGET, as the drainer would; exit 0 when all arrived."""
    from petrel.config import load_config

    for d in data_dirs:
        if not d.is_dir():
            raise UsageError(f"{d} is not a directory")
    if not target.startswith("tcp://") and "://" in target:
        raise UsageError(f"--target {target!r}: expected tcp://host:port")
    config = load_config(config_file)
    from petrel.spark.recover import RecoverFailed, preflight, recover as run_recover

    user, password = user or config.cluster_user, password or config.cluster_password
    try:  # a live broker's directory, a target that is down or refuses: said before Spark starts
        preflight([str(d) for d in data_dirs], target.removeprefix("tcp://"), user=user, password=password)
    except (RecoverFailed, ValueError) as exc:
        raise PetrelError(str(exc)) from None
    session, started = _session(master, "petrel-spark-recover")
    try:
        report = run_recover(session, [str(d) for d in data_dirs], target.removeprefix("tcp://"),
                             user=user, password=password, chunk=chunk)
    except RecoverFailed as exc:
        raise PetrelError(f"recover failed: {exc}; what was confirmed is on the target: run recover again once "
                          "the cause is fixed (nothing arrives twice)") from None
    finally:
        if started:
            session.stop()
    _print_recover(report)
    for q in report.queues:
        if q.on_target is not None and q.on_target < q.held:
            click.echo(f"petrel: warning: queue {q.queue} holds {q.on_target} messages on the target, fewer than the "
                       f"{q.held} confirmed: consumers there took some already, or it is another queue", err=True)
    click.echo(f"recovered {report.held} messages from {len(data_dirs)} data directories to node "
               f"{report.target_node} at {target}; every one confirmed", err=True)
    ctx.exit(0)


def _print_recover(report) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("NODE", "QUEUE", "HELD", "CONFIRMED", "ON_TARGET", title="petrel spark recover")
    for q in report.queues:
        table.add_row(q.node, q.queue, str(q.held), str(q.confirmed), "-" if q.on_target is None else str(q.on_target))
    Console(width=160).print(table)


def _epoch_ms(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """Epoch milliseconds, or an ISO-8601 time (UTC unless it says otherwise)."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    from datetime import datetime, timezone

    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected epoch milliseconds or an ISO-8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


@spark.command("reconcile")
@click.option("--audit", "audit", required=True, multiple=True,
              help="A directory of audit events (repeatable): AuditWriter files or a streaming query's output.")
@click.option("--data-dir", "data_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="A broker's data directory, for what queues still hold (repeatable).")
@click.option("--since", callback=_epoch_ms, help="Only messages produced at or after (epoch ms or ISO-8601).")
@click.option("--until", callback=_epoch_ms, help="Only messages produced before (epoch ms or ISO-8601).")
@click.option("--migration", metavar="NODE_ID",
              help="Only messages produced to this node (the broker that scaled down).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the table too: CSV when the name ends with .csv, else Parquet.")
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
@click.pass_context
def reconcile(ctx: click.Context, audit: tuple[str, ...], data_dirs: tuple[Path, ...], since: int | None,
              until: int | None, migration: str | None, out: Path | None, master: str) -> None:
    """Per queue: produced, consumed, duplicated, lost and still held. Exit 0 when nothing was
    lost or duplicated, 1 otherwise."""
    for d in data_dirs:
        if not d.is_dir():
            raise UsageError(f"{d} is not a directory")
    for a in audit:
        if not Path(a).is_dir():
            raise UsageError(f"--audit {a}: not a directory")
    from petrel.spark.reconcile import RESULT_COLUMNS, reconcile as run_reconcile

    session, started = _session(master, "petrel-spark-reconcile")
    try:
        rows = [r.asDict() for r in run_reconcile(session, ",".join(audit), [str(d) for d in data_dirs] or None,
                                                  since=since, until=until, migration=migration).collect()]
    finally:
        if started:
            session.stop()
    _print_reconcile(rows, bool(data_dirs))
    if out is not None:
        _write_table(rows, RESULT_COLUMNS, out)
    bad = sum((r["lost"] or 0) + r["duplicated"] for r in rows)
    ctx.exit(1 if bad else 0)


def _print_reconcile(rows: list[dict], held_known: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    title = "petrel spark reconcile" + ("" if held_known else " (no --data-dir: held and lost unknown)")
    table = Table("QUEUE", "PRODUCED", "CONSUMED", "DUPLICATED", "LOST", "HELD", "HELD_TOTAL", "UNCONSUMED",
                  "UNPRODUCED", title=title)

    def cell(v) -> str:
        return "-" if v is None else str(v)

    for r in rows:
        table.add_row(r["queue"], cell(r["produced"]), cell(r["consumed"]), cell(r["duplicated"]), cell(r["lost"]),
                      cell(r["held"]), cell(r["held_total"]), cell(r["unconsumed"]), cell(r["unproduced"]))
    console = Console(width=160)
    console.print(table)
    for r in rows:
        if r["lost_ids"]:
            console.print(f"{r['queue']}: lost, e.g. {', '.join(r['lost_ids'])}")
        if r["duplicated_ids"]:
            console.print(f"{r['queue']}: consumed more than once, e.g. {', '.join(r['duplicated_ids'])}")


def _write_table(rows: list[dict], columns: tuple[str, ...], out: Path) -> None:
    import pyarrow as pa

    table = pa.Table.from_pylist(rows, schema=pa.schema([
        (c, pa.list_(pa.string()) if c.endswith("_ids") else pa.string() if c == "queue" else pa.int64())
        for c in columns]))
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".csv":
        import pyarrow.csv as pacsv

        flat = table.set_column(table.schema.get_field_index("lost_ids"), "lost_ids",
                                pa.array([" ".join(r["lost_ids"] or []) for r in rows], pa.string()))
        flat = flat.set_column(flat.schema.get_field_index("duplicated_ids"), "duplicated_ids",
                               pa.array([" ".join(r["duplicated_ids"] or []) for r in rows], pa.string()))
        pacsv.write_csv(flat, out)
    else:
        import pyarrow.parquet as pq

        pq.write_table(table, out)
