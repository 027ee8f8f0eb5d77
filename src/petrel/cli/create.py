"""``petrel create DIR``: a broker instance directory, like ``artemis create``.

The instance holds ``broker.toml`` and ``data/{journal,bindings}``.  The
``broker.toml`` is generated from the config model itself: every setting with
its description and default, commented out except the instance's own name,
data directory and port offset, so the listed defaults cannot drift from code.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shlex
import tomllib
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel

from petrel import __version__
from petrel.config import AddressSettingsModel, BrokerConfig, load_config
from petrel.core.settings import AddressSettings
from petrel.errors import PetrelError, UsageError
from petrel.security.config import SecurityModel
from petrel.security.permissions import ADMIN_ROLE, PERMISSIONS
from petrel.security.users import UserStore

__all__ = ["create", "render_broker_toml", "toml_value"]

CONFIG_NAME = "broker.toml"
#: Settings written active (uncommented) in a new instance.
ACTIVE = ("name", "data_dir", "port_offset")
DATA_SUBDIRS = ("journal", "bindings")
#: Settings that are TOML tables: written after the plain keys (address settings and the cluster).
TABLES = ("address_settings", "connectors", "broadcast_groups", "discovery_groups", "cluster_connections",
          "grouping_handler", "ha_policy", "security", "security_settings")
CLUSTER_EXAMPLE = """\
# A cluster (see the README): every node names how the others reach it and at least one
# seed; set cluster_password above to the same secret on every node.
#
# [[cluster_connections]]
#   name = "petrel-cluster"
#   connector = "tcp://this-host:61616"
#   static_connectors = ["tcp://other-host:61616"]
#   message_load_balancing = "ON_DEMAND"      # OFF, STRICT, ON_DEMAND, OFF_WITH_REDISTRIBUTION
#   max_hops = 1
"""


HA_EXAMPLE = """\
# High availability (see the README): a backup that takes over when this broker fails.
#
# [ha_policy]
#   replication = "primary"           # or "backup"; shared_store = "primary"|"backup" shares one data_dir
#   group_name = "pair-a"             # pairs a backup with the primary of the same group
#   failover_on_shutdown = false      # a graceful stop hands over to the backup
#   check_for_live_server = true      # a returning primary syncs from its backup, then takes over
#   lock_manager = { type = "zookeeper", connect_string = "zk1:2181,zk2:2181,zk3:2181" }
"""


SECURITY_EXAMPLE = """\
# Security (see the README): who may connect, and what each role may do per address.
#
# [security]
#   users_file = "data/users.toml"    # users, roles and scrypt hashes; edit with `petrel user`
#   allow_anonymous = false           # true: clients without credentials get anonymous_role
#   anonymous_role = "anonymous"
#   certificate_users = { "CN=app,O=Example" = "app" }   # TLS client certificate -> user
#   login_failure_delay = 1000        # ms a failed login waits before it is refused
#
# [security_settings."orders.#"]      # the most specific pattern wins, with no inheritance;
#   send = ["app"]                    # without a "#" table, "#" grants everything to role admin
#   consume = ["app", "audit"]        # send consume browse createAddress deleteAddress
#   createAddress = ["app"]           # createDurableQueue deleteDurableQueue createNonDurableQueue
#   createDurableQueue = ["app"]      # deleteNonDurableQueue manage view edit
"""


def toml_value(value: Any) -> str:
    """``value`` as a TOML literal (str, Path, bool, int, float, tuple/list)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        # JSON string escapes are valid TOML basic-string escapes; TOML also wants DEL escaped.
        return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _comment(text: str | None) -> list[str]:
    return [f"# {text}"] if text else []


def _describe(model: type[BaseModel], field: str) -> str | None:
    return model.model_fields[field].description


