"""``petrel spark ...``: the Spark jobs of the data pipeline, from the command line.

* ``petrel spark recover --data-dir DIR [--data-dir DIR2] --target URL``: move what a failed or
  partial drain left in data directories to a live broker, with the drainer's duplicate IDs
  (``petrel.spark.recover``). Exit 0 only when the target confirmed every message; 1 with the
  reason otherwise (run it again: nothing arrives twice); 2 on bad usage.
* ``petrel spark reconcile --audit PATH ...``: per queue, produced, consumed, lost, duplicated
  and still held, from an audit stream and the journals (``petrel.spark.reconcile``).

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
    """A SparkSession whose Python workers run this interpreter (which has Petrel and pyarrow)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise UsageError("pyspark is not installed: pip install petrel[spark]") from None
    session = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


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
    from petrel.spark.recover import RecoverFailed, lock_directories, recover as run_recover

    try:  # refuse a live broker's directory before starting Spark
        _, _, locks = lock_directories([str(d) for d in data_dirs])
    except (RecoverFailed, ValueError) as exc:
        raise PetrelError(str(exc)) from None
    for lock in locks:
        lock.release()
    session = _session(master, "petrel-spark-recover")
    try:
        report = run_recover(session, [str(d) for d in data_dirs], target.removeprefix("tcp://"),
                             user=user or config.cluster_user, password=password or config.cluster_password,
                             chunk=chunk)
    except RecoverFailed as exc:
        raise PetrelError(f"recover failed: {exc}; what was confirmed is on the target: run recover again once "
                          "the cause is fixed (nothing arrives twice)") from None
    finally:
        session.stop()
    _print_recover(report)
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
