"""Audit throughput and peak memory on 1M and 10M records.

For each size: an input topic (4 partitions) and an output topic with one record per input carrying its
lineage header (written directly, as a job would). Each audit runs in a fresh process so its peak RSS is
its own (VmHWM, read by the child itself): the local auditor (partitions one after another) and the Spark
auditor (partitions as tasks; its executors' memory is not in the driver's figure).

    python -m benchmarks.audit [--sizes 1000000,10000000] [--spark-master local[2]]

Prints a table and writes reports/audit.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from eos.origin import ORIGIN_HEADER, encode_origin
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console()
PARTITIONS = 4


def write(bootstrap: str, src: str, dst: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 2_000_000, "compression.type": "lz4"})
    per = n // PARTITIONS
    for topic, with_origin in ((src, False), (dst, True)):
        for p in range(PARTITIONS):
            for offset in range(per):
                headers = [(ORIGIN_HEADER, encode_origin(src, p, offset))] if with_origin else None
                while True:
                    try:
                        producer.produce(topic, value=b"v" * 20, key=b"%d" % offset, partition=p, headers=headers)
                        break
                    except BufferError:
                        producer.poll(0.05)
        producer.flush(600)


def run_child(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.audit", *args], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"audit child failed ({proc.returncode}): {proc.stdout[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _peak_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def child(bootstrap: str, src: str, dst: str, master: str | None) -> None:
    from eos.audit import SparkExecutor, audit

    executor = None
    if master:
        from eos.driver.spark import build_spark_context

        executor = SparkExecutor(build_spark_context(master, "eos-audit-benchmark"))
    t0 = time.monotonic()
    report = audit(bootstrap, inputs=[src], outputs=[dst], executor=executor)
    elapsed = time.monotonic() - t0
    print(json.dumps({"verdict": report.verdict, "seconds": elapsed, "expected": report.lineage.expected,
                      "outputs": report.lineage.output_records, "peak_rss_kib": _peak_rss_kib()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--report", default="reports/audit.json")
    parser.add_argument("--child", nargs=4, metavar=("BOOTSTRAP", "INPUT", "OUTPUT", "MASTER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        bootstrap, src, dst, master = args.child
        child(bootstrap, src, dst, None if master == "-" else master)
        return
    results = []
    with provide_kafka(brokers=1) as kafka:
        admin = KafkaAdmin(kafka.bootstrap_servers)
        for n in (int(s) for s in args.sizes.split(",")):
            src, dst = f"audit-in-{uuid.uuid4().hex[:6]}", f"audit-out-{uuid.uuid4().hex[:6]}"
            admin.create_topics([TopicSpec(src, PARTITIONS), TopicSpec(dst, PARTITIONS)])
            t0 = time.monotonic()
            write(kafka.bootstrap_servers, src, dst, n)
            console.print(f"wrote {n:,} input and {n:,} output records in {time.monotonic() - t0:.0f}s")
            for mode, master in (("local", "-"), (f"spark {args.spark_master}", args.spark_master)):
                out = run_child(["--child", kafka.bootstrap_servers, src, dst, master])
                assert out["verdict"] == "PASS" and out["expected"] == n, out
                results.append({"records": n, "mode": mode, "seconds": round(out["seconds"], 1),
                                "records_per_s": round(n / out["seconds"]),
                                "peak_rss_mib": round(out["peak_rss_kib"] / 1024)})
    table = Table(title="auditor: lineage audit of N input and N output records (4 partitions)")
    for col in ("records", "mode", "seconds", "records/s", "peak RSS MiB"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(f"{r['records']:,}", r["mode"], str(r["seconds"]), f"{r['records_per_s']:,}",
                      str(r["peak_rss_mib"]))
    console.print(table)
    console.print("records/s counts audited output records; each audit reads the input and the output once "
                  "(peak RSS of the Spark mode is the driver's).")
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(results, indent=2))
    console.print(f"report: {args.report}")


if __name__ == "__main__":
    main()
