"""`eos audit ...`: prove or disprove exactly-once on committed output. Exit code 1 on FAIL, 2 on bad usage."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from eos.cli.app import app
from eos.cli.errors import fail
from eos.cli.options import bootstrap_option, registry_option, require_reachable, resolve_bootstrap

audit_app = typer.Typer(no_args_is_help=True, help=(
    "Audit committed output: a framework job whole (app), its windows (window) or joins (join), or any "
    "topics by lineage headers (lineage) or recomputed per-key aggregates (aggregate). Exit status 1 on FAIL."))
app.add_typer(audit_app, name="audit")
err = Console(stderr=True)
out = Console()

Bootstrap = typer.Option(..., envvar="EOS_BOOTSTRAP_SERVERS", help="Kafka bootstrap servers")
Inputs = typer.Option(..., "--input", "-i", help="Input topic (repeatable)")
Outputs = typer.Option(..., "--output", "-o", help="Output topic (repeatable)")
Group = typer.Option(None, help="The job's consumer group (= application id): audit input below its committed offsets")
JsonPath = typer.Option(None, "--json", help="Write the machine-readable report here")
Samples = typer.Option(10, help="Samples kept per kind of violation")


@contextmanager
def _progress(enabled: bool = True) -> Iterator[Callable[[int], None] | None]:
    if not enabled:
        yield None
        return
    with Progress(SpinnerColumn(), TextColumn("[bold]auditing"), BarColumn(),
                  TextColumn("{task.completed:,.0f} records read"), TimeElapsedColumn(), console=err,
                  transient=True) as progress:
        task = progress.add_task("audit", total=None)
        yield lambda n: progress.advance(task, n)


def _finish(reports: list[Any], json_path: Path | None) -> None:
    from eos.audit.report import render, write_json

    for report in reports:
        render(report, out)
    if json_path is not None:
        if len(reports) == 1:
            write_json(reports[0], json_path)
        else:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps([r.to_dict() for r in reports], indent=2, default=str))
    raise typer.Exit(0 if all(r.verdict == "PASS" for r in reports) else 1)


def _executor(spark: bool, master: str | None) -> Any:
    if not spark:
        return None
    from eos.audit.executors import SparkExecutor
    from eos.driver.spark import build_spark_context

    return SparkExecutor(build_spark_context(master, "eos-audit"))


@audit_app.command()
def lineage(bootstrap_servers: str = Bootstrap, inputs: list[str] = Inputs, outputs: list[str] = Outputs,
            dead_letter_topic: str = typer.Option(None, help="Dead-letter topic of the job"), group: str = Group,
            isolation: str = typer.Option("read_committed", help="read_committed | read_uncommitted"),
            spark: bool = typer.Option(False, "--spark", help="Scan partitions in parallel on Spark"),
            master: str = typer.Option(None, help="Spark master for --spark"),
            ledger_topic: str = typer.Option(None, help="The job's lineage ledger [default: <group>-ledger]"),
            json_path: Path = JsonPath, samples: int = Samples) -> None:
    """Every committed input record exactly once in the output (by lineage header) or the dead-letter topic."""
    from eos.audit import audit

    if isolation not in ("read_committed", "read_uncommitted"):
        err.print("[red]--isolation must be read_committed or read_uncommitted[/red]")
        raise typer.Exit(2)
    require_reachable(bootstrap_servers)
    with _progress() as progress:
        report = audit(bootstrap_servers, inputs=inputs, outputs=outputs, dead_letter_topic=dead_letter_topic,
                       group=group, isolation=isolation, executor=_executor(spark, master),  # type: ignore[arg-type]
                       max_samples=samples, progress=progress, ledger_topic=ledger_topic)
    _finish([report], json_path)


def _extractor(fmt: str, field: str | None) -> Callable[[bytes | None], Any]:
    from eos.serde import serde_for

    serde = serde_for(fmt)
    if field is None:
        return serde.deserialize
    return lambda raw: serde.deserialize(raw)[field]


@audit_app.command()
def aggregate(bootstrap_servers: str = Bootstrap, inputs: list[str] = Inputs, outputs: list[str] = Outputs,
              kind: str = typer.Option(..., help="count | sum | min | max"),
              input_format: str = typer.Option("json", help="Serde of input values: json, long, double, string"),
              input_field: str = typer.Option(None, help="Field of a JSON input value to aggregate"),
              output_format: str = typer.Option("json", help="Serde of output values"),
              output_field: str = typer.Option(None, help="Field of a JSON output value holding the aggregate"),
              cached: bool = typer.Option(False, "--cached", help="The job ran with a record cache "
                                          "(cache_max_bytes > 0): some running values, in order, once, and the last"),
              group: str = Group, json_path: Path = JsonPath, samples: int = Samples) -> None:
    """Per key: last committed output = aggregate recomputed from the input; no step repeated or skipped."""
    from eos.audit import AggregateSpec, audit

    if kind not in ("count", "sum", "min", "max"):
        err.print("[red]--kind must be count, sum, min or max[/red]")
        raise typer.Exit(2)
    spec = AggregateSpec(kind, _extractor(input_format, input_field), _extractor(output_format, output_field),  # type: ignore[arg-type]
                         cached=cached)
    require_reachable(bootstrap_servers)
    with _progress() as progress:
        report = audit(bootstrap_servers, inputs=inputs, outputs=outputs, group=group, aggregate=spec,
                       max_samples=samples, progress=progress)
    _finish([report], json_path)


@audit_app.command("app")
def app_(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
         bootstrap_servers: str = bootstrap_option(), schema_registry_url: str = registry_option(),
         json_path: Path = JsonPath, samples: int = Samples) -> None:
    """Lineage audit of every sub-topology of a framework job, with its dead-letter and changelog topics and
    its lineage ledger. Each sub-topology is held to its own inputs: the dead letters of the others (the
    dead-letter topic is shared) are counted apart, and the records it filtered are accounted for."""
    from eos.audit import audit_application
    from eos.cli.loader import load_application
    from eos.errors import ConfigError

    try:
        application = load_application(target).configure(schema_registry_url=schema_registry_url)
        cfg = application.config.with_overrides(
            bootstrap_servers=resolve_bootstrap(bootstrap_servers, application.config.bootstrap_servers))
    except (ValueError, ConfigError) as exc:
        fail(2, str(exc))
    require_reachable(cfg.bootstrap_servers)
    with _progress() as progress:
        reports = audit_application(application, bootstrap_servers=cfg.bootstrap_servers, max_samples=samples,
                                    progress=progress)
    _finish(reports, json_path)


def _load(target: str, bootstrap_servers: str | None, subtopologies: list[str],
          schema_registry_url: str | None) -> tuple[Any, str]:
    """The job (on the registry given, if one is) and its reachable bootstrap servers, or one line and exit
    status 2."""
    from eos.cli.loader import load_application
    from eos.errors import ConfigError

    try:
        application = load_application(target).configure(schema_registry_url=schema_registry_url)
        bootstrap = resolve_bootstrap(bootstrap_servers, application.config.bootstrap_servers)
        if application.graph.patterns:  # (the sub-topologies of its topic patterns are those matching topics)
            from eos.audit.auditor import match_patterns
            from transactions import admin_for

            match_patterns(application, admin_for(require_reachable(bootstrap)))
        unknown = [n for n in subtopologies if n not in application.subtopologies]
        if unknown:
            raise ValueError(f"no sub-topology {', '.join(map(repr, unknown))}; the job has "
                             f"{', '.join(sorted(application.subtopologies))}")
    except (ValueError, ConfigError) as exc:
        fail(2, str(exc))
    return application, require_reachable(bootstrap)


@audit_app.command("window")
def window(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
           subtopology: list[str] = typer.Option([], "--subtopology", "-s", help="Only this one (repeatable)"),
           bootstrap_servers: str = bootstrap_option(), schema_registry_url: str = registry_option(),
           json_path: Path = JsonPath, samples: int = Samples) -> None:
    """Recompute every windowed aggregation of a job from its committed input (event time, windows, grace,
    lateness) and check the committed output: each final result once and right, update streams in order."""
    from eos.audit import audit_windowed

    application, bootstrap = _load(target, bootstrap_servers, subtopology, schema_registry_url)
    try:
        with _progress() as progress:
            reports = audit_windowed(application, bootstrap_servers=bootstrap, subtopologies=subtopology,
                                     max_samples=samples, progress=progress)
    except ValueError as exc:  # e.g. no windowed aggregation, or its input purged: what to do instead
        fail(2, str(exc))
    _finish(reports, json_path)


@audit_app.command("join")
def join(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
         subtopology: list[str] = typer.Option([], "--subtopology", "-s", help="Only this one (repeatable)"),
         bootstrap_servers: str = bootstrap_option(), schema_registry_url: str = registry_option(),
         json_path: Path = JsonPath, samples: int = Samples) -> None:
    """Replay every join of a job from its committed inputs and check its committed output (eos.audit.joins):
    stream-stream results exactly, stream-table results against the table's history, table-table results
    against both tables' histories and final values."""
    from eos.audit import audit_joins

    application, bootstrap = _load(target, bootstrap_servers, subtopology, schema_registry_url)
    try:
        reports = audit_joins(application, bootstrap_servers=bootstrap, subtopologies=subtopology,
                              max_samples=samples)
    except ValueError as exc:
        fail(2, str(exc))
    _finish(reports, json_path)
