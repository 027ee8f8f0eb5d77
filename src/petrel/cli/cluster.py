"""``petrel cluster up|status|scale|apply|down``: a local cluster of broker processes
(petrel.orchestrator.local), plain or as live-backup pairs (``--ha shared-store|replication
[--lock-manager zookeeper]``); ``scale`` and ``apply`` resize it with message migration
(petrel.orchestrator.scaling, on the decision core shared with the Kubernetes operator)."""

from __future__ import annotations

from pathlib import Path

import click

from petrel.cli.tables import print_table
from petrel.errors import PetrelError
from petrel.orchestrator.local import DEFAULT_CLUSTER_NAME, DEFAULT_DATA_ROOT, ClusterSpec, LocalCluster
from petrel.orchestrator.state import ClusterState, NodeStatus

__all__ = ["cluster"]

LOAD_BALANCING = ("OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION")


_NUMERIC = ("PID", "MEMBERS", "BRIDGES", "BACKLOG", "LAG", "ATTEMPT", "MOVED", "TOTAL", "RATE", "ETA")


def _figure(value: int | None) -> str:
    return "-" if value is None else str(value)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    print_table(headers, rows, right=_NUMERIC)


def data_root_option(fn):
    return click.option("--data-root", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA_ROOT,
                        show_default=True, help="Directory holding cluster.json and the node directories.")(fn)


@click.group("cluster", help="Run a cluster of brokers on this host: up, status, scale (or apply a spec), down.")
def cluster() -> None:
    pass


@cluster.command("up", help="Configure and start N brokers clustered with each other, in the background; with "
                             "--ha, N live-backup pairs (2N brokers: node-i and node-i-backup, pair-i).")
@click.option("--size", type=click.IntRange(1, 100), required=True, help="Number of nodes (with --ha: of pairs).")
@click.option("--base-port", type=click.IntRange(1, 65535), default=None,
              help="Ports of node-1: P (all protocols), P+1 (STOMP), P+2 (HTTP); each next node adds 100, "
                   "a backup 50 to its primary's [default: 61616, 61613, 8161].")
@data_root_option
@click.option("--name", default=DEFAULT_CLUSTER_NAME, show_default=True, help="Cluster connection name.")
@click.option("--load-balancing", type=click.Choice(LOAD_BALANCING, case_sensitive=False), default="ON_DEMAND",
              show_default=True, help="message_load_balancing of the cluster connection.")
@click.option("--redistribution-delay", type=click.IntRange(-1), default=0, show_default=True, metavar="MS",
              help="redistribution_delay of every address (-1 = never, 0 = at once).")
@click.option("--ha", type=click.Choice(("shared-store", "replication"), case_sensitive=False), default=None,
              help="Give each node a backup: on the same data directory (shared-store) or with its own copy "
                   "kept over the network (replication).")
@click.option("--lock-manager", type=click.Choice(("zookeeper",), case_sensitive=False), default=None,
              help="With --ha replication: start one ZooKeeper (Debian package `zookeeper`) and make the pairs "
                   "use it, so a lone pair fails over safely.")
@click.option("--lock-session-ms", type=click.IntRange(1000, 60000), default=18000, show_default=True,
              metavar="MS", help="The lock manager's session: a killed live's backup takes over after about this.")
@click.option("--timeout", type=click.FloatRange(1), default=60, show_default=True, metavar="SECONDS",
              help="How long to wait for every node to serve (or, a backup, to wait in sync).")
