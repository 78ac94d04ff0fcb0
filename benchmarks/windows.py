"""Windowed aggregation throughput next to the plain count, side by side in one run on one machine.

The same input (records 1 ms of event time apart, 1,000 keys, 4 partitions) is counted by key, by key with
each key's count let go at most once per 10 s (`suppress`), then per key and window: tumbling 10 s windows
(every update, and final results only), hopping 10 s windows
advancing by 2 s (each record in five windows), session windows with a 1 s gap, and sliding windows of
10 s. Rounds are interleaved; each figure is the median of its rounds, records/s from the first batch's
start to the last batch's end.

    python -m benchmarks.windows [--records 100000] [--rounds 2]

Prints a table with each job's ratio to the plain count and writes reports/windows.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from benchmarks.throughput import PARTITIONS
from eos import Application
from eos.driver.spark import DEFAULT_MASTER, build_spark_context
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console()

JOBS: dict[str, dict[str, Any]] = {
    "count": {},
    "count, suppressed 10 s": {"suppress": 10_000},
    "tumbling 10 s, update": {"windows": TumblingWindows(10_000, grace=1_000)},
    "tumbling 10 s, final": {"windows": TumblingWindows(10_000, grace=1_000), "emit": "final"},
    "hopping 10 s / 2 s": {"windows": HoppingWindows(10_000, 2_000, grace=1_000)},
    "session, 1 s gap": {"windows": SessionWindows(1_000, grace=1_000)},
    "sliding 10 s": {"windows": SlidingWindows(10_000, grace=1_000)},
}


def preload_timed(bootstrap: str, topic: str, n: int) -> None:
    """n records, 1 ms of event time apart, ending now (a topic refuses timestamps far ahead)."""
    start = int(time.time() * 1000) - n
    produce_rows(bootstrap, [(topic, b"%d" % (i % 1000), b"x" * 100, start + i) for i in range(n)])


def bench_app(kind: str, bootstrap: str, admin: KafkaAdmin, state_dir: str) -> tuple[Application, str]:
    """A benchmark job's application (a 1 s trigger, batches of up to 100,000 records) and its output topic."""
    dst = f"{kind}-bench-out-{uuid.uuid4().hex[:8]}"
    admin.create_topics([TopicSpec(dst, PARTITIONS)])
    return Application(f"{kind}-bench-{uuid.uuid4().hex[:8]}", bootstrap, trigger_interval=1.0,
                       max_records_per_batch=100_000, state_dir=state_dir, log_format="json",
                       log_level="WARNING"), dst


def produce_rows(bootstrap: str, rows: list[tuple[str, bytes, bytes, int]]) -> None:
    """(topic, key, value, timestamp) rows, in order, by one idempotent producer in large batches."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "enable.idempotence": True})
    for topic, key, value, ts in rows:
        while True:
            try:
                producer.produce(topic, value=value, key=key, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def backlog_rate(app: Application, sc: Any, n: int, name: str) -> float:
    """Run `app` through its `n` input records: records/s from the first batch's start to the last batch's end."""
    summary = app.run(sc, until_caught_up=True)
    assert summary.records_in == n, f"{name}: read {summary.records_in} of {n} records"
    assert not summary.dead_letters, f"{name}: {summary.dead_letters} records dead-lettered: the job measured errors"
    first, last = summary.batch_reports[0], summary.batch_reports[-1]
    return n / (last.started + last.duration_s - first.started)


def run_job(sc: Any, bootstrap: str, admin: KafkaAdmin, src: str, name: str, n: int, state_dir: str) -> float:
    app, dst = bench_app("windows", bootstrap, admin, state_dir)
    grouped = app.stream(src, key_serde="bytes", value_serde="bytes").group_by_key()  # (the values are 100 x's)
    job = JOBS[name]
    counted = (grouped.window(job["windows"], emit=job.get("emit", "update")) if "windows" in job else grouped) \
        .count(name="counts")
    if "suppress" in job:
        counted = counted.suppress(job["suppress"], name="limited")
    counted.to_stream().to(dst)
    return backlog_rate(app, sc, n, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default=DEFAULT_MASTER)
    parser.add_argument("--report", default="reports/windows.json")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="eos-windows-bench-"))
    rates: dict[str, list[float]] = {name: [] for name in JOBS}
    try:
        with provide_kafka(brokers=1) as kafka:
            bootstrap = kafka.bootstrap_servers
            admin = KafkaAdmin(bootstrap)
            src = f"windows-bench-in-{uuid.uuid4().hex[:8]}"
            admin.create_topics([TopicSpec(src, PARTITIONS)])
            preload_timed(bootstrap, src, args.records)
            sc = build_spark_context(args.master, "eos-windows-benchmark")
            sc.parallelize(range(4), 4).map(lambda x: x).collect()  # executors warm before the first round
            for round_ in range(args.rounds):
                for name in JOBS:
                    rates[name].append(run_job(sc, bootstrap, admin, src, name, args.records, str(scratch)))
                    console.print(f"round {round_ + 1}: {name}: {rates[name][-1]:,.0f} records/s")
            sc.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {name: round(statistics.median(values)) for name, values in rates.items()}
    base = medians["count"]
    results = {"records": args.records, "rounds": args.rounds, "records_per_s": medians,
               "ratio_to_count": {name: round(rate / base, 3) for name, rate in medians.items()}}
    table = Table(title=f"EOS count per key vs per window: {args.records:,} records, 1,000 keys, "
                        f"{PARTITIONS} partitions, RocksDB, median of {args.rounds} interleaved rounds")
    for col in ("job", "records/s", "/ count"):
        table.add_column(col, justify="right")
    for name, rate in medians.items():
        table.add_row(name, f"{rate:,}", f"{rate / base:.2f}")
    console.print(table)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(results, indent=2))
    console.print(f"report: {args.report}")


if __name__ == "__main__":
    main()
