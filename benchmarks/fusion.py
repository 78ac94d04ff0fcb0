"""The same three operators (filter -> enrich -> project) run three ways, side by side in one run, on a local
broker and Spark:

* "fluent": `app.stream(src).filter(...).map_values(enrich).map_values(project).to(dst)`, one sub-topology;
* "function": one hand-written `@app.process` function doing all three (the floor);
* "chained": three `@app.process` steps chained through two topics (what a job looked like before the
  processor graph: a sub-topology per step).

For each: a backlog of `--records` JSON records on 4 partitions (a warm-up round, then interleaved rounds):
wall records/s and CPU-seconds per 100k records (this process, the JVM and every Python worker, from
/proc); then p50/p99 input-to-visible latency at `--rate` records/s (trigger 1 s).

    python -m benchmarks.fusion [--records 200000] [--rounds 3] [--latency-seconds 30] [--rate 2000]

Prints the ratios to "function" and writes reports/fusion.json. Goal: "fluent" within 10 % of "function".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from benchmarks.throughput import PARTITIONS, measure_latency
from eos import Application
from eos.driver.spark import DEFAULT_MASTER, build_spark_context
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console(width=150)
VARIANTS = ("fluent", "function", "chained")


def keep(key: Any, value: dict[str, Any]) -> bool:
    return value["qty"] > 0


def enrich(value: dict[str, Any]) -> dict[str, Any]:
    return {**value, "total": value["qty"] * value["price"], "vip": value["customer"] % 10 == 0}


def project(value: dict[str, Any]) -> dict[str, Any]:
    return {"customer": value["customer"], "total": value["total"], "vip": value["vip"]}


def build(variant: str, app_id: str, bootstrap: str, src: str, dst: str) -> Application:
    app = Application(app_id, bootstrap, trigger_interval=1.0, max_records_per_batch=100_000, log_format="json",
                      log_level="WARNING")
    if variant == "fluent":
        app.stream(src).filter(keep).map_values(enrich).map_values(project).to(dst)
    elif variant == "function":
        @app.process(input=src, output=dst, key_serde="string", value_serde="json", name="all")
        def all_three(record):  # type: ignore[no-untyped-def]
            if not keep(record.key, record.value):
                return None
            return record.key, project(enrich(record.value))
    else:
        a, b = f"{dst}-a", f"{dst}-b"
        KafkaAdmin(bootstrap).create_topics([TopicSpec(a, PARTITIONS), TopicSpec(b, PARTITIONS)])
        app.process(input=src, output=a, key_serde="string", value_serde="json", name="filtered")(
            lambda r: (r.key, r.value) if keep(r.key, r.value) else None)
        app.process(input=a, output=b, key_serde="string", value_serde="json", name="enriched")(
            lambda r: (r.key, enrich(r.value)))
        app.process(input=b, output=dst, key_serde="string", value_serde="json", name="projected")(
            lambda r: (r.key, project(r.value)))
    return app


def factory(variant: str) -> Callable[[str, str, str, str], Application]:
    def make(app_id: str, bootstrap: str, src: str, dst: str) -> Application:
        return build(variant, app_id, bootstrap, src, dst)
    return make


def order(i: int) -> bytes:
    return orjson.dumps({"customer": i % 1000, "qty": i % 5, "price": 2.5, "note": "x" * 40})


def preload(bootstrap: str, topic: str, n: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=order(i), key=b"c%d" % (i % 1000))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return sum(1 for i in range(n) if i % 5)  # records that pass the filter


def cpu_seconds() -> float:
    """CPU time of this process and all its descendants (the JVM, Spark's Python workers), from /proc."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def backlog(sc: Any, bootstrap: str, admin: KafkaAdmin, variant: str, src: str, records: int,
            passing: int) -> tuple[float, float]:
    """Input records/s through the whole backlog (all steps) and CPU-seconds spent."""
    dst = f"fusion-out-{uuid.uuid4().hex[:8]}"
    admin.create_topics([TopicSpec(dst, PARTITIONS)])
    app = build(variant, f"fusion-{variant}-{uuid.uuid4().hex[:8]}", bootstrap, src, dst)
    cpu, started = cpu_seconds(), time.monotonic()
    summary = app.run(sc, until_caught_up=True)
    elapsed, spent = time.monotonic() - started, cpu_seconds() - cpu
    steps = 3 if variant == "chained" else 1  # each chained step writes every record that passed the filter
    assert summary.records_out == passing * steps, f"{variant}: {summary.records_out} of {passing * steps} records"
    return records / elapsed, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=30)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--master", default=DEFAULT_MASTER)
    parser.add_argument("--report", default="reports/fusion.json")
    args = parser.parse_args()

    with provide_kafka(brokers=1) as kafka:
        bootstrap = kafka.bootstrap_servers
        admin = KafkaAdmin(bootstrap)
        sc = build_spark_context(args.master, "eos-fusion-benchmark")
        sc.parallelize(range(4), 4).map(lambda x: x).collect()  # start the Python workers before timing
        src = f"fusion-in-{uuid.uuid4().hex[:8]}"
        admin.create_topics([TopicSpec(src, PARTITIONS)])
        passing = preload(bootstrap, src, args.records)
        rate: dict[str, list[float]] = {v: [] for v in VARIANTS}
        cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for variant in VARIANTS:  # a warm-up round, not counted: Spark's Python workers import the job's code
            backlog(sc, bootstrap, admin, variant, src, args.records, passing)
        for _ in range(args.rounds):  # interleaved, so drift hits every variant alike
            for variant in VARIANTS:
                r, c = backlog(sc, bootstrap, admin, variant, src, args.records, passing)
                rate[variant].append(r)
                cpu[variant].append(c / args.records * 100_000)
        latency = {v: measure_latency(sc, bootstrap, admin, "exactly_once", args.latency_seconds, args.rate,
                                      make_app=factory(v), value=order(1)) for v in VARIANTS}
        sc.stop()

    results: dict[str, Any] = {"records": args.records, "rounds": args.rounds, "rate": args.rate, "variants": {}}
    for v in VARIANTS:
        results["variants"][v] = {"records_per_s": round(statistics.median(rate[v])),
                                  "cpu_s_per_100k": round(statistics.median(cpu[v]), 2),
                                  "runs_records_per_s": [round(x) for x in rate[v]],
                                  "runs_cpu_s_per_100k": [round(x, 2) for x in cpu[v]], **latency[v]}
    base = results["variants"]["function"]
    table = Table(title=f"filter -> enrich -> project, {args.records:,} records, 4 partitions, trigger 1 s; "
                        f"latency at {args.rate} rec/s")
    for col in ("variant", "rec/s", "CPU s / 100k", "p50 ms", "p99 ms", "rec/s vs function",
                "CPU vs function", "p50 vs function"):
        table.add_column(col, justify="right")
    for v, r in results["variants"].items():
        r["ratios_to_function"] = {"records_per_s": round(r["records_per_s"] / base["records_per_s"], 3),
                                   "cpu": round(r["cpu_s_per_100k"] / base["cpu_s_per_100k"], 3),
                                   "p50": round(r["p50_ms"] / base["p50_ms"], 3)}
        q = r["ratios_to_function"]
        table.add_row(v, f"{r['records_per_s']:,}", f"{r['cpu_s_per_100k']}", str(r["p50_ms"]), str(r["p99_ms"]),
                      f"{q['records_per_s']:.2f}", f"{q['cpu']:.2f}", f"{q['p50']:.2f}")
    console.print(table)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(results, indent=2))
    console.print(f"report: {args.report}")


if __name__ == "__main__":
    main()
