"""Throughput and latency of the exactly-once engine, measured side by side in one run on one machine:

* the EOS job (one transaction per task and batch),
* the same job at-least-once (flush outputs, then commit offsets outside a transaction),
* a bare confluent-kafka consume -> produce copy loop in one process (the practical ceiling),

for 100-byte and 1 KB records at a 1 s trigger; then p50/p99 input-to-visible latency under a steady
input rate (input timestamp -> the moment a read_committed consumer sees the output).

    python -m benchmarks.throughput [--records 200000] [--repeats 2] [--latency-seconds 30] [--rate 2000]

Prints a table of ratios and writes reports/throughput.json. Absolute numbers depend on the machine;
the ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

from benchmarks.visible import visible
from eos import Application
from eos.driver.spark import DEFAULT_MASTER, build_spark_context
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console()
PARTITIONS = 4


def make_values(n: int, size: int) -> list[bytes]:
    base = os.urandom(size)
    return [i.to_bytes(8, "big") + base[8:] for i in range(n)]


def preload(bootstrap: str, topic: str, n: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "none", "enable.idempotence": True})
    for i, value in enumerate(make_values(n, size)):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % (i % 1000))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def identity_app(app_id: str, bootstrap: str, src: str, dst: str, guarantee: str) -> Application:
    app = Application(app_id, bootstrap, processing_guarantee=guarantee, trigger_interval=1.0,
                      max_records_per_batch=100_000, log_format="json", log_level="WARNING")
    app.stream(src, key_serde="bytes", value_serde="bytes").to(dst)
    return app


def run_job(sc: Any, bootstrap: str, admin: KafkaAdmin, src: str, n: int, guarantee: str) -> float:
    dst = f"bench-out-{uuid.uuid4().hex[:8]}"
    admin.create_topics([TopicSpec(dst, PARTITIONS)])
    app = identity_app(f"bench-{guarantee}-{uuid.uuid4().hex[:8]}", bootstrap, src, dst, guarantee)
    summary = app.run(sc, until_caught_up=True)
    assert summary.records_out == n, f"{guarantee}: {summary.records_out} of {n} records"
    first, last = summary.batch_reports[0], summary.batch_reports[-1]
    return n / (last.started + last.duration_s - first.started)


def run_copy_loop(bootstrap: str, admin: KafkaAdmin, src: str, n: int) -> float:
    dst = f"bench-copy-{uuid.uuid4().hex[:8]}"
    admin.create_topics([TopicSpec(dst, PARTITIONS)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"copy-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "queued.min.messages": 200_000})
    consumer.assign([TopicPartition(src, p, 0) for p in range(PARTITIONS)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                         "partitioner": "murmur2_random"})
    copied, started = 0, None
    while copied < n:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                continue
            started = started or time.monotonic()
            while True:
                try:
                    producer.produce(dst, value=msg.value(), key=msg.key())
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
    producer.flush(60)
    elapsed = time.monotonic() - (started or time.monotonic())
    consumer.close()
    return n / elapsed


def measure_latency(sc: Any, bootstrap: str, admin: KafkaAdmin, guarantee: str, seconds: float,
                    rate: int, make_app: Callable[[str, str, str, str], Application] | None = None,
                    value: bytes | None = None) -> dict[str, float]:
    """p50/p99 of input-to-visible latency of the identity job (or `make_app(app_id, bootstrap, src, dst)`)
    under `rate` records/s of `value` (default: 100 random bytes) for `seconds`."""
    src, dst = f"lat-in-{uuid.uuid4().hex[:8]}", f"lat-out-{uuid.uuid4().hex[:8]}"
    admin.create_topics([TopicSpec(src, PARTITIONS), TopicSpec(dst, PARTITIONS)])
    app_id = f"lat-{guarantee}-{uuid.uuid4().hex[:8]}"
    app = (make_app(app_id, bootstrap, src, dst) if make_app is not None
           else identity_app(app_id, bootstrap, src, dst, guarantee))
    job = threading.Thread(target=app.run, args=(sc,), kwargs={"max_seconds": seconds + 15}, daemon=True)
    job.start()
    time.sleep(8)  # start-up and the first (empty) batches
    latencies: list[float] = []
    stop = threading.Event()

    def observe() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{uuid.uuid4().hex}",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.assign([TopicPartition(dst, p, 0) for p in range(PARTITIONS)])
        while not stop.is_set():
            for msg in visible(consumer):
                if not msg.error():
                    latencies.append(time.time() * 1000 - msg.timestamp()[1])
        consumer.close()

    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    value = value if value is not None else os.urandom(100)
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        producer.produce(src, value=value, key=b"%d" % (sent % 1000))
        sent += 1
        producer.poll(0)
        time.sleep(max(0.0, sent / rate - (seconds - (end - time.monotonic()))))
    producer.flush(30)
    deadline = time.monotonic() + 30
    while len(latencies) < sent and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    watcher.join(5)
    job.join(60)
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 100 else [float("nan")] * 99
    return {"p50_ms": round(q[49], 1), "p99_ms": round(q[98], 1), "records": sent, "seen": len(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--latency-seconds", type=float, default=30)
    parser.add_argument("--rate", type=int, default=2000, help="input records/s for the latency runs")
    parser.add_argument("--master", default=DEFAULT_MASTER)
    parser.add_argument("--report", default="reports/throughput.json")
    args = parser.parse_args()

    with provide_kafka(brokers=1) as kafka:
        bootstrap = kafka.bootstrap_servers
        admin = KafkaAdmin(bootstrap)
        sc = build_spark_context(args.master, "eos-benchmark")
        sc.parallelize(range(4), 4).map(lambda x: x).collect()  # start the Python workers before timing
        results: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}, "master": args.master,
                                   "records": args.records, "trigger_interval_s": 1.0, "sizes": {}}
        for size in (int(s) for s in args.sizes.split(",")):
            src = f"bench-in-{size}-{uuid.uuid4().hex[:8]}"
            admin.create_topics([TopicSpec(src, PARTITIONS)])
            preload(bootstrap, src, args.records, size)
            runs: dict[str, list[float]] = {"eos": [], "alos": [], "copy": []}
            for _ in range(args.repeats):  # interleaved, so drift hits every variant alike
                runs["eos"].append(run_job(sc, bootstrap, admin, src, args.records, "exactly_once"))
                runs["alos"].append(run_job(sc, bootstrap, admin, src, args.records, "at_least_once"))
                runs["copy"].append(run_copy_loop(bootstrap, admin, src, args.records))
            med = {k: statistics.median(v) for k, v in runs.items()}
            results["sizes"][size] = {"records_per_s": {k: round(v) for k, v in med.items()},
                                      "runs": {k: [round(x) for x in v] for k, v in runs.items()},
                                      "eos_over_alos": round(med["eos"] / med["alos"], 3),
                                      "eos_over_copy_loop": round(med["eos"] / med["copy"], 3)}
        results["latency"] = {g: measure_latency(sc, bootstrap, admin, g, args.latency_seconds, args.rate)
                              for g in ("exactly_once", "at_least_once")}
        sc.stop()

    table = Table(title=f"throughput, {args.records:,} records, 4 partitions, trigger 1 s, {args.master}")
    for col in ("record size", "EOS rec/s", "ALOS rec/s", "copy loop rec/s", "EOS/ALOS", "EOS/copy loop"):
        table.add_column(col, justify="right")
    for size, r in results["sizes"].items():
        rps = r["records_per_s"]
        table.add_row(f"{size} B", f"{rps['eos']:,}", f"{rps['alos']:,}", f"{rps['copy']:,}",
                      f"{r['eos_over_alos']:.2f}", f"{r['eos_over_copy_loop']:.2f}")
    console.print(table)
    lat = Table(title=f"input-to-visible latency at {args.rate} records/s, 100 B, trigger 1 s")
    for col in ("mode", "p50 ms", "p99 ms", "records"):
        lat.add_column(col, justify="right")
    for mode, r in results["latency"].items():
        lat.add_row(mode, str(r["p50_ms"]), str(r["p99_ms"]), f"{r['seen']}/{r['records']}")
    console.print(lat)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(results, indent=2))
    console.print(f"report: {args.report}")


if __name__ == "__main__":
    main()
