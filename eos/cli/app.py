"""The `eos` command line's commands (typer), gathered: its own and those of higher layers (e.g. `eos chaos`,
from the `chaos` package), plugged in through the `eos.cli` entry-point group so that `eos` never imports the
layers above it.

Each module of commands adds them to `app` when imported. `main` imports only the module of the command asked
for (`eos run` needs neither the local cluster's tooling nor the auditor's, nor the higher layers'), and every
module for anything else: `eos`, `eos --help`, a command of a higher layer, a mistyped one (whose error then
offers the names there are)."""

from __future__ import annotations

import inspect
import sys
from importlib import import_module
from importlib.metadata import entry_points

import typer

__all__ = ["app", "main", "COMMANDS"]

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Exactly-once Kafka pipelines on Spark: run jobs, audit output, manage a local Kafka.")

@app.callback()
def _commands() -> None:
    # (a callback keeps `eos` a group of commands when `register_commands` added one command only, as for `eos
    # reset`: typer runs the only command of an app without a callback as the app itself)
    pass


#: the framework's own commands, and the module that adds each to `app` (in the order `eos --help` lists them)
COMMANDS = {
    "cluster": "eos.cli.cluster", "audit": "eos.cli.audit", "topics": "eos.cli.topics", "store": "eos.cli.store",
    "kafka": "eos.cli.commands", "spark": "eos.cli.commands", "describe": "eos.cli.commands",
    "run": "eos.cli.commands", "demo": "eos.cli.commands", "package": "eos.cli.commands", "reset": "eos.cli.reset",
}


def register_commands(argv: list[str]) -> None:
    """Add to `app` the command `argv` (the arguments after `eos`) asks for, or, when it names none of the
    framework's own, all of them and those of the `eos.cli` entry points."""
    module = COMMANDS.get(argv[0]) if argv else None
    if module is not None:
        import_module(module)
        return
    for name in dict.fromkeys(COMMANDS.values()):
        import_module(name)
    for ep in entry_points(group="eos.cli"):
        app.add_typer(ep.load(), name=ep.name)


def one_line_summaries(typer_app: typer.Typer) -> None:
    """Give each command without a short help the first paragraph of its help on one line: typer lists a
    group's commands with that paragraph as written, its docstring's line breaks included."""
    for command in typer_app.registered_commands:
        text = command.help or (command.callback.__doc__ if command.callback else None)
        if command.short_help is None and text:
            command.short_help = " ".join(inspect.cleandoc(text).split("\n\n")[0].split())
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            one_line_summaries(group.typer_instance)


def main() -> None:
    register_commands(sys.argv[1:])
    one_line_summaries(app)
    app()
