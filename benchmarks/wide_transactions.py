"""What a transaction costs by the partitions it writes, with the broker's partition verification on and off,
side by side in one run on two local brokers.

Each transaction of the framework's producer (`transactions.TransactionalProducer`, its default settings)
writes one ~100 B record to each of N partitions, then waits for their delivery (`flush`: "produce") and
commits ("commit"); a producer's transactions are `--gap` seconds apart, as a task's are a batch apart. One
broker runs with Kafka's default, `transaction.partition.verification.enable=true` (KIP-890: a partition's
leader asks the transaction coordinator whether the partition is in the producer's transaction before it
appends the partition's first records of each transaction), the other with it off. librdkafka sends one
partition per produce request (librdkafka#1700) and a broker serves a connection's requests one at a time,
so with it on a transaction waits for one verification per partition, one after another; the Java client
sends all of a broker's partitions in one request, verified together. A unit of 32 tasks on 64 partitions
writes 64-96 partitions a transaction. Every count first runs a few uncounted transactions on both brokers.

    python -m benchmarks.wide_transactions [--partitions 4,16,64] [--transactions 30] [--rounds 2] [--gap 0.3]

Prints per partition count and broker the medians of produce and commit, and the ratio of the totals.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.table import Table

from localkafka.cluster import LocalCluster
from transactions import KafkaAdmin, TopicSpec, TransactionalProducer

console = Console()
VERIFICATION = "transaction.partition.verification.enable"
SETTINGS = ("true", "false")  # Kafka's default first
COLD = 3  # transactions of each producer not counted


def timed_transactions(bootstrap: str, topic: str, partitions: int, count: int,
                       gap: float) -> list[tuple[float, float]]:
    """`count` transactions of one record per partition: (produce ms, commit ms) of each."""
    producer = TransactionalProducer(bootstrap, f"txn-bench-{uuid.uuid4().hex[:8]}")
    producer.init(timeout=60)
    value = b"x" * 100
    times = []
    try:
        for _ in range(count):
            time.sleep(gap)
            t0 = time.perf_counter()
            producer.begin()
            for partition in range(partitions):
                producer.produce(topic, value, b"k", partition=partition)
            producer.flush()
            t1 = time.perf_counter()
            producer.commit()
            times.append(((t1 - t0) * 1000, (time.perf_counter() - t1) * 1000))
    finally:
        producer.close()
    return times[COLD:]  # (a new producer's first transactions find its connections and metadata cold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="4,16,64", help="partition counts, comma-separated")
    parser.add_argument("--transactions", type=int, default=30, help="transactions per count, broker and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each running every count on both brokers")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between a producer's transactions")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.partitions.split(",")]
    except ValueError:
        parser.error(f"--partitions takes whole numbers separated by commas, not {args.partitions!r}")
    if min(counts) < 1 or args.transactions <= COLD or args.rounds < 1 or args.gap < 0:
        parser.error(f"partition counts and --rounds must be at least 1, --transactions at least {COLD + 1} (each "
                     f"producer's first {COLD} are not counted), --gap not negative")
    scratch = Path(tempfile.mkdtemp(prefix="eos-txn-bench-"))
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    try:
        with ExitStack() as stack:
            brokers = {}
            for setting in SETTINGS:
                cluster = LocalCluster(scratch / setting, extra_config={VERIFICATION: setting}).up()
                stack.callback(cluster.down)
                topic = f"txn-bench-{uuid.uuid4().hex[:6]}"
                KafkaAdmin(cluster.bootstrap_servers).create_topics([TopicSpec(topic, max(counts))])
                brokers[setting] = (cluster.bootstrap_servers, topic)
            for n in counts:  # warm-up, not counted: a fresh broker's JIT compiles its request paths first
                for bootstrap, topic in brokers.values():
                    timed_transactions(bootstrap, topic, n, COLD + 2, 0.0)
            for rnd in range(args.rounds):
                for n in counts:
                    for setting, (bootstrap, topic) in brokers.items():
                        times = timed_transactions(bootstrap, topic, n, args.transactions, args.gap)
                        results.setdefault((n, setting), []).extend(times)
                        console.print(f"round {rnd + 1}: {n} partitions, verification {setting}: "
                                      f"{statistics.median(p + c for p, c in times):.1f} ms a transaction")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = Table(title=f"a transaction of one record per partition ({args.rounds} rounds of "
                        f"{args.transactions}, {args.gap} s apart; medians)")
    for column in ("partitions", "verification", "produce ms", "commit ms", "total ms", "on / off"):
        table.add_column(column, justify="right")
    for n in counts:
        totals = {s: statistics.median(p + c for p, c in results[(n, s)]) for s in SETTINGS}
        for setting in SETTINGS:
            times = results[(n, setting)]
            table.add_row(str(n), setting, f"{statistics.median(p for p, _ in times):.1f}",
                          f"{statistics.median(c for _, c in times):.1f}", f"{totals[setting]:.1f}",
                          f"{totals['true'] / totals['false']:.2f}x" if setting == "true" else "")
    console.print(table)


if __name__ == "__main__":
    main()
