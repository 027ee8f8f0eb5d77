"""``petrel cluster up|status|down``: a local cluster of broker processes (petrel.orchestrator.local)."""

from __future__ import annotations

from pathlib import Path

import click

from petrel.cli.tables import print_table

from petrel.orchestrator.local import DEFAULT_CLUSTER_NAME, DEFAULT_DATA_ROOT, ClusterSpec, LocalCluster

__all__ = ["cluster"]

LOAD_BALANCING = ("OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION")


_NUMERIC = ("PID", "MEMBERS", "BRIDGES", "BACKLOG")


def _figure(value: int | None) -> str:
    return "-" if value is None else str(value)


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    print_table(headers, rows, right=_NUMERIC)


def data_root_option(fn):
    return click.option("--data-root", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA_ROOT,
                        show_default=True, help="Directory holding cluster.json and the node directories.")(fn)


@click.group("cluster", help="Run a cluster of brokers on this host: up, status, down.")
def cluster() -> None:
    pass


@cluster.command("up", help="Configure and start N brokers clustered with each other, in the background.")
@click.option("--size", type=click.IntRange(1, 100), required=True, help="Number of nodes.")
@click.option("--base-port", type=click.IntRange(1, 65535), default=None,
              help="Ports of node-1: P (all protocols), P+1 (STOMP), P+2 (HTTP); each next node adds 100 "
                   "[default: 61616, 61613, 8161].")
@data_root_option
@click.option("--name", default=DEFAULT_CLUSTER_NAME, show_default=True, help="Cluster connection name.")
@click.option("--load-balancing", type=click.Choice(LOAD_BALANCING, case_sensitive=False), default="ON_DEMAND",
              show_default=True, help="message_load_balancing of the cluster connection.")
@click.option("--redistribution-delay", type=click.IntRange(-1), default=0, show_default=True, metavar="MS",
              help="redistribution_delay of every address (-1 = never, 0 = at once).")
@click.option("--timeout", type=click.FloatRange(1), default=60, show_default=True, metavar="SECONDS",
              help="How long to wait for every node's /health.")
def up(size: int, base_port: int | None, data_root: Path, name: str, load_balancing: str,
       redistribution_delay: int, timeout: float) -> None:
    spec = ClusterSpec(size=size, data_root=data_root, base_port=base_port, name=name,
                       load_balancing=load_balancing.upper(), redistribution_delay=redistribution_delay)
    local = LocalCluster(data_root)
    state = local.up(spec, timeout=timeout, progress=_progress)
    _print_table(["NODE", "URL", "STOMP", "CONSOLE", "PID"],
                 [[n.name, n.url, n.stomp, n.console, str(n.pid)] for n in state.nodes])
    click.echo(f"cluster {state.name}: {len(state.nodes)} nodes running; state in {local.state_path}; "
               f"stop with `petrel cluster down --data-root {local.data_root}`")


@cluster.command("status", help="The nodes of the cluster, whether they run, and how each sees the cluster: "
                                 "MEMBERS connected (itself included), BRIDGES up of all, BACKLOG messages "
                                 "waiting to be forwarded (exit 1 unless all nodes run).")
@data_root_option
@click.pass_context
def status(ctx: click.Context, data_root: Path) -> None:
    state, nodes = LocalCluster(data_root).status()
    _print_table(["NODE", "PID", "STATE", "URL", "CONSOLE", "MEMBERS", "BRIDGES", "BACKLOG"],
                 [[s.node.name, str(s.node.pid), s.state, s.node.url, s.node.console, _figure(s.members),
                   "-" if s.bridges is None else f"{s.bridges_up}/{s.bridges}", _figure(s.backlog)]
                  for s in nodes])
    running = sum(s.state == "running" for s in nodes)
    click.echo(f"cluster {state.name}: {running} of {len(nodes)} nodes running")
    ctx.exit(0 if running == len(nodes) else 1)


@cluster.command("down", help="Stop every node (SIGTERM, then SIGKILL after the timeout) and forget the cluster.")
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
    click.echo(f"cluster {state.name}: {len(state.nodes)} nodes stopped" + (", directories deleted" if purge else ""))
