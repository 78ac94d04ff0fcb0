"""`eos run`, `eos demo` and `eos kafka fetch`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from eos.cli import app

console = Console(stderr=True)
kafka_app = typer.Typer(no_args_is_help=True, help="The Apache Kafka release used for local clusters.")
app.add_typer(kafka_app, name="kafka")


@kafka_app.command()
def fetch() -> None:
    """Resolve the pinned Apache Kafka jars from Maven Central (idempotent)."""
    from localkafka import ensure_kafka_jars

    jars = ensure_kafka_jars(quiet=False)
    typer.echo(f"Apache Kafka {jars.version}: {jars.libs}")


@app.command()
def run(target: str = typer.Argument(..., help="module:app or path/to/job.py[:app]"),
        until_caught_up: bool = typer.Option(False, "--until-caught-up", help="Stop once every input is processed"),
        master: str = typer.Option(None, help="Spark master, e.g. local[2,4] or local-cluster[2,1,1024]"),
        bootstrap_servers: str = typer.Option(None, envvar="EOS_BOOTSTRAP_SERVERS", help="Kafka bootstrap servers"),
        trigger_interval: float = typer.Option(None, help="Seconds between batch starts"),
        max_records_per_batch: int = typer.Option(None, help="Records per input partition and batch"),
        max_batches: int = typer.Option(None, help="Stop after this many batches"),
        max_seconds: float = typer.Option(None, help="Stop after this many seconds"),
        log_format: str = typer.Option(None, help="auto | json | console"),
        spark_conf: list[str] = typer.Option([], "--spark-conf", help="Extra Spark setting key=value (repeatable)"),
        summary_json: Path = typer.Option(None, help="Write the run summary as JSON to this file")) -> None:
    """Run an exactly-once job on Spark. SIGINT/SIGTERM stop it after the current batch commits."""
    from eos.cli.loader import load_application
    from eos.config import ConfigError
    from eos.logs import configure_logging

    try:
        application = load_application(target)
        application.configure(bootstrap_servers=bootstrap_servers, trigger_interval=trigger_interval,
                              max_records_per_batch=max_records_per_batch, log_format=log_format)
    except (ValueError, ConfigError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    configure_logging(application.config.log_format, application.config.log_level)
    conf = dict(item.split("=", 1) for item in spark_conf if "=" in item)
    try:
        from eos.driver.spark import DEFAULT_MASTER, build_spark_context

        sc = build_spark_context(master or DEFAULT_MASTER, application.config.application_id, conf)
        summary = application.run(sc, until_caught_up=until_caught_up, max_batches=max_batches,
                                  max_seconds=max_seconds, handle_signals=True)
    except ConfigError as exc:
        console.print(f"[red]configuration error:[/red] {exc}")
        raise typer.Exit(2) from None
    data = summary.to_dict()
    data.pop("batch_reports")
    console.print_json(json.dumps(data))
    if summary_json is not None:
        summary_json.write_text(json.dumps(summary.to_dict(), indent=2))


@app.command()
def demo(records: int = typer.Option(100_000, help="Input records to generate"),
         partitions: int = typer.Option(4, help="Input partitions (= tasks)"),
         master: str = typer.Option(None, help="Spark master (default local[2,4])")) -> None:
    """Start a local Kafka cluster, generate input, run the demo exactly-once jobs and audit the output."""
    from eos.examples.demo import main as run_demo

    raise typer.Exit(run_demo(records=records, partitions=partitions, master=master))
