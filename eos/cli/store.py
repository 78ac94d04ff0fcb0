"""`eos store get|dump`: interactive queries of a job's committed state from the command line."""

from __future__ import annotations

import json
from typing import Any

import typer

from eos.cli.app import app
from eos.cli.errors import fail
from eos.cli.options import bootstrap_option, require_reachable, resolve_bootstrap

__all__ = ["store_app"]

store_app = typer.Typer(no_args_is_help=True, help="Read a job's state stores as committed (interactive queries).")
app.add_typer(store_app, name="store")


def _snapshot(target: str, store: str, bootstrap_servers: str) -> Any:
    from eos.cli.loader import load_application
    from eos.errors import ConfigError

    try:
        application = load_application(target)
        bootstrap = require_reachable(resolve_bootstrap(bootstrap_servers, application.config.bootstrap_servers))
        return application.store_view(store, bootstrap_servers=bootstrap)
    except KeyError as exc:
        fail(2, str(exc.args[0]))
    except (ValueError, ConfigError) as exc:
        fail(2, str(exc))


@store_app.command("get")
def get(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
        store: str = typer.Argument(..., help="The store's name (e.g. <aggregation>-store, <join>-<table>)"),
        key: str = typer.Argument(..., help="The key, as text (a JSON key: its JSON text)"),
        bootstrap_servers: str = bootstrap_option()) -> None:
    """Print the committed value of one key (exit code 1 when the key is not in the store)."""
    snapshot = _snapshot(target, store, bootstrap_servers)
    if snapshot.kind not in ("key_value", "global_table"):
        fail(2, f"store {store!r} is a {snapshot.kind} store: use `eos store dump` to see its windows")
    spec_key = snapshot.view.spec.key_serde if snapshot.kind == "key_value" else snapshot.view.table.key_serde
    parsed: Any = key
    if spec_key.name == "JSON":
        try:
            parsed = json.loads(key)
        except ValueError:
            parsed = key
    value = snapshot.get(parsed)
    typer.echo(json.dumps({"store": store, "key": parsed, "value": value, "position": snapshot.position},
                          default=repr))
    if value is None:
        raise typer.Exit(1)


@store_app.command("dump")
def dump(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
         store: str = typer.Argument(..., help="The store's name"),
         bootstrap_servers: str = bootstrap_option()) -> None:
    """Print every committed entry of a store, one JSON object per line, then its position."""
    from eos.queries import store_rows

    snapshot = _snapshot(target, store, bootstrap_servers)
    try:
        rows = store_rows(snapshot)
    except ValueError as exc:
        fail(2, str(exc))
    for row in rows:
        typer.echo(json.dumps(row))
    typer.echo(json.dumps({"store": store, "entries": len(rows), "position": snapshot.position}))
