"""Records dropped as late over a backlog behind a re-keying, with the sources' clocks and with Kafka Streams'
rule (the largest timestamp seen), side by side in one run on a local broker and Spark.

The job: a filter step (drops bots) chained through a topic into a re-keyed per-minute count (`group_by=`
page, grace 5 s, emit="final"); the input: `--clicks` clicks spread in order over the last 10 minutes on each
of `--partitions` partitions, present before the job starts (a backlog), one in ten a bot.

    python -m benchmarks.backlog [--clicks 100] [--partitions 2]

Prints per rule: clicks counted by the windows that closed, and clicks dropped as late.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from eos import Application
from eos.driver.spark import DEFAULT_MASTER, build_spark_context
from eos.windows import TumblingWindows
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console()


def job(bootstrap: str, clicks: str, humans: str, out: str, rule: str, state_dir: str) -> Application:
    app = Application(f"backlog-{rule}-{uuid.uuid4().hex[:6]}", bootstrap, timestamp="field:at", state_dir=state_dir,
                      stream_time_across_topics=rule, log_format="json", log_level="WARNING")

    @app.process(input=clicks, output=humans, key_serde="string", value_serde="json", name="humans")
    def not_bots(record):  # type: ignore[no-untyped-def]
        return None if record.value["bot"] else (record.key, record.value)

    app.count(humans, out, name="pages", value_serde="json", group_by=lambda r: r.value["page"],
              windows=TumblingWindows(60_000, grace=5_000), emit="final")
    return app


def produce(bootstrap: str, topic: str, clicks: int, partitions: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap})
    now = int(time.time() * 1000)
    humans = 0
    for p in range(partitions):
        for i in range(clicks):
            bot = i % 10 == 9
            humans += not bot
            value = {"page": f"p{i % 4}", "at": now - 600_000 + i * (600_000 // clicks) + p, "bot": bot}
            producer.produce(topic, key=f"u{i % 13}", value=json.dumps(value), partition=p)
    producer.flush(30)
    return humans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clicks", type=int, default=100, help="clicks per partition")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default=DEFAULT_MASTER)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="eos-backlog-"))
    rows = []
    try:
        with provide_kafka(brokers=1) as kafka:
            bootstrap, admin = kafka.bootstrap_servers, KafkaAdmin(kafka.bootstrap_servers)
            sc = build_spark_context(args.master, "eos-backlog-benchmark")
            for rule in ("largest_seen", "source_clocks"):
                topics = [f"backlog-{name}-{uuid.uuid4().hex[:6]}" for name in ("clicks", "humans", "out")]
                admin.create_topics([TopicSpec(t, args.partitions) for t in topics])
                humans = produce(bootstrap, topics[0], args.clicks, args.partitions)
                summary = job(bootstrap, *topics, rule, str(scratch)).run(sc, until_caught_up=True)
                late = summary.dropped_by_step.get("pages", {}).get("late", 0)
                rows.append((rule, humans, summary.records_in_by_step.get("pages", 0), late))
            sc.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = Table(title=f"a re-keyed per-minute count over a backlog: {args.clicks} clicks over 10 minutes on each of "
                        f"{args.partitions} partitions (grace 5 s)")
    for column in ("stream time across topics", "clicks (not bots)", "reached the count", "dropped as late"):
        table.add_column(column, justify="left" if column.startswith("stream") else "right")
    for rule, humans, counted, late in rows:
        table.add_row(rule, f"{humans:,}", f"{counted:,}", f"{late:,}")
    console.print(table)


if __name__ == "__main__":
    main()
