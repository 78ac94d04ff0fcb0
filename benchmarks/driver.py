"""The test driver's speed (eos.testing.TopologyTestDriver): records per second through a stateless job, a
keyed count (10,000 keys) without and with a record cache, and a windowed count in one process, piped in as a
user's test would (serialized by the driver), next to the in-memory Kafka alone (the same records produced
and read back, no processing): the driver's ceiling. The counts run the worker's own processing code, so
they show what a record costs there (the cached count: numbers held in the cache, `eos.operators.aggregate`).

    python -m benchmarks.driver [--records 100000] [--rounds 3]

Prints each job's median records/s over interleaved rounds and its ratio to the ceiling; writes
reports/driver.json. Goals: at least 100,000 records/s stateless and 30,000 for the windowed count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from eos import Application
from eos.testing import TopologyTestDriver
from eos.windows import TumblingWindows
from transactions import OffsetRange, range_reader
from transactions.memory import MemoryCluster, MemoryConsumer

console = Console()
GOALS = {"stateless": 100_000, "windowed count": 30_000}


def stateless(records: int) -> float:
    app = Application("bench-stateless", max_records_per_batch=50_000)
    app.stream("in").map_values(lambda value: {**value, "seen": True}, name="enrich").to("out")

    return _timed(app, [("in", f"k{i % 1000}", {"n": i}, i) for i in range(records)])


def count(records: int, cache_max_bytes: int = 0) -> float:
    app = Application("bench-count", max_records_per_batch=100_000, cache_max_bytes=cache_max_bytes)
    app.stream("in", value_serde="bytes").group_by_key().count(name="counts").to_stream().to("out")
    return _timed(app, [("in", f"k{i * 7919 % 10_000}", b"{}", i) for i in range(records)])


def cached_count(records: int) -> float:
    return count(records, cache_max_bytes=10 * 1024 * 1024)


def windowed_count(records: int) -> float:
    app = Application("bench-windows", max_records_per_batch=50_000)
    app.stream("in", value_serde="bytes").group_by_key().window(TumblingWindows(60_000)).count(name="per_minute") \
        .to_stream().to("out")
    return _timed(app, [("in", f"k{i % 1000}", b"", i * 10) for i in range(records)])


def ceiling(records: int) -> float:
    """The in-memory Kafka alone: the records appended to a topic and read back, then appended to another."""
    cluster = MemoryCluster()
    cluster.create_topic("in", 1)
    cluster.create_topic("out", 1)
    started = time.perf_counter()
    for i in range(records):
        cluster.append("in", None, f"k{i % 1000}".encode(), b'{"n":1}', None, i)
    for chunk in range_reader(MemoryConsumer(cluster, "g"))([OffsetRange("in", 0, 0, records)], 60.0):
        for msg in chunk:
            cluster.append("out", None, msg.key(), msg.value(), msg.headers(), msg.timestamp()[1])
    return records / (time.perf_counter() - started)


def _timed(app: Application, inputs: list[tuple]) -> float:
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    started = time.perf_counter()
    driver.pipe_records(inputs)
    elapsed = time.perf_counter() - started
    driver.close()
    return len(inputs) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    jobs: dict[str, Callable[[int], float]] = {"in-memory Kafka alone": ceiling, "stateless": stateless,
                                                "count": count, "count, 10 MiB cache": cached_count,
                                                "windowed count": windowed_count}
    rates: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(args.rounds):
        for name, job in jobs.items():
            rates[name].append(job(args.records))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    table = Table(title=f"TopologyTestDriver, {args.records:,} records, median of {args.rounds} rounds")
    for column in ("job", "records/s", "rounds", "vs in-memory Kafka alone", "goal"):
        table.add_column(column, justify="left" if column == "job" else "right")
    for name, median in medians.items():
        goal = GOALS.get(name)
        table.add_row(name, f"{median:,.0f}", " / ".join(f"{r:,.0f}" for r in rates[name]),
                      f"{median / medians['in-memory Kafka alone']:.2f}",
                      "" if goal is None else f"{goal:,} ({'met' if median >= goal else 'not met'})")
    console.print(table)
    Path("reports").mkdir(exist_ok=True)
    Path("reports/driver.json").write_text(json.dumps({"records": args.records, "rates": rates,
                                                       "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
