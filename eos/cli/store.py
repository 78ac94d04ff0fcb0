"""`eos store get|dump`: interactive queries of a job's committed state from the command line."""

from __future__ import annotations

import json
import time
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
        as_of: str = typer.Option(None, "--as-of", help=(
            "A versioned store: the value the key held at this time (milliseconds since the epoch, ISO-8601, or "
            "relative to now: -90s, -5m, -2h, -1d); by default its latest")),
        bootstrap_servers: str = bootstrap_option()) -> None:
    """Print the committed value of one key (exit code 1 when the key is not in the store)."""
    from eos.time import parse_time

    at = None
    if as_of is not None:
        try:
            at = parse_time(as_of, int(time.time() * 1000))
        except ValueError as exc:
            fail(2, f"--as-of: {exc}")
    snapshot = _snapshot(target, store, bootstrap_servers)
    if snapshot.kind not in ("key_value", "global_table", "versioned"):
        what = ("the records it holds back" if snapshot.kind == "time_ordered_buffer"
                else "the updates it holds back" if snapshot.kind == "suppression_buffer" else "its windows")
        fail(2, f"store {store!r} is a {snapshot.kind} store, not looked up by key: `eos store dump` shows {what}")
    if at is not None and snapshot.kind != "versioned" and not getattr(snapshot.view, "versioned", False):
        fail(2, f"--as-of reads a versioned store (app.table(..., versioned=...)); {store!r} is a {snapshot.kind} "
                "store, which keeps only its latest values")
    spec_key = snapshot.view.table.key_serde if snapshot.kind == "global_table" else snapshot.view.spec.key_serde
    parsed: Any = key
    if spec_key.name == "JSON":
        try:
            parsed = json.loads(key)
        except ValueError:
            parsed = key
    value = snapshot.get(parsed) if at is None else snapshot.get(parsed, as_of=at)
    shown = {"store": store, "key": parsed, "value": value, **({"as_of": at} if at is not None else {}),
             "position": snapshot.position}
    typer.echo(json.dumps(shown, default=repr))
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
