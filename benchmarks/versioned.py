"""A stream-table join with a versioned table next to the same join with a plain table, side by side in one
run on one machine.

The same input: a table of 1,000 keys updated 20 times each (a quarter of the updates out of order, up to a
minute back), then a stream of records on the same keys, 4 partitions, either at times across the table's
history (most lookups read a key's older versions) or later than all of it (a stream joined in time: every
lookup is of the latest version). Each job left-joins the stream with the table (RocksDB stores): a plain
table (the latest row by offset), a versioned one keeping an hour of history (every version; a lookup by the
stream record's time), one keeping none (`versioned=0`: only the latest version by time), and, for the stream
joined in time (its records up to a minute out of order), the versioned one with a grace period of a minute
(each record held back in a buffer until the stream's time has passed it by a minute). Rounds are
interleaved; each figure is the median of its rounds, records/s (table and stream) from the first batch's
start to the last batch's end.

    python -m benchmarks.versioned [--records 100000] [--rounds 2]

Prints a table with each job's ratio to the plain table and writes reports/versioned.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.throughput import PARTITIONS
from benchmarks.windows import backlog_rate, bench_app, produce_rows
from eos.driver.spark import DEFAULT_MASTER, build_spark_context
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console()

KEYS, UPDATES = 1_000, 20
#: job -> (history retention, None: a plain table; grace period, None: none)
JOBS: dict[str, tuple[int | None, int | None]] = {
    "plain table": (None, None), "versioned, 1 h history": (3_600_000, None), "versioned, no history": (0, None),
    "versioned, 1 h history, grace 1 min": (3_600_000, 60_000)}


def preload(bootstrap: str, table: str, streams: dict[str, str], n: int) -> int:
    """The table's updates (a minute of event time apart per key, a quarter up to a minute back), then `n`
    stream records on each of `streams` ("history": at random times across the updates, "in time": after
    them); returns how many records a job reads."""
    rnd = random.Random(1)
    start = int(time.time() * 1000) - (UPDATES + 2) * 60_000
    rows = [(table, b"%d" % key, b'{"price": %d}' % rnd.randint(1, 999),
             start + step * 60_000 - (rnd.randint(1, 60_000) if rnd.random() < 0.25 else 0))
            for step in range(UPDATES) for key in range(KEYS)]
    for kind, topic in streams.items():
        base, spread = (start, UPDATES * 60_000) if kind == "history" else (start + UPDATES * 60_000, 60_000)
        rows += [(topic, b"%d" % rnd.randrange(KEYS), b'{"n": %d}' % i, base + rnd.randint(0, spread))
                 for i in range(n)]
    produce_rows(bootstrap, rows)
    return KEYS * UPDATES + n


def run_job(sc: Any, bootstrap: str, admin: KafkaAdmin, table: str, stream: str, name: str, total: int,
            state_dir: str) -> float:
    """One job's rate: `stream` left-joined with `table` as `name` keeps it."""
    app, dst = bench_app("versioned", bootstrap, admin, state_dir)
    history, grace = JOBS[name]
    prices = app.table(table, name="prices", versioned=history)
    app.stream(stream).left_join(prices, lambda row, price: price and price["price"], name="priced",
                                 grace=grace).to(dst)
    return backlog_rate(app, sc, total, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000, help="stream records (the table adds 20,000)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default=DEFAULT_MASTER)
    parser.add_argument("--report", default="reports/versioned.json")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="eos-versioned-bench-"))
    # (a grace period with the stream at random times across the history would drop most of it as late)
    runs = [(name, kind) for kind in ("history", "in time") for name in JOBS if kind == "in time" or not JOBS[name][1]]
    rates: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    try:
        with provide_kafka(brokers=1) as kafka:
            bootstrap = kafka.bootstrap_servers
            admin = KafkaAdmin(bootstrap)
            table = f"versioned-bench-table-{uuid.uuid4().hex[:8]}"
            streams = {kind: f"versioned-bench-stream-{uuid.uuid4().hex[:8]}" for kind in ("history", "in time")}
            admin.create_topics([TopicSpec(t, PARTITIONS) for t in (table, *streams.values())])
            total = preload(bootstrap, table, streams, args.records)
            sc = build_spark_context(args.master, "eos-versioned-benchmark")
            sc.parallelize(range(4), 4).map(lambda x: x).collect()  # executors warm before the first round
            for round_ in range(args.rounds):
                for name, kind in runs:
                    rates[name, kind].append(run_job(sc, bootstrap, admin, table, streams[kind], name, total,
                                                     str(scratch)))
                    console.print(f"round {round_ + 1}: {name}, stream {kind}: {rates[name, kind][-1]:,.0f} records/s")
            sc.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {run: round(statistics.median(values)) for run, values in rates.items()}
    ratios = {(name, kind): rate / medians["plain table", kind] for (name, kind), rate in medians.items()}
    results = {"stream_records": args.records, "table_records": KEYS * UPDATES, "rounds": args.rounds,
               "records_per_s": {f"{name}, stream {kind}": r for (name, kind), r in medians.items()},
               "ratio_to_plain": {f"{name}, stream {kind}": round(r, 3) for (name, kind), r in ratios.items()}}
    table_ = Table(title=f"EOS stream-table left join, plain vs versioned table: {KEYS * UPDATES:,} table and "
                         f"{args.records:,} stream records, {KEYS:,} keys, {PARTITIONS} partitions, RocksDB, median "
                         f"of {args.rounds} interleaved rounds")
    for col in ("stream", "job", "records/s", "/ plain"):
        table_.add_column(col, justify="right")
    for (name, kind), rate in medians.items():
        table_.add_row(kind, name, f"{rate:,}", f"{ratios[name, kind]:.2f}")
    console.print(table_)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(results, indent=2))
    console.print(f"report: {args.report}")


if __name__ == "__main__":
    main()
