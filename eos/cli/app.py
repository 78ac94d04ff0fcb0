"""The `eos` command line's commands (typer), gathered: its own and those of higher layers (e.g. `eos chaos`,
from the `chaos` package), plugged in through the `eos.cli` entry-point group so that `eos` never imports the
layers above it."""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from eos.cli.audit import audit_app
from eos.cli.cluster import cluster_app
from eos.cli.store import store_app
from eos.cli.topics import topics_app

__all__ = ["app", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Exactly-once Kafka pipelines on Spark: run jobs, audit output, manage a local Kafka.")
app.add_typer(cluster_app, name="cluster")
app.add_typer(audit_app, name="audit")
app.add_typer(topics_app, name="topics")
app.add_typer(store_app, name="store")


def _register_commands() -> None:
    from eos.cli import commands, reset  # noqa: F401  (register run / demo / reset / kafka / spark on `app`)

    for ep in entry_points(group="eos.cli"):
        app.add_typer(ep.load(), name=ep.name)


def main() -> None:
    _register_commands()
    app()
