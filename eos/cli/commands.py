"""`eos run`, `eos demo`, `eos kafka fetch`, `eos kafka archive` and `eos spark archive`.

Exit codes of `eos run`: 0 done; 1 the job failed (the error says why); 2 bad usage or configuration;
3 records went to the dead-letter topic and `--fail-on-dead-letters` was given.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
import typer
from rich.console import Console

from eos.cli import key_values
from eos.cli import log_format as cli_log_format
from eos.cli.app import app
from eos.cli.errors import fail
from eos.cli.live import LiveView
from eos.cli.options import bootstrap_option, registry_option

if TYPE_CHECKING:
    from eos.driver.reports import RunSummary

console = Console(stderr=True)
_LAUNCHED = time.monotonic()  # about when the `eos` command started (this module is imported at once)
kafka_app = typer.Typer(no_args_is_help=True, help="The Apache Kafka release used for local clusters.")
app.add_typer(kafka_app, name="kafka")


@kafka_app.command()
def fetch() -> None:
    """Resolve the pinned Apache Kafka jars from Maven Central (idempotent)."""
    from localkafka import ensure_kafka_jars

    jars = ensure_kafka_jars(quiet=False)
    typer.echo(f"Apache Kafka {jars.version}: {jars.libs}")


@kafka_app.command("archive")
def kafka_archive(rebuild: bool = typer.Option(False, "--rebuild", help="Make it again even if it exists"),
                  strict: bool = typer.Option(False, "--strict", help="Exit with status 1 when none can be made")
                  ) -> None:
    """Make the class-data archive of the local brokers' JVM for this Java and Kafka (idempotent; ~15 s once).
    Local brokers (`eos cluster up`) map it and start ~1.5 s faster on ~2 CPU-s less; without one, as before."""
    from localkafka.classdata import ArchiveError, build_archive

    _make_archive(lambda: build_archive(force=rebuild), ArchiveError, "the local brokers", strict)


def _make_archive(build: Callable[[], Path], failure: type[Exception], whose: str, strict: bool) -> None:
    """Make a class-data archive and say where it is, or why there is none (exit 1 then only when `strict`:
    without an archive everything starts as before)."""
    try:
        path = build()
    except failure as exc:
        console.print(f"[bold yellow]no class-data archive[/bold yellow]: {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(1 if strict else 0) from None
    typer.echo(f"class-data archive of {whose}: {path} ({path.stat().st_size >> 20} MiB)")


spark_app = typer.Typer(no_args_is_help=True, help="The Spark driver's start-up.")
app.add_typer(spark_app, name="spark")


@spark_app.command()
def archive(rebuild: bool = typer.Option(False, "--rebuild", help="Make it again even if it exists"),
            strict: bool = typer.Option(False, "--strict", help="Exit with status 1 when none can be made")) -> None:
    """Make the class-data archive of the Spark driver's JVM for this Java and Spark (idempotent; ~20 s once).
    Drivers the framework starts map it and start about 2 s faster; without one they start as before."""
    from eos.driver.classdata import ArchiveBuildError, build_archive

    _make_archive(lambda: build_archive(force=rebuild), ArchiveBuildError, "the Spark driver", strict)


@app.command()
def describe(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
             format: str = typer.Option("text", "--format", "-f", help="text | mermaid | dot")) -> None:
    """Print the job's topology: sub-topologies with their source topics, step, stores and sink topics, in
    the layout of Kafka Streams' Topology#describe(), or as a Mermaid or Graphviz picture. Needs no Kafka."""
    from eos.cli.loader import load_application
    from eos.errors import ConfigError

    if format not in ("text", "mermaid", "dot"):
        fail(2, f"--format must be text, mermaid or dot, got {format!r}")
    try:
        application = load_application(target)
    except (ValueError, ConfigError) as exc:
        fail(2, str(exc))
    sys.stdout.write(application.describe().render(format))  # type: ignore[arg-type]