@click.pass_context
def up(ctx: click.Context, size: int, base_port: int | None, data_root: Path, name: str, load_balancing: str,
       redistribution_delay: int, ha: str | None, lock_manager: str | None, lock_session_ms: int,
       timeout: float) -> None:
    if lock_manager and (ha or "").lower() != "replication":
        raise click.UsageError("--lock-manager goes with --ha replication", ctx)
    spec = ClusterSpec(size=size, data_root=data_root, base_port=base_port, name=name,
                       load_balancing=load_balancing.upper(), redistribution_delay=redistribution_delay,
                       ha=ha.lower() if ha else None, lock_manager=lock_manager.lower() if lock_manager else None,
                       lock_session_ms=lock_session_ms)
    local = LocalCluster(data_root)
    state = local.up(spec, timeout=timeout, progress=_progress)
    stop = f"stop with `petrel cluster down --data-root {local.data_root}`"
    if state.ha is None:
        _print_table(["NODE", "URL", "STOMP", "CONSOLE", "PID"],
                     [[n.name, n.url, n.stomp, n.console, str(n.pid)] for n in state.nodes])
        click.echo(f"cluster {state.name}: {len(state.nodes)} nodes running; state in {local.state_path}; {stop}")
        return
    _print_table(["NODE", "PAIR", "ROLE", "URL", "STOMP", "CONSOLE", "PID"],
                 [[n.name, n.pair or "-", n.role, n.url, n.stomp, n.console, str(n.pid)] for n in state.nodes])
    waiting = "in sync" if state.ha == "replication" else "waiting"
    zk = f"; ZooKeeper on {state.zookeeper.connect_string}" if state.zookeeper else ""
    click.echo(f"cluster {state.name} ({state.ha}): {_count(state.pairs, 'pair')}, each a live and a backup "
               f"{waiting}{zk}; state in {local.state_path}; {stop}")


def _ha_rows(nodes: list[NodeStatus]) -> list[list[str]]:
    return [[s.node.name, s.node.pair or "-", s.node.role, s.ha_state or "-", s.sync or "-", _figure(s.lag),
             str(s.node.pid), s.state, s.node.url, s.node.console, _figure(s.members),
             "-" if s.bridges is None else f"{s.bridges_up}/{s.bridges}", _figure(s.backlog)]
            for s in nodes]


@cluster.command("status", help="The nodes of the cluster, whether they run, and how each sees the cluster: "
                                 "MEMBERS connected (itself included), BRIDGES up of all, BACKLOG messages "
                                 "waiting to be forwarded. With HA: each node's PAIR, configured ROLE, HA_STATE "
                                 "(live, backup, ...), replication SYNC state and LAG (operations); a waiting "
                                 "backup is 'standby'. After `cluster scale`: retired nodes and each DRAIN's state, "
                                 "progress (messages moved of the total, rate, ETA) and last error. Exit 1 unless "
                                 "every node runs (or stands by) and no drain is unfinished.")
@data_root_option
@click.pass_context
def status(ctx: click.Context, data_root: Path) -> None:
    local = LocalCluster(data_root)
    state, nodes = local.status(progress=_progress)
    if state.ha is None:
        _print_table(["NODE", "PID", "STATE", "URL", "CONSOLE", "MEMBERS", "BRIDGES", "BACKLOG"],
                     [[s.node.name, str(s.node.pid), _node_state(s), s.node.url, s.node.console, _figure(s.members),
                       "-" if s.bridges is None else f"{s.bridges_up}/{s.bridges}", _figure(s.backlog)]
                      for s in nodes])
        members = [s for s in nodes if not s.node.retired]
        running = sum(s.state == "running" for s in members)
        size = state.spec.size if state.spec else len(members)
        text = f"cluster {state.name}: {running} of {size} nodes running"
        pending = [d for d in state.drains if d.phase in ("running", "failed", "succeeded")]
        if state.drains:
            click.echo(text)
            _print_drains(state)
            text = f"{_count(len(pending), 'drain')} not finished" if pending else "every drain finished"
        click.echo(text)
        ctx.exit(0 if running == size == len(members) and not pending else 1)
    _print_table(["NODE", "PAIR", "ROLE", "HA_STATE", "SYNC", "LAG", "PID", "STATE", "URL", "CONSOLE", "MEMBERS",
                  "BRIDGES", "BACKLOG"], _ha_rows(nodes))
    ok = sum(s.state in ("running", "standby") for s in nodes)
    click.echo(_ha_summary(local, state, nodes) + f"; {ok} of {len(nodes)} brokers up")
    zk_ok = local.zookeeper_running(state)
    ctx.exit(0 if ok == len(nodes) and zk_ok is not False else 1)


def _node_state(s: NodeStatus) -> str:
    if not s.node.retired:
        return s.state
    return "retired" if s.state == "stopped" else f"{s.state}, retired"


