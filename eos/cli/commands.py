"""`eos kafka fetch` and (later) the job commands."""

from __future__ import annotations

import typer

from eos.cli import app

kafka_app = typer.Typer(no_args_is_help=True, help="The Apache Kafka release used for local clusters.")
app.add_typer(kafka_app, name="kafka")


@kafka_app.command()
def fetch() -> None:
    """Resolve the pinned Apache Kafka jars from Maven Central (idempotent)."""
    from localkafka import ensure_kafka_jars

    jars = ensure_kafka_jars(quiet=False)
    typer.echo(f"Apache Kafka {jars.version}: {jars.libs}")


@app.command()
def demo() -> None:
    """Start a local Kafka cluster and run the demo (a transactional round trip until the engine lands)."""
    from eos.demo import main as run_demo

    run_demo()
