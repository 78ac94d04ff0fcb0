"""`eos reset JOB`: reprocess from scratch (see `eos.driver.reset`).

Exit codes: 0 done (or, with --dry-run, planned); 2 bad usage, the broker unreachable, or a driver of the
application running.
"""

from __future__ import annotations

import typer

from eos.cli.app import app
from eos.cli.errors import fail
from eos.cli.options import bootstrap_option, require_reachable, resolve_bootstrap


@app.command()
def reset(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
          to: str = typer.Option("earliest", "--to",
                                 help="Where every input starts again: earliest, latest, an ISO-8601 time, "
                                      "milliseconds, or a time ago (-2h, -30m, -1d)"),
          input_: list[str] = typer.Option([], "--input", help="TOPIC=WHERE for one input topic (repeatable)"),
          dry_run: bool = typer.Option(False, "--dry-run", help="Print what the reset would do; change nothing"),
          bootstrap_servers: str = bootstrap_option()) -> None:
    """Reset an application so its next run reprocesses its inputs: committed offsets (and stream times) of
    its groups to earliest, latest or a time, its internal topics (repartition, changelog, foreign-key,
    ledger) deleted, its state directories on this machine wiped. Refuses while a driver of it runs."""
    from eos.cli.loader import load_application
    from eos.driver.reset import apply_reset, check_not_running, plan_reset
    from eos.errors import ConfigError
    from transactions import KafkaAdmin

    per_topic = {}
    for item in input_:
        topic, sep, where = item.partition("=")
        if not sep or not topic or not where:
            fail(2, f"--input takes TOPIC=WHERE (e.g. orders=-2h), got {item!r}")
        per_topic[topic] = where
    try:
        application = load_application(target)
        bootstrap = require_reachable(resolve_bootstrap(bootstrap_servers, application.config.bootstrap_servers))
        admin = KafkaAdmin(bootstrap)
        check_not_running(application, admin)
        plan = plan_reset(application, admin, to=to, inputs=per_topic)
    except (ValueError, ConfigError, KeyError) as exc:
        fail(2, str(exc.args[0] if isinstance(exc, KeyError) else exc))
    for line in plan.lines():
        typer.echo(line)
    if dry_run:
        typer.echo("dry run: nothing was changed")
        return
    apply_reset(plan, admin)
    typer.echo(f"application {application.config.application_id!r} reset: its next run starts from the positions "
               "above with empty state")
