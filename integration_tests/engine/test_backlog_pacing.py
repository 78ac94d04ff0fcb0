"""The trigger under a backlog, on a real broker and real Spark: a batch that `max_records_per_batch` capped
(its input is behind) is followed at once, as Kafka Streams processes a backlog without pausing between
commits; a batch that caught up is followed by the rest of the trigger interval. Every record is output once."""

from __future__ import annotations

import itertools
import time

from eos.audit import audit_application
from eos.testing import CrashWorker, Match
from eos.worker.plans import TaskStatus
from integration_tests.engine.test_exactly_once import numbers, transform_app
from integration_tests.helpers import assert_exactly_once, produce

INTERVAL = 4.0


def test_capped_batches_follow_at_once_and_a_caught_up_batch_waits_out_the_interval(kafka, spark, topic_factory,
                                                                                  unique_name):
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, numbers(6_000))  # 3,000 per partition: batches of 1,000, 1,000, 1,000
    app = transform_app(unique_name("app"), kafka.bootstrap_servers, src, dst, max_records_per_batch=1_000,
                        trigger_interval=INTERVAL)
    batches: list[tuple[float, float, int]] = []  # (start, end, records) in wall-clock seconds
    summary = app.run(spark, until_caught_up=True,
                      on_batch=lambda report, _results: batches.append(
                          (report.started, report.started + report.duration_s, report.records_in)))
    returned = time.time()

    # batches 0 and 1 were capped at 1,000 records of each partition, with more behind them: no pause after them
    assert [n for _, _, n in batches[:2]] == [2_000, 2_000]
    for (_, end, _), (start, _, _) in itertools.pairwise(batches[:3]):
        assert start - end < 1.0, f"a capped batch was followed {start - end:.1f} s later"
    # the last batch read everything: the next plan (which found nothing and ended the run) came after the rest
    # of the interval
    start, end, _ = batches[-1]
    assert returned - end >= INTERVAL - (end - start) - 0.1
    assert returned - batches[0][0] < len(batches) * INTERVAL - 1.0
    assert summary.records_in == summary.records_out == 6_000
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                        expected_inputs=6_000)


def test_back_to_back_batches_lose_and_duplicate_nothing_when_a_worker_dies_between_produce_and_commit(
        kafka, spark, topic_factory, unique_name):
    # Batch 1's task 0 dies with its outputs produced and its transaction open; Spark runs it again, and the
    # batches after it, planned at once from the offsets the batches before committed, read on from there.
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, numbers(12_000))
    app = transform_app(unique_name("app"), kafka.bootstrap_servers, src, dst, max_records_per_batch=1_000,
                        trigger_interval=INTERVAL)
    app.fault_hooks.on("after_produce", CrashWorker(Match(partition=0, spark_attempt=0, batch=1)))
    summary = app.run(spark, until_caught_up=True, keep_task_results=True)

    assert summary.records_out == 12_000
    assert {r.status for r in summary.task_results} == {TaskStatus.COMMITTED}, "a task was planned what it had done"
    retried = [r for r in summary.task_results if r.batch == 1 and r.task.partition == 0]
    assert retried[0].spark_attempt > 0
    assert summary.elapsed_s < 6 * INTERVAL  # six capped batches of each partition, none waiting out the interval
    result = assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                                 expected_inputs=12_000)
    assert result.output_records == 12_000
    reports = audit_application(app)  # the auditor's lineage check of every output against its input agrees
    assert reports and all(r.verdict == "PASS" for r in reports), [(r.mode, r.verdict) for r in reports]


def test_batches_sized_to_the_interval_stay_exactly_once_when_workers_die_mid_batch(kafka, spark, topic_factory,
                                                                                  unique_name):
    # A 10 ms interval that no batch keeps to (a Spark job alone takes longer than twice that): each backlog
    # batch is half the one before (down to first_batch_max_records), so the batches' ranges move while
    # workers die between produce and commit and before the commit, and Spark runs those tasks again.
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, numbers(20_000), partition_of=lambda n, _key: n % 2)
    app = transform_app(unique_name("app"), kafka.bootstrap_servers, src, dst, max_records_per_batch=4_000,
                        first_batch_max_records=200, trigger_interval=0.01)
    app.fault_hooks.on("after_produce", CrashWorker(Match(partition=0, spark_attempt=0, batch=2)))
    app.fault_hooks.on("before_commit", CrashWorker(Match(partition=1, spark_attempt=0, batch=3)))
    sizes: list[int] = []
    summary = app.run(spark, until_caught_up=True, keep_task_results=True,
                      on_batch=lambda report, _results: sizes.append(report.records_in))

    # 200 per partition first, then 4,000 halved after each batch, never below first_batch_max_records; the
    # rest (50 per partition) in the last
    assert sizes == [400, 8_000, 4_000, 2_000, 1_000, 500] + [400] * 10 + [100], sizes
    assert {r.status for r in summary.task_results} == {TaskStatus.COMMITTED}
    assert [r.spark_attempt > 0 for r in summary.task_results if (r.batch, r.task.partition) in {(2, 0), (3, 1)}] \
        == [True, True]
    result = assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[dst], group=app.config.group_id,
                                 expected_inputs=20_000)
    assert result.output_records == 20_000
    reports = audit_application(app)
    assert reports and all(r.verdict == "PASS" for r in reports), [(r.mode, r.verdict) for r in reports]
