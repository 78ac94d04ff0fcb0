"""Where a batch's time goes: the peers' stateless or count job run in-process on a local broker and Spark,
with each batch's phases per worker process (from the tasks' results).

    python -m benchmarks.phases [--records 1000000] [--partitions 64] [--job stateless|count]
                                [--settings '{"tasks_per_transaction": 32}'] [--rate 2000 --seconds 30]

Prints per batch: its wall time and records, then per worker process the tasks it ran and the summed
milliseconds of each phase (committed-offset reads, input reads, processing, producing, restores), its
commits (a unit's tasks share one: counted once) and when its last commit landed after the batch began.
By default the input is a backlog of --records loaded first, read until caught up; with --rate, records are
fed at that rate for --seconds while the job runs (the peers' latency runs: where the time between a
batch's plan and its records turning visible goes), and the medians over the batches after the first five
are printed last, with the time from each task's top-up (the look-up of the records that arrived meanwhile)
to its commit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
import uuid

from confluent_kafka import Producer

from eos import Application
from eos.driver.spark import DEFAULT_MASTER
from eos.worker.plans import TaskResult
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec


def order(i: int) -> str:
    """The `i`-th order of the input (~100 B of JSON)."""
    return json.dumps({"id": i, "qty": 2, "price": 1.5, "pad": "x" * 40})


def load(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(records):
        producer.produce(topic, key=f"k{i % 10_000}", value=order(i))
        if i % 10_000 == 0:
            producer.poll(0)
        if i % 50_000 == 0:
            producer.flush()  # (the producer's queue holds 100,000 messages)
    producer.flush()


def feed(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> None:
    """Produce the orders at `rate` records/s (in 10 ms slices) until `stop`."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    began, sent = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - began) * rate)
        for i in range(sent, due):
            producer.produce(topic, key=f"k{i % 10_000}", value=order(i))
        sent = max(sent, due)
        producer.poll(0)
        stop.wait(0.01)
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


def phase_times(report, tasks: list[TaskResult]) -> dict[str, float]:
    """A batch's wall time, when its last commit landed after it began, and the longest task's phases (ms)."""
    last = max((r.committed_at for r in tasks if r.committed_at), default=report.started) - report.started
    slowest = max(tasks, key=lambda r: r.total_ms, default=None)
    times = {"batch": report.duration_s * 1000, "last commit at": last * 1000}
    for name in ("offsets", "read", "process", "produce", "commit", "total"):
        times[f"task {name}"] = getattr(slowest, f"{name}_ms") if slowest is not None else 0.0
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--job", choices=("stateless", "count"), default="stateless")
    parser.add_argument("--settings", default="{}", help="Application settings (JSON)")
    parser.add_argument("--master", default=DEFAULT_MASTER)
    parser.add_argument("--rate", type=int, default=0, help="feed records/s while the job runs (0: a backlog)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to feed at --rate")
    args = parser.parse_args()
    settings = json.loads(args.settings)
    state_dir = tempfile.mkdtemp(prefix="phases-")
    try:
        with provide_kafka() as kafka:
            bootstrap = kafka.bootstrap_servers
            tag = uuid.uuid4().hex[:6]
            src, dst = f"phases-in-{tag}", f"phases-out-{tag}"
            KafkaAdmin(bootstrap).create_topics([TopicSpec(src, args.partitions), TopicSpec(dst, args.partitions)])
            stop = threading.Event()
            feeder = threading.Thread(target=feed, args=(bootstrap, src, args.rate, stop), daemon=True)
            if args.rate:
                feeder.start()
            else:
                load(bootstrap, src, args.records)
            app = build(bootstrap, src, dst, args.job, state_dir, settings)
            lines: list[str] = []
            batches: list[dict[str, float]] = []
            windows: list[float] = []

            def on_batch(report, results) -> None:
                lines.append(f"batch {report.batch}: {report.duration_s * 1000:.0f} ms, {report.records_in:,} records")
                tasks = [r for r in results if isinstance(r, TaskResult)]
                for pid in sorted({r.pid for r in tasks}):
                    lines.append(f"  pid {pid}: " + worker_line([r for r in tasks if r.pid == pid], report.started))
                batches.append(phase_times(report, tasks))
                if len(batches) > 5:
                    windows.extend((r.committed_at - r.topped_up_at) * 1000 for r in tasks
                                   if r.topped_up_at and r.committed_at)

            began = time.monotonic()
            if args.rate:
                app.run(master=args.master, max_seconds=args.seconds, on_batch=on_batch)
                stop.set()
                feeder.join()
            else:
                app.run(master=args.master, until_caught_up=True, on_batch=on_batch)
            fed = f"fed at {args.rate:,} records/s" if args.rate else f"{args.records:,} records"
            print(f"{args.job}, {fed} on {args.partitions} partitions, settings {settings}: "
                  f"{time.monotonic() - began:.1f} s")
            print("\n".join(lines))
            steady = batches[5:]
            if steady:
                print(f"medians over batches 5-{len(batches) - 1} (ms): " + "  ".join(
                    f"{name} {statistics.median(b[name] for b in steady):.0f}" for name in steady[0]))
            if len(windows) >= 10:
                cuts = statistics.quantiles(windows, n=100)
                print(f"from a task's top-up to its commit over batches 5-{len(batches) - 1} ({len(windows)} "
                      f"commits, ms): p50 {cuts[49]:.1f}  p90 {cuts[89]:.1f}  p99 {cuts[98]:.1f}")
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
