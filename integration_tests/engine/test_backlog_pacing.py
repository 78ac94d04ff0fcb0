"""The trigger under a backlog, on a real broker and real Spark: a batch that `max_records_per_batch` capped
(its input is behind) is followed at once, as Kafka Streams processes a backlog without pausing between
commits; a batch that caught up is followed by the rest of the trigger interval. Every record is output once."""

from __future__ import annotations

import itertools
import time

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
