"""The auditor tells the truth about correct pipelines that filter, share a dead-letter topic, or lose input
to retention or a recreated topic (PASS), and still catches a violation injected into each (FAIL)."""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer

from eos import Application
from eos.audit import audit_application
from eos.origin import ORIGIN_HEADER, decode_origin, encode_origin
from integration_tests.helpers import produce
from transactions import KafkaAdmin, TopicSpec


def numbers(first: int, count: int, bad_every: int = 0):
    for i in range(first, first + count):
        value = b"{broken" if bad_every and i % bad_every == 0 else json.dumps({"n": i}).encode()
        yield f"k{i % 10}".encode(), value


def inject(bootstrap: str, topic: str, value: bytes, origin: tuple[str, int, int] | tuple[str, int, int, int],
           partition: int = 0) -> None:
    """Commit a record carrying `origin` (topic, partition, offset[, index: 0]), as a buggy writer would."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"injector-{time.time_ns()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=value, partition=partition, headers=[(ORIGIN_HEADER, encode_origin(*origin))])
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
    """Delete `topic` and create it again; returns once the cluster lists the new topic (told by its new topic
    id) and its partitions answer for their offsets, empty. The records produced next were once refused
    (UNKNOWN_TOPIC_OR_PART; a clean-clone run on 2026-11-30): a deletion completes on the broker after it
    returns, so a create right after it can find the old topic still listed and create nothing; and a broker
    can list a new topic a moment before it serves its partitions (librdkafka#4904)."""
    old = admin.topic_ids([topic])[topic]
    assert old is not None, f"{topic} does not exist"
    admin.delete_topics([topic])
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.create_topics([TopicSpec(topic, partitions)])
            if (admin.topic_ids([topic])[topic] not in (None, old)
                    and set(admin.end_offsets([(topic, p) for p in range(partitions)]).values()) == {0}):
                return
        except Exception:  # still being deleted
            pass
        assert time.monotonic() < deadline, f"{topic} could not be created again"
        time.sleep(0.2)


def produce_to_recreated(bootstrap: str, topic: str, records: list) -> None:
    """Produce `records` to a topic just created again: the first alone until the broker takes it, then the rest.
    A fresh producer was refused once more (UNKNOWN_TOPIC_OR_PART, a clean-clone run on 2026-11-30) after
    `recreate` had seen the new topic id and its partitions answer for their offsets. A record the broker
    refused with that error was not written, so it is sent again; any other refusal fails the test."""
    deadline = time.monotonic() + 60
    while True:
        try:
            produce(bootstrap, topic, records[:1])
            break
        except AssertionError as refused:
            if "UNKNOWN_TOPIC_OR_PART" not in str(refused) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    produce(bootstrap, topic, records[1:])


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
    produce_to_recreated(kafka.bootstrap_servers, src, list(numbers(100, 30)))  # past the old committed offset (20)
    summary = app.run(spark, until_caught_up=True)
    assert summary.records_in == 30  # all of it, from offset 0 (Kafka dropped the group's offsets of the old topic)
    lineage = lineages(app)["copy"]
    assert lineage.violations == 0 and lineage.earlier_topic == 20, lineage  # the old topic's 20 outputs
    assert "duplicates" not in lineage.samples, lineage.samples  # a PASS lists no duplicates
    inject(kafka.bootstrap_servers, out, b"{}", (src, 0, 25))  # a second copy of a record of the new topic
    assert verdicts(app) == {"copy": "FAIL"}
    lineage = lineages(app)["copy"]
    assert lineage.duplicates == 1  # the samples show it, not the 20 old/new collisions
    assert [s["origin"] for s in lineage.samples["duplicates"]] == [f"{src}:0:25:0"], lineage.samples


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


def copy_of(bootstrap: str, topic: str, index: int = 0) -> None:
    """Commit a second copy (headers included) of the `index`-th committed record of `topic`, as a batch
    committed twice would."""
    from integration_tests.streams.test_time_and_rekey import committed_records

    key, value, _, headers = committed_records(bootstrap, topic, headers=True)[index]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"copier-{time.time_ns()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=key, value=value, headers=list(headers.items()))
    producer.commit_transaction(30)


def test_audit_app_proves_window_results_and_punctuations_and_catches_a_copy_of_either(kafka, spark, topic_factory,
                                                                                       unique_name):
    """A final window result and a punctuation's output carry no origin; a copy of either used to pass
    `eos audit app`. Now every derived output has an id (task, position, time, punctuation, index) and the
    app audit runs the window audit too."""
    from eos import Processor, store
    from eos.windows import TumblingWindows

    src, windows_out, pings, silent = (topic_factory(n, partitions=1) for n in ("in", "win", "pings", "silent"))
    base = (int(time.time()) // 3600 - 3) * 3_600_000
    produce(kafka.bootstrap_servers, src, [(f"k{i % 3}".encode(), json.dumps({"at": base + i * 5_000}).encode())
                                           for i in range(200)])
    produce(kafka.bootstrap_servers, pings, [(f"d{i % 4}".encode(), json.dumps({"at": base + i * 30_000}).encode())
                                             for i in range(40)])
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR", timestamp="field:at")
    app.count(src, windows_out, name="per_minute", value_serde="json", windows=TumblingWindows(60_000), emit="final")

    class Every5Minutes(Processor):
        def init(self, context):
            super().init(context)
            self.seen = context.store("seen")
            context.schedule(300_000, self.report, type="stream")

        def process(self, record):
            self.seen.put(record.key, record.timestamp)

        def report(self, now):
            for device, _ in list(self.seen.all()):
                self.context.forward(device, {"at": now})

    app.stream(pings).process(Every5Minutes, name="report",
                              stores=[store("seen", key_serde="string", value_serde="long")]).to(silent)
    app.run(spark, until_caught_up=True)
    reports = audit_application(app)
    assert [r.mode for r in reports] == ["lineage", "lineage", "window"]
    assert all(r.verdict == "PASS" for r in reports), reports
    assert reports[0].lineage.derived > 10 and reports[1].lineage.derived > 10
    assert reports[2].window.windows_expected > 10
    copy_of(kafka.bootstrap_servers, windows_out, 3)
    copy_of(kafka.bootstrap_servers, silent, 5)
    reports = audit_application(app)
    assert [r.verdict for r in reports] == ["FAIL", "FAIL", "FAIL"]
    assert reports[0].lineage.derived_duplicates == 1 and reports[1].lineage.derived_duplicates == 1
    assert reports[2].window.duplicates == 1


def test_outputs_behind_a_repartition_topic_pass_in_whatever_order_its_tasks_wrote_them(kafka, spark, topic_factory,
                                                                                        unique_name):
    """An input partition's records spread over the repartition topic's partitions, and the tasks reading them
    write into one output partition in no set order: that is not a violation (order holds per partition of a
    repartition topic, as in Kafka Streams); a duplicate still is."""
    from integration_tests.streams.test_time_and_rekey import committed_records  # (it imports this module)

    src, out = topic_factory("in", partitions=2), topic_factory("out", partitions=1)
    produce(kafka.bootstrap_servers, src, ((f"k{i % 7}".encode(), json.dumps({"g": f"g{i % 13}"}).encode())
                                           for i in range(2_000)))
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR", max_records_per_batch=40,
                      first_batch_max_records=40, trigger_interval=0.0)
    (app.stream(src).group_by(lambda key, view: view["g"], name="by_group").count(name="per_group")
        .to_stream().map(lambda group, n: ("all", {"group": group, "n": n}), name="one_key")
        .to(out, value_serde="json"))  # one output partition, written by both tasks of the repartition topic
    app.run(spark, until_caught_up=True)
    (report,) = audit_application(app)
    assert report.verdict == "PASS" and report.lineage.output_records == 2_000, report.lineage
    _, value, _, headers = committed_records(kafka.bootstrap_servers, out, headers=True)[0]
    origin = decode_origin(headers[ORIGIN_HEADER])
    assert origin.index == 1 << 32  # the first output of the record of the repartition topic (eos.origin)
    inject(kafka.bootstrap_servers, out, value, origin)
    (report,) = audit_application(app)
    assert report.verdict == "FAIL" and report.lineage.duplicates == 1, report.lineage


def test_an_output_lost_on_one_path_behind_a_repartition_topic_fails(kafka, spark, topic_factory, unique_name):
    """Behind a repartition topic each of its records makes its outputs in one transaction, numbered 1, 2, ...
    on their path (eos.origin.output_indices), and the audit asks each such run to be whole: a copy of the job's
    committed output with one middle output left out fails, which the audit without that check (no ledger,
    and `numbered=False`, as for a step that writes both) passed."""
    from eos.audit import audit
    from integration_tests.streams.test_time_and_rekey import committed_records  # (it imports this module)

    src, out, forged = (topic_factory(n, partitions=2) for n in ("in", "out", "forged"))
    produce(kafka.bootstrap_servers, src, ((f"k{i % 7}".encode(), json.dumps({"n": i}).encode()) for i in range(600)))
    def job(application_id: str, output: str) -> Application:
        app = Application(application_id, kafka.bootstrap_servers, log_level="ERROR", max_records_per_batch=50,
                          first_batch_max_records=50, trigger_interval=0.0)
        (app.stream(src).select_key(lambda key, v: f"g{v['n'] % 5}", name="rekey").repartition(name="by_rest")
            .flat_map_values(lambda v: [{"n": v["n"], "part": p} for p in range(3)], name="thrice")
            .to(output, value_serde="json"))
        return app

    app = job(unique_name("app"), out)
    app.run(spark, until_caught_up=True)
    (report,) = audit_application(app)
    assert report.verdict == "PASS" and report.lineage.output_records == 1_800, report.lineage

    records = committed_records(kafka.bootstrap_servers, out, headers=True, partition=True)
    middle = [r for r in records if decode_origin(r[3][ORIGIN_HEADER]).index >> 32 == 2]
    assert len(middle) == 600  # every record of the repartition topic made its outputs 1, 2, 3
    left_out = middle[123]
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"copier-{time.time_ns()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for record in records:
        key, value, timestamp, headers, partition = record
        if record is not left_out:
            producer.produce(forged, key=key, value=value, partition=partition, timestamp=timestamp,
                             headers=list(headers.items()))
    producer.commit_transaction(30)

    def without_ledger(numbered: bool):  # (the ledger's topic deleted: a step writing both is then not checked)
        cfg = app.config
        hops = sorted(app.repartition_topics)
        return audit(kafka.bootstrap_servers, inputs=[src], outputs=[forged], dead_letter_topic=cfg.dlq_topic,
                     group=cfg.group_id, ledger_topic=f"{cfg.application_id}-no-ledger", through=hops,
                     extra_topics=hops, ordered=False, numbered=numbered)

    assert without_ledger(False).verdict == "PASS"  # blind to it: every input still has outputs
    assert without_ledger(True).lineage.index_gaps == 1
    # the job's own audit, of the same job had it written the forged copy (its ledger and offsets)
    (found,) = audit_application(job(app.config.application_id, forged))
    lost = decode_origin(left_out[3][ORIGIN_HEADER])
    assert found.verdict == "FAIL" and found.lineage.index_gaps == 1, found.lineage
    assert found.lineage.samples["index_gaps"] == [
        {"origin": f"{lost.topic}:{lost.partition}:{lost.offset}:{lost.index + (1 << 32)}"}]


def test_a_path_lost_whole_behind_a_step_that_writes_an_output_too_fails(kafka, spark, topic_factory, unique_name):
    """A step that gives each view's index 0 to a repartition topic and index 1 to a copy: behind the topic each
    view makes 0, 1 or 2 outputs. Index 0 is accounted for by outputs extending it or, for a view that made
    none there, by the ledger's paths; a copy of the job's output with both outputs of one view left out
    leaves index 1 without index 0: a path lost, which the audit names."""
    from integration_tests.streams.test_time_and_rekey import committed_records  # (it imports this module)

    src, copies, some, forged = (topic_factory(n, partitions=2) for n in ("in", "copies", "some", "forged"))
    produce(kafka.bootstrap_servers, src, ((f"u{i}".encode(), json.dumps({"n": i, "page": f"p{i % 7}"}).encode())
                                           for i in range(600)))

    def job(application_id: str, output: str) -> Application:
        app = Application(application_id, kafka.bootstrap_servers, log_level="ERROR", max_records_per_batch=50,
                          first_batch_max_records=50, trigger_interval=0.0)
        views = app.stream(src, value_serde="json")
        (views.select_key(lambda key, v: v["page"], name="by_page").repartition(name="pages")
            .flat_map_values(lambda v: [{"n": v["n"], "part": p} for p in range(v["n"] % 3)], name="some")
            .to(output, value_serde="json"))
        views.to(copies, value_serde="json")
        return app

    app = job(unique_name("app"), some)
    app.run(spark, until_caught_up=True)
    (report,) = audit_application(app)
    assert report.verdict == "PASS" and report.lineage.output_records == 600 + 600, report.lineage
    assert report.lineage.runs_checked and report.lineage.filtered == 0, report.lineage
    copied = committed_records(kafka.bootstrap_servers, copies, headers=True)
    assert {decode_origin(h[ORIGIN_HEADER]).index for *_, h in copied} == {1}  # (index 0: the repartition topic)

    records = committed_records(kafka.bootstrap_servers, some, headers=True, partition=True)
    origins = [decode_origin(r[3][ORIGIN_HEADER]) for r in records]
    both = next(o for o in origins if o.index >> 32 == 2)  # a view whose path made two outputs
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"copier-{time.time_ns()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for (key, value, timestamp, headers, partition), origin in zip(records, origins, strict=True):
        if origin.offset != both.offset or origin.partition != both.partition:
            producer.produce(forged, key=key, value=value, partition=partition, timestamp=timestamp,
                             headers=list(headers.items()))
    producer.commit_transaction(30)
    # the job's own audit, of the same job had it written the forged copy (its ledger and offsets)
    (found,) = audit_application(job(app.config.application_id, forged))
    assert found.verdict == "FAIL" and found.lineage.index_gaps == 1 and found.lineage.lost == 0, found.lineage
    assert found.lineage.samples["index_gaps"] == [{"origin": f"{both.topic}:{both.partition}:{both.offset}:1"}]