def _print_drains(state: ClusterState) -> None:
    from petrel.orchestrator.drains import last_progress

    rows = []
    for d in state.drains:
        event = last_progress(d)
        phase = "succeeded, directory deleted" if d.phase == "deleted" else d.phase
        moved, total = event.get("messages_moved"), event.get("messages_total")
        if event.get("event") == "done":
            total = moved
        rate, eta = event.get("rate"), event.get("eta_s")
        rows.append([d.node, phase, str(d.attempts), _figure(moved), _figure(total),
                     "-" if rate is None else f"{float(rate):.0f}/s",
                     "-" if eta is None or d.phase != "running" else f"{float(eta):.0f} s",
                     d.target, d.reason or "-"])
    _print_table(["DRAIN", "STATE", "ATTEMPT", "MOVED", "TOTAL", "RATE", "ETA", "TARGET", "LAST_ERROR"], rows)


def _ha_summary(local: LocalCluster, state: ClusterState, nodes: list[NodeStatus]) -> str:
    pairs = sorted({s.node.pair for s in nodes if s.node.pair})
    served = [p for p in pairs if any(s.node.pair == p and s.healthy and s.ha_state == "live" for s in nodes)]
    backups = sum(s.standby for s in nodes)
    text = (f"cluster {state.name} ({state.ha}): {len(served)} of {_count(len(pairs), 'pair')} served, "
            f"{_count(backups, 'backup')} waiting")
    unserved = [p for p in pairs if p not in served]
    if unserved:
        text += f" (no live in {', '.join(unserved)})"
    zk = local.zookeeper_running(state)
    if zk is not None:
        text += f"; ZooKeeper {state.zookeeper.connect_string} {'running' if zk else 'NOT running'}"
    return text


def _load_spec(path: Path) -> dict:
    """A spec file: ``size``, ``persistence_enabled``, ``message_migration`` (TOML), as the
    operator's ``deploymentPlan``."""
    import tomllib

    try:
        body = tomllib.loads(path.read_text())
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror or exc}", param_hint="SPEC") from None
    except tomllib.TOMLDecodeError as exc:
        raise click.BadParameter(f"{path} is not TOML: {exc}", param_hint="SPEC") from None
    known = {"size": int, "persistence_enabled": bool, "message_migration": bool}
    for key, value in body.items():
        if key not in known:
            raise click.BadParameter(f"{path}: unknown key {key!r}; a spec has {', '.join(known)}",
                                     param_hint="SPEC")
        if type(value) is not known[key]:
            raise click.BadParameter(f"{path}: {key} must be {'an integer' if known[key] is int else 'true or false'}",
                                     param_hint="SPEC")
    if "size" not in body or body["size"] < 1:
        raise click.BadParameter(f"{path}: size (at least 1) is required", param_hint="SPEC")
    return body


def _converge(data_root: Path, size: int | None, spec_file: Path | None, migration: bool | None,
              timeout: float, max_attempts: int | None, parallel: int) -> None:
    from dataclasses import asdict

    from petrel.orchestrator.converge import ConvergeTimeout
    from petrel.orchestrator.reconcile import Policy
    from petrel.orchestrator.scaling import scale
    from petrel.orchestrator.state import DesiredSpec

    asked = _load_spec(spec_file) if spec_file else {}
    local = LocalCluster(data_root)
    state = local.load()
    if state is None:
        raise click.UsageError(f"no cluster in {local.data_root}; start one with `petrel cluster up`")
    current = asdict(state.spec) if state.spec else {"size": len(state.members)}
    wanted = {**current, **asked}
    if size is not None:
        wanted["size"] = size
    if migration is not None:
        wanted["message_migration"] = migration
    desired = DesiredSpec(**wanted)
    click.echo(f"scaling cluster {state.name} to {_count(desired.size, 'node')} (persistence "
               f"{'on' if desired.persistence_enabled else 'off'}, message migration "
               f"{'on' if desired.message_migration else 'off'})", err=True)
    policy = Policy(max_attempts=max_attempts, max_parallel_drains=parallel)
    try:
        outcome = scale(local, desired, policy=policy, timeout=timeout, progress=_progress,
                        on_round=_drain_reporter(local))
    except ConvergeTimeout as exc:
        raise PetrelError(f"{exc}; drains and brokers keep running: watch `petrel cluster status "
                          f"--data-root {local.data_root}` and run this again to carry on") from None
    if outcome.plan.stuck:
        raise PetrelError("; ".join(outcome.plan.stuck) + "; run this again with a higher --max-attempts (or "
                          "without it)")
    state = local.load()
    kept = [n.name for n in state.nodes if n.retired]
    click.echo(f"cluster {state.name}: {_count(len(state.members), 'node')} running"
               + (f"; kept retired data of {', '.join(kept)} (message migration off)" if kept else ""))


