"""``petrel run``: one broker in the foreground."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from petrel.config import load_config
from petrel.errors import PetrelError

__all__ = ["run", "DEFAULT_CONFIG"]

logger = logging.getLogger(__name__)

#: Read when no --config is given and the file exists in the current directory.
DEFAULT_CONFIG = Path("broker.toml")


@click.command("run")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), envvar="PETREL_CONFIG",
              help="Configuration file (default ./broker.toml if present; env PETREL_CONFIG).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the journal, bindings, paging and large messages.")
@click.option("--name", help="Broker name.")
@click.option("--port-offset", type=int, help="Added to every acceptor port.")
@click.option("--host", help="Interface to listen on.")
@click.option("--port", type=int, help="All-protocols port (-1 = off, 0 = any free port).")
@click.option("--stomp-port", type=int, help="STOMP-only port (-1 = off, 0 = any free port).")
@click.option("--http-port", type=int, help="Management HTTP port (-1 = off, 0 = any free port).")
@click.option("--skip-damaged", "journal_skip_damaged", is_flag=True, default=None,
              help="Start even if the journal is damaged before its tail, skipping the damaged records "
                   "(they are logged).")
@click.pass_context
def run(ctx: click.Context, config_file: Path | None, **flags: object) -> None:
    """Run a broker in the foreground until SIGTERM or SIGINT.

    Settings come from the config file, then PETREL_* environment variables,
    then these flags.
    """
    path = config_file
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    config = load_config(path, overrides=flags)
    logger.debug("configuration: %s", config)
    try:
        from petrel.server.broker import run as run_broker
    except ImportError as exc:
        raise PetrelError(f"the broker cannot be loaded: {exc}") from None
    code = run_broker(config)
    ctx.exit(code if isinstance(code, int) else 0)
