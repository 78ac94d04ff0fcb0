"""State benchmarks, side by side in one run on one machine:

1. Restore rate (records/s) of one task's store from a changelog partition holding 1M distinct keys
   (written in transactions, as the engine writes changelogs), into RocksDB and into memory.
2. Stateful EOS throughput (a per-key count in RocksDB) next to the stateless EOS figure, same input.

    python -m benchmarks.state [--keys 1000000] [--records 200000]

Prints a table and writes reports/state.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.table import Table

from benchmarks.throughput import PARTITIONS, preload
from eos import Application
from eos.driver.spark import DEFAULT_MASTER, build_spark_context
from eos.worker.clients import BULK_READS
from localkafka.provision import provide_kafka
from recovery import MemoryBackend, RocksDBBackend, restore_store
from transactions import KafkaAdmin, TopicSpec, consumer_settings, range_reader

console = Console()


def write_changelog(bootstrap: str, topic: str, keys: int, value_size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex}",
                         "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    producer.init_transactions(60)
    value = os.urandom(value_size)
    per_txn = 50_000
    for start in range(0, keys, per_txn):
        producer.begin_transaction()
        for i in range(start, min(keys, start + per_txn)):
            while True:
                try:
                    producer.produce(topic, key=b"key-%09d" % i, value=value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.commit_transaction(120)


def measure_restore(bootstrap: str, admin: KafkaAdmin, topic: str, backend: Any) -> dict[str, float]:
    tp = (topic, 0)
    end, start = admin.end_offsets([tp])[tp], admin.earliest_offsets([tp])[tp]
    # (the read-ahead of a worker's changelog reader)
    consumer = Consumer(consumer_settings(bootstrap, f"restore-bench-{uuid.uuid4().hex}", BULK_READS))
    result = restore_store(backend, range_reader(consumer), topic, 0, start_offset=start, end_offset=end)
    consumer.close()
    return {"records": result.records, "seconds": round(result.seconds, 2), "records_per_s": round(result.rate)}


def measure_jobs(sc: Any, bootstrap: str, admin: KafkaAdmin, records: int, keys: int, state_dir: str) -> dict[str, Any]:
    src = f"state-bench-in-{uuid.uuid4().hex[:8]}"
    admin.create_topics([TopicSpec(src, PARTITIONS)])
    preload(bootstrap, src, records, 100)  # keys "0".."999"
    out: dict[str, Any] = {}
    for mode in ("stateless", "stateful", "stateless", "stateful"):  # interleaved
        dst = f"state-bench-out-{uuid.uuid4().hex[:8]}"
        admin.create_topics([TopicSpec(dst, PARTITIONS)])
        app = Application(f"state-bench-{mode}-{uuid.uuid4().hex[:8]}", bootstrap, trigger_interval=1.0,
                          max_records_per_batch=100_000, state_dir=state_dir, log_format="json",
                          log_level="WARNING")
        stream = app.stream(src, key_serde="bytes", value_serde="bytes")
        if mode == "stateless":
            stream.to(dst)
        else:
            stream.group_by_key().count(name="counts").to_stream().to(dst)
        summary = app.run(sc, until_caught_up=True)
        first, last = summary.batch_reports[0], summary.batch_reports[-1]
        out.setdefault(mode, []).append(records / (last.started + last.duration_s - first.started))
    return {mode: round(sorted(v)[len(v) // 2]) for mode, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--master", default=DEFAULT_MASTER)
    parser.add_argument("--report", default="reports/state.json")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="eos-state-bench-"))
    try:
        with provide_kafka(brokers=1) as kafka:
            bootstrap = kafka.bootstrap_servers
            admin = KafkaAdmin(bootstrap)
            changelog = f"bench-changelog-{uuid.uuid4().hex[:8]}"
            admin.create_topics([TopicSpec(changelog, 1, None, {"cleanup.policy": "compact"})])
            t0 = time.monotonic()
            write_changelog(bootstrap, changelog, args.keys)
            console.print(f"wrote {args.keys:,} keys to {changelog} in {time.monotonic() - t0:.1f}s")
            rocks = RocksDBBackend(scratch / "rocksdb")
            restore = {"rocksdb": measure_restore(bootstrap, admin, changelog, rocks),
                       "memory": measure_restore(bootstrap, admin, changelog, MemoryBackend())}
            restore["rocksdb"]["entries"] = rocks.approximate_count()
            rocks.close()
            sc = build_spark_context(args.master, "eos-state-benchmark")
            sc.parallelize(range(4), 4).map(lambda x: x).collect()
            jobs = measure_jobs(sc, bootstrap, admin, args.records, 1000, str(scratch / "jobs"))
            sc.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = {"keys": args.keys, "restore": restore, "throughput_records_per_s": jobs,
               "stateful_over_stateless": round(jobs["stateful"] / jobs["stateless"], 3), "records": args.records}
    table = Table(title=f"restore of one task's store from a changelog of {args.keys:,} keys")
    for col in ("store", "records", "seconds", "records/s"):
        table.add_column(col, justify="right")
    for name, r in restore.items():
        table.add_row(name, f"{r['records']:,}", str(r["seconds"]), f"{r['records_per_s']:,}")
    console.print(table)
    jt = Table(title=f"EOS throughput, {args.records:,} records, 1,000 keys, 4 partitions, trigger 1 s")
    for col in ("job", "records/s"):
        jt.add_column(col, justify="right")
    jt.add_row("stateless (copy)", f"{jobs['stateless']:,}")
    jt.add_row("stateful (count per key, RocksDB)", f"{jobs['stateful']:,}")
    jt.add_row("stateful / stateless", f"{results['stateful_over_stateless']:.2f}")
    console.print(jt)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(results, indent=2))
    console.print(f"report: {args.report}")


if __name__ == "__main__":
    main()
