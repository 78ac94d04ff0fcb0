"""`eos demo`: a local Kafka cluster, generated orders, the example exactly-once pipeline on Spark
(a stateless enricher and stateful per-customer totals), and the auditor's verdict on its output."""

from __future__ import annotations

import json
import time
import uuid

from rich.console import Console
from rich.table import Table

from eos.audit import AggregateSpec, audit
from eos.driver.spark import build_spark_context, stop_context
from eos.examples import orders
from localkafka.provision import provide_kafka
from transactions import KafkaAdmin, TopicSpec, produce_pairs

console = Console()


def main(records: int = 100_000, partitions: int = 4, master: str | None = None) -> int:
    with provide_kafka(brokers=1) as kafka:
        console.print(f"Kafka ({kafka.source}) at [bold]{kafka.bootstrap_servers}[/bold]")
        run = uuid.uuid4().hex[:6]
        src, enriched, totals = f"demo-orders-{run}", f"demo-orders-enriched-{run}", f"demo-customer-totals-{run}"
        KafkaAdmin(kafka.bootstrap_servers).create_topics([TopicSpec(t, partitions) for t in (src, enriched, totals)])
        produce_pairs(kafka.bootstrap_servers, src, orders.generate(records, bad_every=1000))
        console.print(f"generated {records:,} orders in {src} ({partitions} partitions, 1 in 1000 malformed)")

        app = orders.build(f"demo-orders-{run}", input_topic=src, output_topic=enriched, totals_topic=totals,
                           bootstrap_servers=kafka.bootstrap_servers, max_records_per_batch=20_000,
                           state_dir=f"~/.eos/demo-state/{run}", log_format="console", log_level="WARNING")
        sc = build_spark_context(master, app_name="eos-demo")
        try:
            t0 = time.monotonic()
            summary = app.run(sc, until_caught_up=True)
            elapsed = time.monotonic() - t0
        finally:
            stop_context(sc)  # workers hold Kafka clients; stop them before the cluster goes away

        group, dlq = app.config.group_id, app.config.dlq_topic
        changelog = f"{app.config.application_id}-totals-store-changelog"
        # One sub-topology writes both outputs: the lineage audit follows each order to its enriched record and
        # its totals update; the aggregate audit recomputes every customer's revenue from the orders.
        lineage = audit(kafka.bootstrap_servers, inputs=[src], outputs=[enriched, totals], dead_letter_topic=dlq,
                        group=group, extra_topics=[changelog])
        revenue = AggregateSpec("sum", lambda raw: orders.total_of(json.loads(raw or b"{}")),
                                lambda raw: json.loads(raw or b"{}")["revenue"], accept=_well_formed)
        exact = audit(kafka.bootstrap_servers, inputs=[src], outputs=[totals], group=group, aggregate=revenue)

        table = Table(title="exactly-once demo: orders -> enrich -> totals per customer", show_header=False)
        ln, ag = lineage.lineage, exact.aggregate
        assert ln is not None and ag is not None
        for name, value in [
            ("input orders", f"{records:,}"),
            ("enriched orders (committed)", f"{ln.output_records - ag.output_records:,}"),
            ("dead letters (malformed orders)", f"{ln.dead_lettered:,}"),
            ("duplicates found (by lineage)", f"{ln.duplicates}"),
            ("lost records", f"{ln.lost}"),
            ("customer totals updates (committed)", f"{ag.output_records:,}"),
            ("customers whose final revenue matches the input", f"{ag.keys_expected - ag.wrong_final:,} of "
                                                               f"{ag.keys_expected:,}"),
            ("open transactions (outputs, DLQ, changelog)", f"{lineage.transactions.open_transactions}"),
            ("batches / transactions committed", f"{summary.batches} / {summary.transactions}"),
            ("job time", f"{elapsed:.1f} s, {summary.records_in:,} records in (first batch includes worker start-up)"),
        ]:
            table.add_row(name, value)
        console.print(table)
        verdicts = [lineage.verdict, exact.verdict]
        good = ln.output_records - ag.output_records
        ok = all(v == "PASS" for v in verdicts) and good == ag.output_records and good + ln.dead_lettered == records
        console.print("[bold green]PASS[/bold green]: every order is in the output or the dead-letter topic exactly "
                      "once, and every customer's totals are exact" if ok
                      else f"[bold red]FAIL[/bold red]: audit verdicts {verdicts}")
        return 0 if ok else 1


def _well_formed(raw: bytes | None) -> bool:
    """The orders `enrich` takes (the others are dead letters): JSON with a quantity and a price."""
    try:
        orders.total_of(json.loads(raw or b""))
    except (ValueError, KeyError, TypeError):
        return False
    return True