def _drain_reporter(local: LocalCluster, every: float = 5.0):
    """A converge callback: every few seconds, one line per running drain from its JSON progress."""
    import time

    from petrel.orchestrator.drains import last_progress

    next_at = [time.monotonic() + every]

    def report(_seen, _plan) -> None:
        if time.monotonic() < next_at[0]:
            return
        next_at[0] = time.monotonic() + every
        state = local.load()
        for d in state.drains if state else ():
            if d.phase != "running":
                continue
            e = last_progress(d)
            if e.get("event") == "progress":
                eta = e.get("eta_s")
                _progress(f"draining {d.node} (attempt {d.attempts}): {e.get('messages_moved', 0)} of "
                          f"{e.get('messages_total', '?')} messages, {float(e.get('rate') or 0):.0f}/s"
                          + ("" if eta is None else f", about {float(eta):.0f} s left"))
            else:
                _progress(f"draining {d.node} (attempt {d.attempts}): starting")
    return report


def _scale_options(fn):
    fn = click.option("--timeout", type=click.FloatRange(1), default=600, show_default=True, metavar="SECONDS",
                      help="How long to wait for the cluster to match (brokers, drains) before exit 1; what runs "
                           "goes on, and a rerun carries on.")(fn)
    fn = click.option("--max-attempts", type=click.IntRange(1), default=None,
                      help="Give up on a drain after this many failures (keeping its directory) "
                           "[default: retry with capped backoff until the timeout].")(fn)
    fn = click.option("--parallel-drains", type=click.IntRange(1, 16), default=1, show_default=True,
                      help="Drains running at once.")(fn)
    return data_root_option(fn)


@cluster.command("scale", help="Resize the cluster to --size nodes. Scaling down stops the highest nodes, drains "
                                "each one's data directory onto a running node (`petrel drain`), deletes a "
                                "directory only after its drain exited 0, and retries failed drains with backoff; "
                                "scaling up starts new nodes on empty directories (never on drained data). Exit 0 "
                                "when the cluster matches, 1 otherwise (with what it waits for).")
@click.option("--size", type=click.IntRange(1, 100), default=None, help="Number of nodes wanted.")
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A TOML spec (size, persistence_enabled, message_migration); --size overrides its size.")
@click.option("--message-migration/--no-message-migration", default=None,
              help="Drain the data of leaving nodes (default: on, or the spec's).")
@_scale_options
def scale_cmd(size: int | None, spec_file: Path | None, message_migration: bool | None, data_root: Path,
              timeout: float, max_attempts: int | None, parallel_drains: int) -> None:
    if size is None and spec_file is None:
        raise click.UsageError("give --size N or --spec FILE")
    _converge(data_root, size, spec_file, message_migration, timeout, max_attempts, parallel_drains)


@cluster.command("apply", help="Make the cluster match a TOML spec (size, persistence_enabled, "
                                "message_migration), as the operator's PetrelBroker deploymentPlan: the "
                                "declarative form of `cluster scale`.")
@click.argument("spec_file", metavar="SPEC", type=click.Path(dir_okay=False, path_type=Path))
@_scale_options
def apply_cmd(spec_file: Path, data_root: Path, timeout: float, max_attempts: int | None,
              parallel_drains: int) -> None:
    _converge(data_root, None, spec_file, None, timeout, max_attempts, parallel_drains)


@cluster.command("down", help="Stop every node (SIGTERM, then SIGKILL after the timeout), the running drains "
                               "(their data directories are kept), and the ZooKeeper if `up` started one, and forget "
                               "the cluster.")
@data_root_option
@click.option("--purge", is_flag=True, help="Also delete the node directories (configs, logs, data).")
@click.option("--timeout", type=click.FloatRange(0), default=30, show_default=True, metavar="SECONDS",
              help="How long to wait for the nodes to exit before killing them.")
def down(data_root: Path, purge: bool, timeout: float) -> None:
    local = LocalCluster(data_root)
    state = local.down(purge=purge, timeout=timeout, progress=_progress)
    if state is None:
        click.echo(f"no cluster in {local.data_root} (no cluster.json); nothing to stop")
        return
    zk = " and ZooKeeper" if state.zookeeper else ""
    click.echo(f"cluster {state.name}: {len(state.nodes)} nodes{zk} stopped" + (", directories deleted" if purge else ""))
