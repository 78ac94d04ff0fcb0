"""The auditor tells the truth about correct pipelines that filter, share a dead-letter topic, or lose input
to retention or a recreated topic (PASS), and still catches a violation injected into each (FAIL)."""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer

from eos import Application
from eos.audit import audit_application
from eos.origin import ORIGIN_HEADER, encode_origin
from integration_tests.helpers import produce
from transactions import KafkaAdmin, TopicSpec


def numbers(first: int, count: int, bad_every: int = 0):
    for i in range(first, first + count):
        value = b"{broken" if bad_every and i % bad_every == 0 else json.dumps({"n": i}).encode()
        yield f"k{i % 10}".encode(), value


def inject(bootstrap: str, topic: str, value: bytes, origin: tuple[str, int, int], partition: int = 0) -> None:
    """Commit a record carrying `origin`, as a buggy writer would."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"injector-{time.time_ns()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=value, partition=partition, headers=[(ORIGIN_HEADER, encode_origin(*origin, 0))])
    producer.commit_transaction(30)


def verdicts(app: Application) -> dict[str, str]:
    return {sub: report.verdict for sub, report in zip(app.subtopologies, audit_application(app), strict=True)}


def lineages(app: Application):
    return {sub: report.lineage for sub, report in zip(app.subtopologies, audit_application(app), strict=True)}


def test_two_stages_that_both_dead_letter_to_one_topic_pass_and_a_duplicate_fails(kafka, spark, topic_factory,
                                                                                  unique_name):
    src, mid, out = (topic_factory(n, partitions=2) for n in ("in", "mid", "out"))
    produce(kafka.bootstrap_servers, src, numbers(0, 300, bad_every=11))
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR")

    @app.process(input=src, output=mid, key_serde="string", value_serde="json", name="parse")
    def parse(record):  # stage 1 dead-letters what is not JSON
        return record.key, {"n": record.value["n"]}

    @app.process(input=mid, output=out, key_serde="string", value_serde="json", name="divide")
    def divide(record):  # stage 2 dead-letters multiples of 7
        return record.key, {"q": 1 / (record.value["n"] % 7)}

    summary = app.run(spark, until_caught_up=True)
    assert summary.dead_letters == 28 + 39  # 28 not JSON; of the other 272, 39 are multiples of 7
    found = lineages(app)
    assert all(r.violations == 0 for r in found.values()), found
    assert (found["parse"].dead_lettered, found["parse"].other_dead_letters) == (28, 39)
    assert (found["divide"].dead_lettered, found["divide"].other_dead_letters) == (39, 28)
    assert verdicts(app) == {"parse": "PASS", "divide": "PASS"}

    inject(kafka.bootstrap_servers, out, b'{"q": 1}', (mid, 0, 1))  # a second output for an input of stage 2
    assert verdicts(app) == {"parse": "PASS", "divide": "FAIL"}
    assert lineages(app)["divide"].duplicates == 1


def test_a_filter_passes_with_its_ledger_and_an_output_for_a_filtered_record_fails(kafka, spark, topic_factory,
                                                                                  unique_name):
    src, out = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, numbers(0, 600))
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR", max_records_per_batch=100)

    @app.process(input=src, output=out, key_serde="string", value_serde="json", name="keep")
    def keep(record):
        return (record.key, record.value) if record.value["n"] % 3 == 0 else None

    app.run(spark, until_caught_up=True)
    lineage = lineages(app)["keep"]
    assert lineage.ledger and lineage.violations == 0 and lineage.filtered == 400 and lineage.unique_origins == 200
    offset = next(o for o, v in partition_records(kafka.bootstrap_servers, src, 0) if json.loads(v)["n"] % 3)
    inject(kafka.bootstrap_servers, out, b"{}", (src, 0, offset))  # the ledger says it produced nothing
    lineage = lineages(app)["keep"]
    assert verdicts(app) == {"keep": "FAIL"} and lineage.filtered_but_output == 1 and lineage.filtered == 399


def partition_records(bootstrap: str, topic: str, partition: int) -> list[tuple[int, bytes]]:
    from transactions import OffsetRange, read_ranges, scan_consumer

    end = KafkaAdmin(bootstrap).end_offsets([(topic, partition)])[(topic, partition)]
    consumer = scan_consumer(bootstrap)
    try:
        chunks = read_ranges(consumer, [OffsetRange(topic, partition, 0, end)])
        return [(m.offset(), m.value() or b"") for chunk in chunks for m in chunk]
    finally:
        consumer.close()


def recreate(admin: KafkaAdmin, topic: str, partitions: int) -> None:
    admin.delete_topics([topic])
    deadline = time.monotonic() + 60
    while True:
        try:
            if admin.create_topics([TopicSpec(topic, partitions)]) or admin.partition_counts([topic])[topic]:
                return
        except Exception:  # still being deleted
            pass
        assert time.monotonic() < deadline, f"{topic} could not be created again"
        time.sleep(0.5)


def test_a_recreated_input_topic_is_read_again_from_its_start_and_audited_as_such(kafka, spark, topic_factory,
                                                                                   unique_name):
    src, out = topic_factory("in", partitions=1), topic_factory("out", partitions=1)
    produce(kafka.bootstrap_servers, src, numbers(0, 20))
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR")
    app.process(input=src, output=out, key_serde="string", value_serde="json", name="copy")(
        lambda record: (record.key, record.value))
    app.run(spark, until_caught_up=True)
    admin = KafkaAdmin(kafka.bootstrap_servers)
    recreate(admin, src, 1)
    produce(kafka.bootstrap_servers, src, numbers(100, 30))  # grows past the old committed offset (20)
    summary = app.run(spark, until_caught_up=True)
    assert summary.records_in == 30  # all of it, from offset 0 (Kafka dropped the group's offsets of the old topic)
    lineage = lineages(app)["copy"]
    assert lineage.violations == 0 and lineage.earlier_topic == 20, lineage  # the old topic's 20 outputs
    inject(kafka.bootstrap_servers, out, b"{}", (src, 0, 25))  # a second copy of a record of the new topic
    assert verdicts(app) == {"copy": "FAIL"} and lineages(app)["copy"].duplicates == 1


def test_input_deleted_by_retention_before_and_after_processing_is_reported_not_failed(kafka, spark, topic_factory,
                                                                                        unique_name):
    src, out = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, numbers(0, 60), partition_of=lambda n, key: n % 2)  # 0..29 on each
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR")
    app.process(input=src, output=out, key_serde="string", value_serde="json", name="copy")(
        lambda record: (record.key, record.value))
    app.run(spark, until_caught_up=True)
    produce(kafka.bootstrap_servers, src, numbers(60, 40), partition_of=lambda n, key: n % 2)  # 30..49 on each
    admin = KafkaAdmin(kafka.bootstrap_servers)
    admin.delete_records({(src, 0): 40, (src, 1): 40})  # retention, while the job was down: 30..39 unprocessed
    summary = app.run(spark, until_caught_up=True)
    assert summary.records_in == 20 and summary.skipped_by_retention == 20
    lineage = lineages(app)["copy"]
    assert lineage.violations == 0 and lineage.skipped_by_retention == 20, lineage
    assert lineage.input_deleted == 60 and lineage.expected == 20  # 0..29 were processed before they went
    admin.delete_records({(src, 0): 45})
    lineage = lineages(app)["copy"]
    assert lineage.violations == 0 and lineage.input_deleted == 65 and lineage.expected == 15
    inject(kafka.bootstrap_servers, out, b"{}", (src, 1, 35))  # an origin no committed batch covered
    assert verdicts(app) == {"copy": "FAIL"} and lineages(app)["copy"].unexpected == 1