def render_broker_toml(*, name: str, data_dir: str = "data", port_offset: int = 0,
                       cluster: dict[str, Any] | None = None, ha: tuple[str, str] | None = None,
                       allow_anonymous: bool = False) -> str:
    """The text of a new instance's ``broker.toml``; `cluster`: connector, static_connectors,
    message_load_balancing and cluster_password of an active cluster connection; `ha`: (kind,
    role) of an active [ha_policy], kind shared_store or replication; `allow_anonymous`: clients
    without credentials may do everything (role anonymous on "#")."""
    active = {"name": name, "data_dir": data_dir, "port_offset": port_offset}
    if cluster is not None:
        active.update(cluster_user="petrel-cluster", cluster_password=cluster["cluster_password"])
    lines = [
        f"# Petrel broker {toml_value(name)}, made by `petrel create` (Petrel {__version__}).",
        "#",
        "# Every setting is listed with its default; uncomment a line to change it.",
        "# PETREL_<SETTING> environment variables (e.g. PETREL_PORT_OFFSET=1) override",
        "# this file, and `petrel run` flags override both.",
        "",
    ]
    for field, info in BrokerConfig.model_fields.items():
        if field in TABLES:
            continue
        lines.extend(_comment(info.description))
        if field in active:
            lines.append(f"{field} = {toml_value(active[field])}")
        else:
            default = info.get_default(call_default_factory=True)
            lines.append(f"# {field} = {'<unset>' if default is None else toml_value(default)}")
        lines.append("")

    lines += [
        "# Address settings, per address pattern: words are separated by \".\", \"*\" matches",
        "# one word and \"#\" any number of words.  For each address, every matching pattern",
        "# applies, field by field, the most specific one first (an exact name beats \"*\",",
        "# which beats \"#\"); anything left unset takes the default shown below.",
        "# Add more tables the same way, e.g. [address_settings.\"orders.#\"].",
        "#",
        "# [address_settings.\"#\"]",
    ]
    defaults = AddressSettings()
    for field in dataclasses.fields(AddressSettings):
        lines.extend(_comment(_describe(AddressSettingsModel, field.name)))
        value = getattr(defaults, field.name)
        shown = "<unset>" if value is None else toml_value(value)
        lines.append(f"# {field.name} = {shown}")
    lines.append("")
    if ha is None:
        lines.append(HA_EXAMPLE)
    else:
        kind, role = ha
        lines += ["[ha_policy]", f"{kind} = {toml_value(role)}",
                  "# failover_on_shutdown = false, allow_failback = true, check_for_live_server = false",
                  "# (replication) group_name, lock_manager = { type = \"zookeeper\", connect_string = \"...\" }",
                  ""]
    if allow_anonymous:
        role = SecurityModel().anonymous_role
        lines += ["# Anonymous clients (created with --allow-anonymous) may do everything; the admin role too.",
                  "[security]", "allow_anonymous = true", f"anonymous_role = {toml_value(role)}", "",
                  '[security_settings."#"]']
        lines += [f"{permission} = {toml_value([role, ADMIN_ROLE])}" for permission in PERMISSIONS]
        lines.append("")
    else:
        lines.append(SECURITY_EXAMPLE)
    if cluster is None:
        lines.append(CLUSTER_EXAMPLE)
    else:
        lines += [
            "[[cluster_connections]]",
            'name = "petrel-cluster"',
            f"connector = {toml_value(cluster['connector'])}",
            f"static_connectors = {toml_value(list(cluster['static_connectors']))}",
            f"message_load_balancing = {toml_value(cluster['message_load_balancing'])}",
            "max_hops = 1",
            "",
        ]
    return "\n".join(lines)


