"""`eos cluster ...`: a local Apache Kafka (KRaft) cluster from the Maven-resolved jars."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from eos.cli.app import app
from localkafka import ClusterError, LocalCluster, ToolMissingError
from localkafka.cluster import format_features, parse_feature

cluster_app = typer.Typer(no_args_is_help=True, help="Start, inspect, fault and stop a local KRaft cluster.")
app.add_typer(cluster_app, name="cluster")
console = Console()

DirOption = typer.Option(None, "--dir", help="Cluster directory [env EOS_CLUSTER_DIR, default ~/.eos/cluster]")


def cluster_dir(path: Path | None) -> Path:
    if path is not None:
        return path
    return Path(os.environ.get("EOS_CLUSTER_DIR", "~/.eos/cluster")).expanduser()


def _open(path: Path | None) -> LocalCluster:
    try:
        return LocalCluster.open(cluster_dir(path))
    except ClusterError as exc:
        console.print(str(exc), style="red", markup=False)  # its text may hold [brackets]
        raise typer.Exit(1) from None


@cluster_app.command()
def up(brokers: int = typer.Option(1, "--brokers", "-b", help="1 or 3 brokers"),
       dir: Path | None = DirOption,
       timeout: float = typer.Option(180, help="Seconds to wait for the cluster to accept transactions"),
       feature: list[str] = typer.Option([], "--feature", metavar="NAME=LEVEL",
                                         help="Format the storage with this feature level, e.g. "
                                              "transaction.version=1 (the transactions of a Kafka before 4.0); "
                                              "repeatable")) -> None:
    """Start a cluster (formats storage on first start) and wait until transactions work."""
    root = cluster_dir(dir)
    try:
        features = dict(parse_feature(f) for f in feature)
        if LocalCluster.exists(root):
            existing = LocalCluster.open(root)
            if feature and features != existing.features:
                raise ClusterError(f"the cluster in {root} was formatted with {format_features(existing.features)}"
                                   f", not {format_features(features)}: `eos cluster down` it (without --keep-data) "
                                   "first")
            if existing.is_running():
                console.print(f"A cluster is already running in {root}: {existing.bootstrap_servers}")
                return
            cluster = existing  # stopped earlier with --keep-data: start it again
        else:
            cluster = LocalCluster(root, brokers, features=features)
        cluster.up(timeout=timeout)
    except (ClusterError, ToolMissingError) as exc:
        console.print(str(exc), style="red", markup=False)  # its text may hold [brackets]
        raise typer.Exit(1) from None
    console.print(f"Kafka cluster up ({len(cluster.nodes)} broker(s)): [bold]{cluster.bootstrap_servers}[/bold]")
    console.print(f"  export EOS_BOOTSTRAP_SERVERS={cluster.bootstrap_servers}    (also in {root / 'bootstrap.env'})")


@cluster_app.command()
def status(dir: Path | None = DirOption) -> None:
    """Bootstrap servers and each broker's state."""
    cluster = _open(dir)
    console.print(f"bootstrap servers: [bold]{cluster.bootstrap_servers}[/bold]")
    if cluster.features:
        console.print(f"formatted with {format_features(cluster.features)}")
    table = Table("node", "process", "pid", "address", "answers", "in metadata")
    rows = cluster.status()
    for s in rows:
        table.add_row(str(s.node_id), s.state, str(s.pid or "-"), s.bootstrap, _yes(s.answers), _yes(s.in_metadata))
    console.print(table)
    console.print(f"{sum(s.answers for s in rows)} of {len(rows)} broker(s) live")


@cluster_app.command()
def env(dir: Path | None = DirOption) -> None:
    """Print `export EOS_BOOTSTRAP_SERVERS=...` (use with eval)."""
    typer.echo(f"export EOS_BOOTSTRAP_SERVERS={_open(dir).bootstrap_servers}")


@cluster_app.command()
def down(dir: Path | None = DirOption,
         keep_data: bool = typer.Option(False, "--keep-data", help="Keep topics for the next `up`"),
         timeout: float = typer.Option(30, help="Seconds to wait for clean shutdown before SIGKILL")) -> None:
    """Stop every broker cleanly (SIGKILL after the timeout) and delete the data unless --keep-data."""
    root = cluster_dir(dir)
    if not LocalCluster.exists(root):
        console.print(f"No cluster in {root}")
        return
    LocalCluster.open(root).down(keep_data=keep_data, timeout=timeout)
    console.print("Kafka cluster stopped" + (" (data kept)" if keep_data else " and its data removed"))


def _fault(name: str, help_text: str) -> None:
    def command(node: int = typer.Argument(..., help="Broker node id"), dir: Path | None = DirOption) -> None:
        cluster = _open(dir)
        try:
            getattr(cluster, name)(node)
        except ClusterError as exc:
            console.print(str(exc), style="red", markup=False)  # its text may hold [brackets]
            raise typer.Exit(1) from None
        console.print(f"broker {node}: {name} done ({cluster.state(node)})")

    command.__doc__ = help_text
    cluster_app.command(name=name)(command)


for _name, _help in [("kill", "SIGKILL one broker."), ("stop", "Stop one broker cleanly (SIGTERM)."),
                     ("pause", "SIGSTOP one broker."), ("resume", "SIGCONT one broker."),
                     ("start", "Start a stopped broker and wait until it rejoins."),
                     ("restart", "Clean bounce of one broker; waits until it rejoins.")]:
    _fault(_name, _help)


def _yes(flag: bool) -> str:
    return "[green]yes[/green]" if flag else "[red]no[/red]"
