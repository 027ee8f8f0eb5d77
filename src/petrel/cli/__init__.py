"""The ``petrel`` command line (also ``python -m petrel``).

Thin by design: each subcommand parses flags, builds a config and calls into the
library.  Every failure ends as one line on stderr, ``petrel: error: ...``, and
an exit code: 2 for bad usage or configuration, 1 for any other failure.

Subcommands live in their own modules and are imported only when used, so
``petrel --help`` stays fast and a broken optional command cannot break the rest.
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback
from typing import Any

import click

from petrel import __version__
from petrel.errors import PetrelError
from petrel.log import LEVELS, configure_logging, parse_level

__all__ = ["main", "PetrelGroup"]

logger = logging.getLogger(__name__)

PROG = "petrel"

# name -> "module:attribute" of a click command, imported on first use.
COMMANDS = {
    "run": "petrel.cli.run:run",
    "create": "petrel.cli.create:create",
    "data": "petrel.cli.data:data",
    "queue": "petrel.cli.queue:queue",
    "address": "petrel.cli.address:address",
    "producer": "petrel.cli.producer:producer",
    "consumer": "petrel.cli.consumer:consumer",
    "browser": "petrel.cli.browser:browser",
    "perf": "petrel.cli.perf:perf",
    "cluster": "petrel.cli.cluster:cluster",
    "ha": "petrel.cli.ha:ha",
    "drain": "petrel.cli.drain:drain",
    "spark": "petrel.cli.spark:spark",
    "user": "petrel.cli.user:user",
}


def fail(message: str, code: int) -> None:
    """Print ``petrel: error: <message>`` on stderr (one line) and exit ``code``."""
    click.echo(f"{PROG}: error: {' '.join(message.split())}", err=True)
    sys.exit(code)


class PetrelGroup(click.Group):
    """A click group with lazily imported commands and one-line errors."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        names.update(name for name in self._lazy if self._load(name) is not None)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self._lazy:
            command = self._load(cmd_name)
        return command

    def _load(self, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        module_name, _, attribute = self._lazy[name].partition(":")
        try:
            command = getattr(importlib.import_module(module_name), attribute)
        except Exception as exc:  # an optional command must not break the CLI
            logger.debug("command %r unavailable: %s", name, exc)
            return None
        if not isinstance(command, click.Command):
            logger.debug("command %r: %s is not a click command", name, self._lazy[name])
            return None
        self.add_command(command, name)
        return command

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if prog_name is None:
            prog_name = PROG
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:  # pragma: no cover - click returns these itself
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            hint = ""
            if exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            fail(exc.format_message() + hint, exc.exit_code)
        except click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code)
        except click.Abort:
            fail("aborted", 130)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except PetrelError as exc:
            fail(str(exc) or type(exc).__name__, exc.exit_code)
        except Exception as exc:
            hint = " (run with --log-level DEBUG for the traceback)"
            if logging.getLogger().isEnabledFor(logging.DEBUG):
                traceback.print_exc()
                hint = ""
            fail(f"internal error: {type(exc).__name__}: {exc}{hint}", 1)
        sys.exit(result if isinstance(result, int) else 0)


def _level(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        parse_level(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@click.group(cls=PetrelGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name=PROG)
@click.option("--log-level", default="INFO", show_default=True, envvar="PETREL_LOG_LEVEL",
              callback=_level, metavar="|".join(LEVELS),
              help="Lowest level logged (env PETREL_LOG_LEVEL).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              envvar="PETREL_LOG_FORMAT", help="Log line format (env PETREL_LOG_FORMAT).")
def main(log_level: str, log_format: str) -> None:
    """Petrel, a clustered, highly available message broker."""
    configure_logging(log_level, log_format)  # type: ignore[arg-type]
