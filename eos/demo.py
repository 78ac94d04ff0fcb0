"""`eos demo`: a local Kafka cluster, generated input, the example exactly-once job on Spark, an audit."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from eos.audit import audit_lineage
from eos.examples import orders
from eos.spark import DEFAULT_MASTER, build_spark_context
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec

console = Console()


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i, (key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("input records were not all delivered")


def main(records: int = 100_000, partitions: int = 4, master: str | None = None) -> int:
    with provide_kafka(brokers=1) as kafka:
        console.print(f"Kafka ({kafka.source}) at [bold]{kafka.bootstrap_servers}[/bold]")
        run = uuid.uuid4().hex[:6]
        src, dst = f"demo-orders-{run}", f"demo-orders-enriched-{run}"
        admin = KafkaAdmin(kafka.bootstrap_servers)
        admin.create_topics([TopicSpec(src, partitions), TopicSpec(dst, partitions)])
        produce(kafka.bootstrap_servers, src, orders.generate(records, bad_every=1000))
        console.print(f"generated {records:,} orders in {src} ({partitions} partitions, 1 in 1000 malformed)")

        app = orders.build(f"demo-enricher-{run}", input_topic=src, output_topic=dst,
                           bootstrap_servers=kafka.bootstrap_servers, max_records_per_batch=20_000)
        spark = build_spark_context(master or DEFAULT_MASTER, app_name="eos-demo")
        try:
            t0 = time.monotonic()
            summary = app.run(spark, until_caught_up=True)
            elapsed = time.monotonic() - t0
        finally:
            spark.stop()  # workers hold Kafka clients; stop them before the cluster goes away

        audit = audit_lineage(kafka.bootstrap_servers, [src], [dst], dead_letter_topic=app.config.dlq_topic,
                              group=app.config.group_id, admin=admin)
        hw = admin.partition_offsets(admin.topic_partitions(dst))
        open_txns = sum(o.open_transaction for o in hw.values())

        table = Table(title="exactly-once demo: orders enricher", show_header=False)
        rows = [("input records", f"{records:,}"), ("output records (committed)", f"{audit.output_records:,}"),
                ("dead letters", f"{audit.dead_lettered:,}"), ("duplicates found (by lineage)", str(audit.duplicates)),
                ("lost records", str(audit.lost)), ("unexpected records", str(audit.unexpected)),
                ("open transactions on the output", str(open_txns)), ("batches", str(summary.batches)),
                ("transactions committed", str(summary.transactions)),
                ("job time", f"{elapsed:.1f} s ({summary.records_in / max(elapsed, 1e-9):,.0f} records/s, first batch "
                             "includes Python worker start-up)")]
        for name, value in rows:
            table.add_row(name, value)
        console.print(table)
        ok = audit.violations == 0 and open_txns == 0 and audit.output_records + audit.dead_lettered == records
        console.print("[bold green]PASS[/bold green]: every input is in the output or the dead-letter topic exactly once"
                      if ok else "[bold red]FAIL[/bold red]: the audit found violations")
        return 0 if ok else 1
