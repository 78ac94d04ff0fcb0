"""`eos topics ...`: create, list, delete and write to topics, so trying a job needs no script of one's own.

    eos topics create orders --partitions 4
    eos topics partitions orders 6                          # more partitions (a running job reads them too)
    eos topics create --from-app job.py --partitions 4     # every input and output topic the job names
    printf 'k1\\t{"qty": 2}\\n' | eos topics produce orders   # key<TAB>value lines from stdin
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from eos.cli import key_values
from eos.cli.app import app
from eos.cli.errors import fail
from eos.cli.options import bootstrap_option, require_reachable, resolve_bootstrap
from transactions import KafkaAdmin

topics_app = typer.Typer(no_args_is_help=True, help="Create, list, delete, grow and write to topics.")
app.add_typer(topics_app, name="topics")
console = Console(soft_wrap=True, highlight=False)


def _admin(bootstrap_servers: str) -> KafkaAdmin:
    return KafkaAdmin(require_reachable(bootstrap_servers))


@topics_app.command()
def create(names: list[str] = typer.Argument(None, help="Topic names"),
           partitions: int = typer.Option(1, "--partitions", "-p", help="Partitions of each topic"),
           replication_factor: int = typer.Option(None, "--replication-factor", "-r",
                                                  help="Replicas (default: the broker's default)"),
           compact: bool = typer.Option(False, "--compact", help="cleanup.policy=compact"),
           config: list[str] = typer.Option([], "--config", help="Topic setting key=value (repeatable)"),
           from_app: str = typer.Option(None, "--from-app",
                                        help="module:app or job.py: create every input and output topic it names"),
           bootstrap_servers: str = bootstrap_option()) -> None:
    """Create topics (existing ones are left as they are and reported)."""
    from eos.errors import ConfigError
    from eos.topology import table_changelogs
    from transactions import KafkaEosError, TopicSpec

    tables: frozenset[str] = frozenset()  # (a table's topic that is also its stores' changelog: compacted)
    settings = key_values(config)
    if compact:
        settings["cleanup.policy"] = "compact"
    specs = [TopicSpec(t, partitions, replication_factor, settings) for t in names or []]
    if from_app:
        from eos.cli.loader import load_application

        try:
            application = load_application(from_app)
        except (ValueError, ConfigError) as exc:
            fail(2, str(exc))
        bootstrap_servers = resolve_bootstrap(bootstrap_servers, application.config.bootstrap_servers)
        specs += application.topic_specs(partitions, replication_factor, settings)
        tables = table_changelogs(application.subtopologies)
        for source, pattern in application.graph.patterns.items():
            console.print(f"pattern {pattern.pattern} (source {source}): its topics are named by their writers; "
                          "create them by name, each with the same partition count", markup=False)
    if not specs:
        fail(2, "name the topics to create, or give --from-app")
    wanted = [spec.name for spec in specs]
    admin = _admin(resolve_bootstrap(bootstrap_servers))
    try:
        existing = admin.partition_counts(wanted)
        created = admin.create_topics(specs)
    except KafkaEosError as exc:
        fail(1, str(exc))
    for topic in wanted:
        if topic in created:
            console.print(f"created {topic} ({partitions} partition(s))"
                          + (", compacted: the changelog of its table's stores" if topic in tables else ""))
        else:
            console.print(f"exists  {topic} ({existing[topic]} partition(s)), left as it is")


@topics_app.command("list")
def list_(bootstrap_servers: str = bootstrap_option()) -> None:
    """Topics and their partition counts."""
    admin = _admin(resolve_bootstrap(bootstrap_servers))
    names = admin.topic_names()
    counts = admin.partition_counts(names)
    table = Table("topic", "partitions")
    for name in names:
        table.add_row(name, str(counts[name]))
    console.print(table)


@topics_app.command()
def delete(names: list[str] = typer.Argument(..., help="Topic names"),
           bootstrap_servers: str = bootstrap_option()) -> None:
    """Delete topics (and their data)."""
    deleted = _admin(resolve_bootstrap(bootstrap_servers)).delete_topics(names)
    for name in names:
        console.print(f"{'deleted' if name in deleted else 'absent '} {name}")


@topics_app.command()
def partitions(name: str = typer.Argument(..., help="Topic name"),
               count: int = typer.Argument(..., help="How many partitions it is to have"),
               bootstrap_servers: str = bootstrap_option()) -> None:
    """Give a topic more partitions (Kafka never takes any away). A running job reads them from its next look at
    its inputs (`metadata_refresh_interval`); a step that keeps state by key stops, since its keys would then hash
    to other partitions than its stores were built from."""
    admin = _admin(resolve_bootstrap(bootstrap_servers))
    now = admin.partition_counts([name])[name]
    if now is None:
        fail(2, f"topic {name} does not exist: create it with `eos topics create {name} --partitions {count}`")
    if count < now:
        fail(2, f"topic {name} has {now} partitions: Kafka cannot take partitions away (a topic of fewer is a new "
                f"topic: delete it and create it again, losing its records)")
    if count > now:
        admin.add_partitions(name, count)
    console.print(f"{'now' if count > now else 'has'} {name} ({count} partition(s))")


@topics_app.command()
def produce(topic: str = typer.Argument(..., help="Topic to write to"),
            separator: str = typer.Option("\t", help="Separates the key from the value on each line"),
            timestamps: bool = typer.Option(False, "--timestamps", help=(
                "Each line is timestamp<TAB>key<TAB>value: the record's timestamp in milliseconds since the "
                "epoch, ISO-8601 (2026-05-01T10:00:00Z), or relative to now (now, -90s, -5m, -2h, -1d)")),
            header: list[str] = typer.Option([], "--header", help="NAME=VALUE: a header on every record (repeatable)"),
            bootstrap_servers: str = bootstrap_option()) -> None:
    """Write `key<TAB>value` lines from stdin (a line without the separator is a value without a key)."""
    from eos.time import parse_time
    from transactions import ProduceFailedError, produce_pairs

    headers: list[tuple[str, str | bytes | None]] = []
    for item in header:
        name, sep, text = item.partition("=")
        if not sep or not name:
            fail(2, f"--header takes NAME=VALUE, got {item!r}")
        headers.append((name, text.encode()))
    bootstrap_servers = resolve_bootstrap(bootstrap_servers)
    if topic not in _admin(bootstrap_servers).topic_names():
        fail(2, f"topic {topic!r} does not exist: create it first (`eos topics create {topic} --partitions N`, "
                "or `eos topics create --from-app job.py`)")
    now = int(time.time() * 1000)
    latest = [now]

    def records() -> Iterator[tuple[bytes | None, bytes, int | None]]:
        for number, line in enumerate(sys.stdin, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            stamp = None
            if timestamps:
                text, sep, line = line.partition(separator)
                if not sep:
                    fail(2, f"line {number}: expected timestamp{separator}key{separator}value (--timestamps)")
                try:
                    stamp = parse_time(text, now)
                except ValueError as exc:
                    fail(2, f"line {number}: {exc}")
                latest[0] = max(latest[0], stamp)
            key, sep, value = line.partition(separator)
            yield (key.encode(), value.encode(), stamp) if sep else (None, line.encode(), stamp)

    try:
        n = produce_pairs(bootstrap_servers, topic, records(), headers=headers or None)
    except ProduceFailedError as exc:
        ahead = latest[0] - int(time.time() * 1000)
        fail(1, str(exc) + (
            f". The latest timestamp given is {ahead / 3_600_000:,.1f} h ahead of now: a broker refuses records "
            "further ahead of its clock than the topic's message.timestamp.after.max.ms (1 h by default since "
            "Kafka 4.0); give times near now (-5m, now) or raise that setting of the topic"
            if ahead > 3_600_000 else ""))
    console.print(f"{n:,} record(s) written to {topic}")


@topics_app.command()
def read(topic: str = typer.Argument(..., help="Topic to read"),
         key_serde: str = typer.Option("string", help="How to show keys: bytes, string, json, int, long, double"),
         value_serde: str = typer.Option("string", help="How to show values (count results: long; sums of "
                                                        "Decimals: decimal)"),
         timestamps: bool = typer.Option(False, "--timestamps", help="Start each line with the record's timestamp"),
         header: list[str] = typer.Option([], "--header", help="NAME: end each line with that header's value "
                                                               "(`-` when the record has none; repeatable)"),
         separator: str = typer.Option("\t", help="Separates the fields of each line"),
         bootstrap_servers: str = bootstrap_option()) -> None:
    """Print the committed records of a topic, partition by partition, as `key<TAB>value` lines (a
    tombstone's value shows as `null`; clock markers between a job's steps are left out); stops at the end
    the topic has when the read starts."""
    from eos.audit.scan import scan_topic
    from eos.serde import serde_for
    from eos.streamtime import is_marker

    bootstrap_servers = resolve_bootstrap(bootstrap_servers)
    admin = _admin(bootstrap_servers)
    if topic not in admin.topic_names():
        fail(1, f"topic {topic!r} does not exist (eos topics list shows the topics)")
    try:
        keys, values = serde_for(key_serde), serde_for(value_serde)
    except (ValueError, KeyError) as exc:
        fail(2, str(exc))
    for batch in scan_topic(bootstrap_servers, topic, admin=admin):
        for msg in batch:
            if is_marker(msg.headers()):
                continue  # a clock marker between the job's steps (eos.streamtime)
            fields = [_show(keys, msg.key()), _show(values, msg.value())]
            if timestamps:
                fields.insert(0, str(msg.timestamp()[1]))
            if header:
                found = dict(msg.headers() or [])
                fields += [(found[n] or b"").decode("utf-8", "backslashreplace") if n in found else "-" for n in header]
            sys.stdout.write(separator.join(fields) + "\n")


def _show(serde: Any, data: bytes | None) -> str:
    if data is None:
        return "null"
    try:
        obj = serde.deserialize(data)
    except Exception:  # shown as it is rather than not at all
        return data.decode("utf-8", "backslashreplace")
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).decode("utf-8", "backslashreplace")
    if isinstance(obj, Decimal):
        return str(obj)
    return obj if isinstance(obj, str) else json.dumps(obj)
