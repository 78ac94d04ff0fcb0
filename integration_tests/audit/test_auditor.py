"""The auditor must say FAIL whenever a violation exists. Each violation is built on a real broker with the
bare client (as a faulty job would leave it) and must be counted exactly; a clean EOS run must PASS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from eos import Application
from eos.audit import AggregateSpec, SparkExecutor, audit
from eos.origin import ORIGIN_HEADER, encode_origin
from integration_tests.helpers import produce

ROOT = Path(__file__).resolve().parents[2]
N = 1000


def origin(topic, partition, offset, index=0):
    return [(ORIGIN_HEADER, encode_origin(topic, partition, offset, index))]


@pytest.fixture
def faithful(kafka, topic_factory):
    """Input with N records on 2 partitions and a correct output: one record per input, committed."""
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, ((b"k%d" % (i % 10), b"v%d" % i) for i in range(N)),
            partition_of=lambda n, key: n % 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"writer-{dst}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(2):
        for offset in range(N // 2):
            producer.produce(dst, key=b"k", value=b"x", partition=p, headers=origin(src, p, offset))
    producer.commit_transaction(30)
    return src, dst, producer


def run_audit(kafka, src, dst, **kw):
    return audit(kafka.bootstrap_servers, inputs=[src], outputs=[dst], **kw)


def test_a_faithful_output_passes(kafka, faithful):
    src, dst, _ = faithful
    report = run_audit(kafka, src, dst)
    assert report.verdict == "PASS", report
    assert report.lineage.expected == N and report.lineage.unique_origins == N


def test_duplicated_output_fails_with_the_count(kafka, faithful):
    src, dst, producer = faithful
    producer.begin_transaction()
    for offset in (3, 7):  # committed twice: once more, in another partition even
        producer.produce(dst, key=b"k", value=b"x", partition=1, headers=origin(src, 0, offset))
    producer.commit_transaction(30)
    report = run_audit(kafka, src, dst)
    assert report.verdict == "FAIL" and report.lineage.duplicates == 2 and report.violations == 2
    assert {s["origin"] for s in report.lineage.samples["duplicates"]} == {f"{src}:0:3:0", f"{src}:0:7:0"}


def test_missing_output_fails_with_the_count(kafka, topic_factory):
    src, dst = topic_factory("in"), topic_factory("out")
    produce(kafka.bootstrap_servers, src, ((b"k", b"v") for _ in range(10)))
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for offset in range(10):
        if offset not in (4, 5, 9):
            producer.produce(dst, value=b"x", headers=origin(src, 0, offset))
    producer.flush(30)
    report = run_audit(kafka, src, dst)
    assert report.verdict == "FAIL" and report.lineage.lost == 3
    assert [s["origin"] for s in report.lineage.samples["lost"]] == [f"{src}:0:{o}" for o in (4, 5, 9)]


def test_bogus_or_missing_origins_are_unexpected(kafka, faithful):
    src, dst, producer = faithful
    producer.begin_transaction()
    producer.produce(dst, value=b"x", partition=0, headers=origin(src, 0, 10**6))  # no such input record
    producer.produce(dst, value=b"x", partition=0, headers=origin("some-other-topic", 0, 1))
    producer.produce(dst, value=b"x", partition=0)  # no lineage header at all
    producer.commit_transaction(30)
    report = run_audit(kafka, src, dst)
    assert report.verdict == "FAIL" and report.lineage.unexpected == 3 and report.violations == 3


def test_aborted_records_cannot_fool_the_auditor(kafka, faithful):
    src, dst, producer = faithful
    producer.begin_transaction()
    for offset in range(5):  # would be duplicates, but the transaction aborts
        producer.produce(dst, value=b"x", partition=0, headers=origin(src, 0, offset))
    producer.flush(30)
    producer.abort_transaction(30)
    assert run_audit(kafka, src, dst).verdict == "PASS"  # read_committed: aborted records are invisible
    wrong = run_audit(kafka, src, dst, isolation="read_uncommitted")  # audited with the wrong isolation
    assert wrong.verdict == "FAIL" and wrong.lineage.aborted_visible == 5
    assert wrong.lineage.duplicates == 0  # identified as aborted, not miscounted as outputs


def test_a_transaction_left_open_fails(kafka, faithful):
    src, dst, producer = faithful
    producer.begin_transaction()
    producer.produce(dst, value=b"x", partition=1, headers=origin(src, 1, 0))
    producer.flush(30)  # produced, never committed nor aborted
    try:
        report = run_audit(kafka, src, dst)
        assert report.verdict == "FAIL" and report.transactions.open_transactions == 1
        assert report.transactions.samples[0]["partition"] == 1
        assert report.lineage.violations == 0  # the open transaction's record is not visible
    finally:
        producer.abort_transaction(30)
    assert run_audit(kafka, src, dst).verdict == "PASS"


def test_wrong_aggregate_value_fails(kafka, topic_factory):
    src, dst = topic_factory("in"), topic_factory("totals")
    produce(kafka.bootstrap_servers, src, [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"b", b"4")])
    sums = lambda raw: int(raw)
    spec = AggregateSpec("sum", sums, sums)
    good = [(b"a", b"1"), (b"b", b"2"), (b"a", b"4"), (b"b", b"6")]
    produce(kafka.bootstrap_servers, dst, good)
    assert run_audit(kafka, src, dst, aggregate=spec).verdict == "PASS"
    produce(kafka.bootstrap_servers, dst, [(b"b", b"7")])  # a wrong (and extra) step for b
    report = run_audit(kafka, src, dst, aggregate=spec)
    assert report.verdict == "FAIL"
    assert report.aggregate.wrong_final == 1 and report.aggregate.sequence_mismatches == 1
    assert report.aggregate.samples["wrong_final"][0] == {"key": "b", "expected": 6, "observed": 7}


def test_a_clean_eos_run_passes_and_spark_scans_agree(kafka, spark, topic_factory, unique_name):
    src, dst = topic_factory("in", partitions=3), topic_factory("out", partitions=3)
    produce(kafka.bootstrap_servers, src, ((b"k%d" % i, json.dumps({"n": i}).encode()) for i in range(3000)))
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_format="json", log_level="WARNING")
    app.process(input=src, output=dst, value_serde="json", name="inc")(lambda r: (r.key, {"n": r.value["n"] + 1}))
    app.run(spark, until_caught_up=True)
    local = audit(kafka.bootstrap_servers, inputs=[src], outputs=[dst], dead_letter_topic=app.config.dlq_topic,
                  group=app.config.group_id)
    assert local.verdict == "PASS" and local.lineage.expected == 3000 and local.offsets.lag == 0
    on_spark = audit(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                     executor=SparkExecutor(spark))
    assert on_spark.to_dict()["lineage"] == local.to_dict()["lineage"]


def test_cli_exit_code_and_json_match_the_verdict(kafka, faithful, tmp_path):
    src, dst, producer = faithful

    def cli(*extra):
        path = tmp_path / f"report-{len(list(tmp_path.iterdir()))}.json"
        result = subprocess.run([sys.executable, "-m", "eos.cli", "audit", "lineage", "-i", src, "-o", dst,
                                 "--json", str(path), *extra], cwd=ROOT, capture_output=True, text=True,
                                env={**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers}, timeout=300)
        return result, json.loads(path.read_text())

    ok, report = cli()
    assert ok.returncode == 0 and report["verdict"] == "PASS" and "PASS" in ok.stdout
    producer.begin_transaction()
    producer.produce(dst, value=b"x", partition=0, headers=origin(src, 0, 0))
    producer.commit_transaction(30)
    bad, report = cli()
    assert bad.returncode == 1 and report["verdict"] == "FAIL"
    # the copy of origin 0 comes after origin 499 in the same partition: a duplicate and out of order
    assert report["lineage"]["duplicates"] == 1 and report["lineage"]["order_violations"] == 1
    assert report["violations"] == 2 and "FAIL" in bad.stdout
