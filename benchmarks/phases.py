"""Where a batch's time goes: the peers' stateless or count job run in-process on a local broker and Spark,
with each batch's phases per worker process (from the tasks' results).

    python -m benchmarks.phases [--records 1000000] [--partitions 64] [--job stateless|count]
                                [--settings '{"tasks_per_transaction": 32}']

Prints per batch: its wall time and records, then per worker process the tasks it ran and the summed
milliseconds of each phase (committed-offset reads, input reads, processing, producing, restores), its
commits (a unit's tasks share one: counted once) and when its last commit landed after the batch began.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid

from confluent_kafka import Producer

from eos import Application
from eos.driver.spark import DEFAULT_MASTER
from eos.worker.plans import TaskResult
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec


def load(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(records):
        producer.produce(topic, key=f"k{i % 10_000}",
                         value=json.dumps({"id": i, "qty": 2, "price": 1.5, "pad": "x" * 40}))
        if i % 10_000 == 0:
            producer.poll(0)
        if i % 50_000 == 0:
            producer.flush()  # (the producer's queue holds 100,000 messages)
    producer.flush()


def build(bootstrap: str, src: str, dst: str, job: str, state_dir: str, settings: dict) -> Application:
    app = Application(f"phases-{uuid.uuid4().hex[:6]}", bootstrap, trigger_interval=1.0, state_dir=state_dir,
                      log_format="json", log_level="WARNING", **settings)
    if job == "count":
        app.count(src, dst, name="counts")
    else:
        @app.process(input=src, output=dst, key_serde="string", value_serde="json")
        def enrich(record):
            order = record.value
            return record.key, {**order, "total": order["qty"] * order["price"]}
    return app


def worker_line(results: list[TaskResult], started: float) -> str:
    commits = {r.committed_at: r.commit_ms for r in results if r.committed_at}
    sums = {name: sum(getattr(r, f"{name}_ms") for r in results)
            for name in ("offsets", "read", "process", "produce", "restore")}
    last = max(commits, default=started) - started
    return (f"tasks {len(results):3}  " + "  ".join(f"{k} {v:7.0f}" for k, v in sums.items())
            + f"  commits {len(commits):3} {sum(commits.values()):6.0f} ms  last commit at {last * 1000:6.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--job", choices=("stateless", "count"), default="stateless")
    parser.add_argument("--settings", default="{}", help="Application settings (JSON)")
    parser.add_argument("--master", default=DEFAULT_MASTER)
    args = parser.parse_args()
    settings = json.loads(args.settings)
    state_dir = tempfile.mkdtemp(prefix="phases-")
    try:
        with provide_kafka() as kafka:
            bootstrap = kafka.bootstrap_servers
            tag = uuid.uuid4().hex[:6]
            src, dst = f"phases-in-{tag}", f"phases-out-{tag}"
            KafkaAdmin(bootstrap).create_topics([TopicSpec(src, args.partitions), TopicSpec(dst, args.partitions)])
            load(bootstrap, src, args.records)
            app = build(bootstrap, src, dst, args.job, state_dir, settings)
            lines: list[str] = []

            def on_batch(report, results) -> None:
                lines.append(f"batch {report.batch}: {report.duration_s * 1000:.0f} ms, {report.records_in:,} records")
                tasks = [r for r in results if isinstance(r, TaskResult)]
                for pid in sorted({r.pid for r in tasks}):
                    lines.append(f"  pid {pid}: " + worker_line([r for r in tasks if r.pid == pid], report.started))

            began = time.monotonic()
            app.run(master=args.master, until_caught_up=True, on_batch=on_batch)
            print(f"{args.job}, {args.records:,} records on {args.partitions} partitions, settings {settings}: "
                  f"{time.monotonic() - began:.1f} s")
            print("\n".join(lines))
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