@app.command()
def run(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
        until_caught_up: bool = typer.Option(False, "--until-caught-up", help="Stop once every input is processed"),
        master: str = typer.Option(None, help="Spark master, e.g. local[2,4] or local-cluster[2,1,1024]"),
        bootstrap_servers: str = bootstrap_option(),
        schema_registry_url: str = registry_option(),
        trigger_interval: float = typer.Option(
            None, help="Seconds between batch starts (a batch the record cap cut short is followed at once)"),
        max_records_per_batch: int = typer.Option(None, help="Records per input partition and batch"),
        max_batches: int = typer.Option(None, help="Stop after this many batches"),
        max_seconds: float = typer.Option(None, help="Stop after this many seconds"),
        log_format: str = typer.Option(None, help="auto | json | console"),
        metrics_port: int = typer.Option(None, help="Serve Prometheus metrics at http://127.0.0.1:PORT/metrics"),
        live: bool = typer.Option(None, "--live/--no-live",
                                  help="A table of progress and lag, redrawn every batch (default: on a terminal)"),
        spark_conf: list[str] = typer.Option([], "--spark-conf", help="Extra Spark setting key=value (repeatable)"),
        fail_on_dead_letters: bool = typer.Option(
            False, "--fail-on-dead-letters", help="Exit with status 3 if any record went to the dead-letter topic"),
        summary_json: Path = typer.Option(None, help="Write the run summary as JSON to this file")) -> None:
    """Run an exactly-once job on Spark. SIGINT/SIGTERM stop it after the current batch commits."""
    from eos.driver.spark import ContextStart, fork_zygote_early, launch_jvm_early, resolve_master
    from eos.errors import ConfigError, EosError
    from eos.logs import configure_logging

    conf = key_values(spark_conf)
    configure_logging(cli_log_format(log_format))
    try:
        master = resolve_master(master)
        launch_jvm_early(master, conf)  # its start (~1.3 s) overlaps the driver's imports and the job's checks
    except ConfigError as exc:
        fail(2, f"{exc}")
    from eos.cli.loader import load_application

    try:
        fork_zygote_early(master, conf)  # before the job's own code is loaded
        application = load_application(target)
        application.configure(bootstrap_servers=bootstrap_servers, schema_registry_url=schema_registry_url,
                              trigger_interval=trigger_interval, max_records_per_batch=max_records_per_batch,
                              log_format=log_format, metrics_port=metrics_port)
        configure_logging(application.config.log_format, application.config.log_level)
        application.preflight(master)  # before the context starts: Spark's start-up lines would bury the error
    except (ValueError, ConfigError) as exc:
        fail(2, f"{exc}")
    structlog.get_logger(__name__).info("checks passed; starting Spark", master=master,
                                        since_launch_s=round(time.monotonic() - _LAUNCHED, 2))
    # Spark's JVM starts while the driver prepares what needs Kafka (Application.run waits for it then)
    start = ContextStart(master, application.config.application_id, conf)
    view = LiveView(application.config.application_id) if (live if live is not None else sys.stderr.isatty()) else None
    try:
        with view if view is not None else contextlib.nullcontext():
            summary = application.run(start, until_caught_up=until_caught_up, max_batches=max_batches,
                                      max_seconds=max_seconds, handle_signals=True,
                                      on_batch=view.on_batch if view is not None else None)
    except ConfigError as exc:
        fail(2, f"configuration error: {exc}")
    except EosError as exc:
        fail(1, f"{type(exc).__name__}: {exc}")
    finally:
        start.discard()
    _report(summary, summary_json)
    if summary.dead_letters and fail_on_dead_letters:
        fail(3, f"{summary.dead_letters:,} record(s) went to the dead-letter topic "
                 f"{application.config.dlq_topic} (--fail-on-dead-letters)")


def _report(summary: RunSummary, summary_json: Path | None) -> None:
    data = summary.to_dict()
    data.pop("batch_reports")
    console.print_json(json.dumps(data))
    if summary.dead_letters:
        console.print(f"[bold yellow]warning[/bold yellow]: {summary.dead_letters:,} of {summary.records_in:,} "
                      f"input records went to the dead-letter topic {summary.dead_letter_topic}"
                      + (f" (first error: {summary.first_dead_letter_error})" if summary.first_dead_letter_error
                         else ""), soft_wrap=True, highlight=False)
    for step in sorted(summary.dropped_by_step):
        late, share = summary.late_share(step)
        if late:
            console.print(f"[bold yellow]warning[/bold yellow]: step {step} dropped {late:,} of "
                          f"{summary.records_in_by_step.get(step, 0):,} input records ({share:.1%}) as late: "
                          "their windows, or a join's grace period, had closed (`eos audit window` tells where a "
                          "window's lateness came from)",
                          soft_wrap=True, highlight=False)
    if summary_json is not None:
        summary_json.write_text(json.dumps(summary.to_dict(), indent=2))


@app.command()
def demo(records: int = typer.Option(100_000, help="Input records to generate"),
         partitions: int = typer.Option(4, help="Input partitions (= tasks)"),
         master: str = typer.Option(None, help="Spark master (default local[2,4])")) -> None:
    """Start a local Kafka cluster, generate input, run the demo exactly-once jobs and audit the output."""
    from eos.examples.demo import main as run_demo

    raise typer.Exit(run_demo(records=records, partitions=partitions, master=master))


@app.command()
def package(output: Path = typer.Option(Path("dist/eos-framework.zip"), help="Where to write the archive")) -> None:
    """Zip the framework's packages (eos, transactions, recovery), with their bytecode for this Python, for
    `spark-submit --py-files`. Jobs run with `app.run()` or `eos run` on a cluster master ship the same archive
    themselves; third-party packages come from the executors' Python or a packed virtualenv (--archives), as
    the README shows."""
    from eos.driver.shipping import framework_zip

    path = framework_zip(output)
    console.print(f"{path} ({path.stat().st_size // 1024:,} KiB)\n"
                  f"  spark-submit --py-files {path} --conf spark.eos.shipFramework=false job.py")
