"""A stream-table join whose table keeps a changelog of its own, next to the same join with the table's topic as
its changelog (`topology_optimization="all"`, Kafka Streams' source-topic optimization), side by side in one run
on one machine.

The same input: a table of 10,000 keys updated 20 times each (200,000 records on a compacted topic), then
100,000 stream records on the same keys, 4 partitions; each job left-joins the stream with the table (RocksDB
stores). Per job: records/s (table and stream) from the first batch's start to the last batch's end, the
changelog records it wrote, and, once it has caught up, what its first batch costs when every task has lost its
state (a fresh state directory, a few new stream records): the records it restored and the batch's seconds.
Rounds are interleaved; each figure is the median of its rounds.

    python -m benchmarks.table_changelogs [--records 100000] [--rounds 2] [--audit]

`--audit` also times each job's join audit once it has caught up (the 300,000 records replayed, each stream
record's result bounded by what its batch had read of the table).

Prints a table with each figure's ratio between the jobs and writes reports/table_changelogs.json.
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
from benchmarks.windows import bench_app, produce_rows
from eos.audit import audit_joins
from eos.driver.spark import DEFAULT_MASTER, build_spark_context
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console()

KEYS, UPDATES = 10_000, 20
#: job -> topology_optimization
JOBS = {"own changelog": "none", "the table's topic": "all"}
LOST_RECORDS = 8


def preload(bootstrap: str, table: str, stream: str, n: int) -> int:
    """The table's updates, then `n` stream records after them; returns how many records a job reads."""
    rnd = random.Random(1)
    start = int(time.time() * 1000) - (UPDATES + 2) * 60_000
    rows = [(table, b"%d" % key, b'{"price": %d}' % rnd.randint(1, 999), start + step * 60_000)
            for step in range(UPDATES) for key in range(KEYS)]
    rows += [(stream, b"%d" % rnd.randrange(KEYS), b'{"n": %d}' % i, start + UPDATES * 60_000 + i) for i in range(n)]
    produce_rows(bootstrap, rows)
    return KEYS * UPDATES + n


def run_job(sc: Any, bootstrap: str, admin: KafkaAdmin, table: str, stream: str, name: str, total: int,
            state_dir: str, audit: bool = False) -> dict[str, float]:
    """One job: its rate through the backlog, the changelog records it wrote, its join audit's seconds (with
    `audit`), and its first batch with every task's state lost."""
    app, dst = bench_app("table-changelogs", bootstrap, admin, state_dir)
    app.configure(topology_optimization=JOBS[name])
    app.stream(stream).left_join(app.table(table, name="prices"), lambda row, price: price and price["price"],
                                 name="priced").to(dst)
    summary = app.run(sc, until_caught_up=True)
    assert summary.records_in == total, f"{name}: read {summary.records_in} of {total} records"
    first, last = summary.batch_reports[0], summary.batch_reports[-1]
    rate = total / (last.started + last.duration_s - first.started)
    audit_s = 0.0
    if audit:
        t0 = time.monotonic()
        (report,) = audit_joins(app)
        audit_s = time.monotonic() - t0
        assert report.verdict == "PASS", report
    now = int(time.time() * 1000)
    produce_rows(bootstrap, [(stream, b"%d" % key, b'{"n": -1}', now) for key in range(LOST_RECORDS)])
    app.configure(state_dir=str(Path(state_dir) / f"lost-{uuid.uuid4().hex[:8]}"))
    after = app.run(sc, until_caught_up=True)
    lost = after.batch_reports[0]
    return {"records_per_s": rate, "changelog_records": summary.changelog_records,
            "restored_records": lost.restored_records, "restore_batch_s": lost.duration_s,
            **({"join_audit_s": audit_s} if audit else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000, help="stream records (the table adds 200,000)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default=DEFAULT_MASTER)
    parser.add_argument("--audit", action="store_true",
                        help="also time each job's join audit (`eos audit join`), bounded by the ledger's batches")
    parser.add_argument("--report", default="reports/table_changelogs.json")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="eos-table-changelogs-bench-"))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in JOBS}
    try:
        with provide_kafka(brokers=1) as kafka:
            bootstrap = kafka.bootstrap_servers
            admin = KafkaAdmin(bootstrap)
            table = f"table-changelogs-bench-table-{uuid.uuid4().hex[:8]}"
            stream = f"table-changelogs-bench-stream-{uuid.uuid4().hex[:8]}"
            admin.create_topics([TopicSpec(table, PARTITIONS, config={"cleanup.policy": "compact"}),
                                 TopicSpec(stream, PARTITIONS)])
            total = preload(bootstrap, table, stream, args.records)
            sc = build_spark_context(args.master, "eos-table-changelogs-benchmark")
            sc.parallelize(range(4), 4).map(lambda x: x).collect()  # executors warm before the first round
            for round_ in range(args.rounds):
                for name in JOBS:
                    runs[name].append(run_job(sc, bootstrap, admin, table, stream, name, total, str(scratch),
                                               args.audit))
                    total += LOST_RECORDS  # (the stream records of its batch after the state was lost)
                    figures = runs[name][-1]
                    console.print(f"round {round_ + 1}: {name}: {figures['records_per_s']:,.0f} records/s, "
                                  f"{figures['changelog_records']:,.0f} changelog records, state lost: "
                                  f"{figures['restored_records']:,.0f} restored in {figures['restore_batch_s']:.2f} s")
            sc.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {name: {k: statistics.median(r[k] for r in rounds) for k in rounds[0]} for name, rounds in runs.items()}
    mine, own = medians["the table's topic"], medians["own changelog"]
    results = {"stream_records": args.records, "table_records": KEYS * UPDATES, "rounds": args.rounds,
               "jobs": medians, "spread": {name: {k: [r[k] for r in rounds] for k in rounds[0]}
                                            for name, rounds in runs.items()},
               "ratio": {k: round(mine[k] / own[k], 3) if own[k] else None for k in own}}
    table_ = Table(title=f"EOS stream-table left join: {KEYS * UPDATES:,} table and {args.records:,} stream records, "
                         f"{KEYS:,} keys, {PARTITIONS} partitions, RocksDB, median of {args.rounds} interleaved rounds")
    for col in ("figure", *JOBS, "ratio"):
        table_.add_column(col, justify="right")
    for key, label, fmt in (("records_per_s", "records/s", "{:,.0f}"), ("changelog_records", "changelog records",
                                                                        "{:,.0f}"),
                            ("restored_records", "restored, state lost", "{:,.0f}"),
                            ("restore_batch_s", "that batch, s", "{:.2f}"),
                            ("join_audit_s", "join audit, s", "{:.1f}")):
        if key not in results["ratio"]:
            continue
        ratio = results["ratio"][key]
        table_.add_row(label, *(fmt.format(medians[name][key]) for name in JOBS),
                       "-" if ratio is None else f"{ratio:.2f}")
    console.print(table_)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(results, indent=2))
    console.print(f"report: {args.report}")


if __name__ == "__main__":
    main()
