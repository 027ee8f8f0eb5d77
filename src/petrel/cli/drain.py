"""``petrel drain``: move every message of an orphaned data directory to a live broker.

The drainer is a broker started in scale-down mode: it locks the data directory (a directory
a running broker holds is refused), recovers it (most messages are built only as they move, in
their queue's order: ``petrel.core.staged``), listens on nothing, moves every message to the
target (``petrel.ha.scale_down``), checks that nothing is left, and stops. Exit 0 only
when the directory is empty of messages; 1 with the reason otherwise; 2 on bad usage. A rerun
after any failure (or a ``kill -9``) moves the rest and delivers nothing twice. A directory
holding prepared XA transaction branches is refused (1, naming their xids) before anything
moves: prepared branches do not move, and the data must not be deleted while one is there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import click

from petrel.config import load_config
from petrel.errors import PetrelError, UsageError

__all__ = ["drain"]

log = logging.getLogger("petrel.drain")

ADMIT_CHUNK = 2000  # recovered messages built and queued per turn of the event loop (~5 ms)


@click.command("drain")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The orphaned data directory to empty.")
@click.option("--target", required=True, metavar="URL",
              help="A live broker: tcp://host:port, or ssl://host:port over TLS (the CA and any client "
                   "certificate from --config's ssl_ca, ssl_cert, ssl_key).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A broker.toml to take the cluster credentials and storage settings from.")
@click.option("--user", help="Cluster user (default: cluster_user of --config, or the default).")
@click.option("--password", envvar="PETREL_CLUSTER_PASSWORD",
              help="Cluster password (env PETREL_CLUSTER_PASSWORD; default: from --config).")
@click.option("--progress", type=click.Choice(["bar", "json", "none"]), default=None,
              help="A progress bar (default on a terminal), JSON lines for an orchestrator, or nothing.")
@click.pass_context
def drain(ctx: click.Context, data_dir: Path, target: str, config_file: Path | None, user: str | None,
          password: str | None, progress: str | None) -> None:
    """Move every message of DATA_DIR (a broker that is gone) to TARGET, then exit 0."""
    if not data_dir.is_dir():
        raise UsageError(f"{data_dir} is not a directory")
    if not target.startswith(("tcp://", "ssl://")) and "://" in target:
        raise UsageError(f"--target {target!r}: expected tcp://host:port or ssl://host:port")
    base = load_config(config_file, overrides={"data_dir": data_dir})
    updates = {"port": -1, "stomp_port": -1, "http_port": -1, "cluster_connections": [],
               "broadcast_groups": [], "discovery_groups": [], "grouping_handler": None,
               "ha_policy": base.ha_policy.model_copy(update={"shared_store": None, "replication": None,
                                                             "colocated": None, "scale_down": None,
                                                             "lock_manager": None}),
               "message_expiry_scan_period": -1,
               # it listens on nothing: no client logs in, and no users file is made in the orphan
               "security_enabled": False}
    config = base.model_copy(update=updates)
    mode = progress or ("bar" if sys.stderr.isatty() else "none")
    from petrel.server import heap

    heap.tune_process()  # this process is a broker in scale-down mode
    heap.keep_freed_memory()  # ... that frees and allocates its directory's size as it goes
    code = asyncio.run(_drain(config, target.removeprefix("tcp://"), user or config.cluster_user,
                              password or config.cluster_password, mode))
    ctx.exit(code)


async def _drain(config, target: str, user: str, password: str, mode: str) -> int:
    from petrel.ha.scale_down import Migration, MigrationFailed, PreparedBranchesLeft
    from petrel.server.broker import Broker

    broker = Broker(config)
    broker.staged_recovery = True  # messages are built as they move, not all before the first
    emit, close = _progress(mode)
    try:
        await broker.start()
    except PetrelError as exc:
        emit({"event": "failed", "reason": str(exc)})
        close()
        raise
    admitting = None
    try:
        migration = Migration(broker, target, user=user, password=password,
                              on_progress=lambda p: emit(p.as_dict()))
        staged = broker.office.staged
        if staged is not None:  # messages built while the first ones move
            log.info("%d of the messages are built as they move", staged.pending, extra={"event": "drain.staged"})
            admitting = asyncio.get_running_loop().create_task(_admit_staged(staged, migration))
        try:
            moved = await migration.run()
        except MigrationFailed as exc:
            emit({"event": "failed", "reason": str(exc), "messages_moved": migration.moved})
            close()
            if isinstance(exc, PreparedBranchesLeft):
                print(f"petrel: error: drain of {config.data_dir} refused: {exc}", file=sys.stderr)
                return 1
            hint = ("give the target's cluster user and password (--user/--password, or --config with its "
                    "broker.toml)" if "login refused" in str(exc) else "once the target can take it")
            print(f"petrel: error: drain of {config.data_dir} failed: {exc}; what was not moved stays there: "
                  f"run the drain again, {hint}", file=sys.stderr)
            return 1
        emit({"event": "done", "messages_moved": moved, "bytes_moved": migration.bytes,
              "target_node": migration.target_node})
        close()
        print(f"moved {moved} messages from {config.data_dir} to node {migration.target_node} at {target}; "
              "nothing is left", file=sys.stderr)
        return 0
    finally:
        if admitting is not None:
            admitting.cancel()
        await broker.stop()


async def _admit_staged(staged, migration) -> None:
    """Build the recovered messages left unbuilt (core/staged.py) as the migration needs them,
    `ADMIT_CHUNK` at a time, each chunk one turn of the event loop, so the migration sends and
    reads its confirmations in between."""
    from petrel.server import heap

    try:
        while staged.pending:
            with heap.paused():  # the collector never traverses what recovery builds (server/heap.py)
                admitted = staged.admit(ADMIT_CHUNK)
                heap.settle()
            # none wanted now: the queue being moved holds enough (staged.AHEAD); look again soon
            await asyncio.sleep(0 if admitted else 0.002)
    except Exception as exc:  # a message that cannot be decoded: nothing more moves
        log.exception("cannot rebuild the recovered messages")
        migration.fail(f"cannot rebuild the recovered messages: {exc}")


def _progress(mode: str):
    """(emit(event dict), close()) for the chosen form of progress."""
    if mode == "json":
        def emit(event: dict) -> None:
            print(json.dumps(event), flush=True)

        return emit, lambda: None
    if mode == "bar":
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(TextColumn("draining"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("{task.fields[rate]} msg/s {task.fields[mib]} MiB"), TimeRemainingColumn(),
                       transient=False)
        task = bar.add_task("drain", total=None, rate="-", mib="0.0")
        bar.start()

        def emit(event: dict) -> None:
            if event.get("event") == "progress":
                bar.update(task, total=event["messages_total"] or None, completed=event["messages_moved"],
                           rate=f"{event['rate']:.0f}", mib=f"{event['bytes_moved'] / (1 << 20):.1f}")

        return emit, bar.stop
    return (lambda event: None), (lambda: None)
