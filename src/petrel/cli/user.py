"""`petrel user add|list|rm|reset`: the users file's users and roles, like `artemis user`.

The file is the one a broker reads: ``--user-file FILE``, or the ``[security] users_file`` of
``--config broker.toml`` (default ``./broker.toml`` if present, as for `petrel run`; without
a setting, ``<data_dir>/users.toml``). A running broker sees a change at its next login: the
connections already open keep the user they logged in as.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from petrel.cli.tables import print_table
from petrel.config import load_config
from petrel.errors import PetrelError, UsageError
from petrel.security.guard import users_file_of
from petrel.security.users import UserStore

__all__ = ["user"]

DEFAULT_CONFIG = Path("broker.toml")


def _file_options(fn):
    fn = click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
                      envvar="PETREL_CONFIG", help="The broker's configuration: its [security] users_file "
                      "(default ./broker.toml if present; env PETREL_CONFIG).")(fn)
    fn = click.option("--user-file", type=click.Path(dir_okay=False, path_type=Path),
                      help="The users file itself (instead of --config).")(fn)
    return fn


def _roles(values: tuple[str, ...]) -> list[str]:
    return [role.strip() for value in values for role in value.split(",") if role.strip()]


def _store(user_file: Path | None, config_file: Path | None) -> UserStore:
    if user_file is not None and config_file is not None:
        raise UsageError("give --user-file or --config, not both")
    if user_file is None:
        path = config_file
        if path is None and DEFAULT_CONFIG.is_file():
            path = DEFAULT_CONFIG
        user_file = users_file_of(load_config(path, env=os.environ))
    return UserStore.load(user_file)


def _save(store: UserStore, what: str) -> None:
    try:
        store.save()
    except OSError as exc:
        raise PetrelError(f"cannot write {store.path}: {exc.strerror or exc}") from None
    click.echo(f"{what} ({store.path})")


@click.group("user")
def user() -> None:
    """Manage the users and roles of a broker's users file."""


@user.command("add")
@click.argument("name")
@click.option("--password", help="The new user's password (prompted for if not given).")
@click.option("--role", "roles", multiple=True, required=True,
              help="A role of the user (repeat, or separate with commas).")
@_file_options
def add(name: str, password: str | None, roles: tuple[str, ...], user_file: Path | None,
        config_file: Path | None) -> None:
    """Add user NAME with its password and roles."""
    store = _store(user_file, config_file)
    if password is None:
        password = click.prompt(f"password for {name}", hide_input=True, confirmation_prompt=True)
    try:
        store.add(name, password, _roles(roles))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _save(store, f"added user {name!r} with roles {', '.join(_roles(roles))}")


@user.command("list")
@click.argument("name", required=False)
@_file_options
def list_users(name: str | None, user_file: Path | None, config_file: Path | None) -> None:
    """List the users and their roles (or only user NAME)."""
    store = _store(user_file, config_file)
    users = sorted(store.users.values(), key=lambda u: u.name)
    if name is not None:
        users = [u for u in users if u.name == name]
        if not users:
            raise PetrelError(f"no user {name!r} in {store.path}")
    print_table(["USER", "ROLES"], [[u.name, ",".join(u.roles)] for u in users])


@user.command("rm")
@click.argument("name")
@_file_options
def remove(name: str, user_file: Path | None, config_file: Path | None) -> None:
    """Remove user NAME."""
    store = _store(user_file, config_file)
    try:
        store.remove(name)
    except KeyError:
        raise PetrelError(f"no user {name!r} in {store.path}") from None
    _save(store, f"removed user {name!r}")


@user.command("reset")
@click.argument("name")
@click.option("--password", help="The new password (prompted for if neither it nor --role is given).")
@click.option("--role", "roles", multiple=True, help="The user's new roles (repeat, or separate with commas).")
@_file_options
def reset(name: str, password: str | None, roles: tuple[str, ...], user_file: Path | None,
          config_file: Path | None) -> None:
    """Give user NAME a new password and/or new roles."""
    store = _store(user_file, config_file)
    if name not in store.users:
        raise PetrelError(f"no user {name!r} in {store.path}")
    if password is None and not roles:
        password = click.prompt(f"new password for {name}", hide_input=True, confirmation_prompt=True)
    try:
        store.reset(name, password=password, roles=_roles(roles) if roles else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    changed = " and ".join(x for x, given in (("password", password is not None), ("roles", bool(roles))) if given)
    _save(store, f"reset the {changed} of user {name!r}")