@click.command("create")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", help="Broker name (default: the directory's name).")
@click.option("--port-offset", type=int, default=0, show_default=True,
              help="Added to every acceptor port, to run several brokers on one host.")
@click.option("--force", is_flag=True, help="Write into a directory that is not empty (overwrites broker.toml).")
@click.option("--cluster", "connector", metavar="URL",
              help="Join a cluster: how the other nodes reach this one (tcp://host:port).")
@click.option("--static-connector", "static_connectors", multiple=True, metavar="URL",
              help="A seed node of the cluster (repeat for several; one is enough).")
@click.option("--cluster-password", envvar="PETREL_CLUSTER_PASSWORD",
              help="The secret every node of the cluster shares (env PETREL_CLUSTER_PASSWORD).")
@click.option("--message-load-balancing", default="ON_DEMAND", show_default=True,
              type=click.Choice(["OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION"], case_sensitive=False))
@click.option("--ha", type=click.Choice(["live-only", "shared-store", "replication"]), default="live-only",
              show_default=True, help="High availability: pair this broker with a backup (see --ha-role).")
@click.option("--ha-role", type=click.Choice(["primary", "backup"]), default="primary", show_default=True,
              help="This broker's half of the pair.")
@click.option("--data-dir", default="data", show_default=True,
              help="Data directory (relative to DIRECTORY); shared store: the one both halves share.")
@click.option("--user", "admin_user", default=ADMIN_ROLE, show_default=True,
              help="The administrator written to the users file (role admin).")
@click.option("--password", "admin_password",
              help="The administrator's password (default: a generated one, shown once).")
@click.option("--allow-anonymous", is_flag=True,
              help="Clients without credentials may do everything (no administrator is written).")
def create(directory: Path, name: str | None, port_offset: int, force: bool, connector: str | None,
           static_connectors: tuple[str, ...], cluster_password: str | None, message_load_balancing: str,
           ha: str, ha_role: str, data_dir: str, admin_user: str, admin_password: str | None,
           allow_anonymous: bool) -> None:
    """Create a broker instance in DIRECTORY: broker.toml, data directories and an administrator
    in the users file (DIRECTORY/<data-dir>/users.toml)."""
    if directory.exists() and any(directory.iterdir()) and not force:
        raise UsageError(f"{directory} is not empty; use --force to create the instance there anyway")
    if name is None:
        name = directory.resolve().name or "petrel"
    # Bad flag values fail here, before anything is written, with load_config's messages.
    load_config(None, env={}, overrides={"name": name, "port_offset": port_offset})
    cluster = None
    if connector is not None:
        if not cluster_password:
            raise UsageError("--cluster needs --cluster-password (the same secret on every node)")
        cluster = {"connector": connector, "static_connectors": static_connectors,
                   "cluster_password": cluster_password, "message_load_balancing": message_load_balancing.upper()}
    elif static_connectors or cluster_password:
        raise UsageError("--static-connector and --cluster-password go with --cluster URL")
    if ha == "replication" and cluster is None:
        raise UsageError("--ha replication needs --cluster URL, --static-connector URL (the other half) and "
                         "--cluster-password: the two halves find each other through the cluster connection")
    pairing = None if ha == "live-only" else (ha.replace("-", "_"), ha_role)
    if allow_anonymous and admin_password is not None:
        raise UsageError("--password names the administrator's password: not with --allow-anonymous")
    text = render_broker_toml(name=name, data_dir=data_dir, port_offset=port_offset, cluster=cluster, ha=pairing,
                              allow_anonymous=allow_anonymous)
    try:
        BrokerConfig.model_validate(tomllib.loads(text))  # the template itself must always load
    except ValueError as exc:
        raise UsageError(f"bad cluster or HA option: {' '.join(str(exc).split())}") from None

    config_path = directory / CONFIG_NAME
    created = [config_path]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        config_path.write_text(text, encoding="utf-8")
        for sub in DATA_SUBDIRS:
            path = directory / data_dir / sub
            path.mkdir(parents=True, exist_ok=True)
            created.append(path)
        if not allow_anonymous:
            generated = admin_password is None
            admin_password = _write_admin(directory / data_dir / "users.toml", admin_user, admin_password)
            created.append(directory / data_dir / "users.toml")
    except OSError as exc:
        raise PetrelError(f"cannot create the instance in {directory}: {exc.strerror or exc}") from None

    click.echo(f"Created broker instance {name!r} in {directory}:")
    for path in created:
        click.echo(f"  {path}{'/' if path.is_dir() else ''}")
    if allow_anonymous:
        click.echo("Anonymous clients may do everything (--allow-anonymous).")
    elif generated:
        click.echo(f"Administrator {admin_user!r}, password {admin_password!r} (shown only this once; change it "
                   f"with `petrel user reset {admin_user} --config {shlex.quote(str(config_path))}`).")
    else:
        click.echo(f"Administrator {admin_user!r} with the password given.")
    click.echo("Start it with:")
    click.echo(f"  petrel run --config {shlex.quote(str(config_path))}")


def _write_admin(path: Path, user: str, password: str | None) -> str:
    """``user`` (role admin) in the users file at ``path``, with ``password`` or a generated one."""
    if password is None:
        password = secrets.token_urlsafe(12)
    store = UserStore.load(path)
    try:
        if user in store.users:  # (--force over an instance)
            store.reset(user, password=password, roles=[ADMIN_ROLE])
        else:
            store.add(user, password, [ADMIN_ROLE])
    except ValueError as exc:
        raise UsageError(f"--user: {exc}") from None
    store.save()
    return password
