"""State stores with compacted changelogs and restore by replay, on a real broker and real Spark."""

from __future__ import annotations

import json
import shutil

import pytest

from eos import Application, ConfigError
from eos.testing import CrashWorker, Match
from integration_tests.helpers import assert_exactly_once, assert_totals_exact, produce
from recovery import RocksDBBackend, locked_task_directories
from transactions import KafkaAdmin, TopicSpec

KEYS = 100


def add(key, value, totals):
    return {"count": totals["count"] + 1, "sum": totals["sum"] + value["n"]}


def totals_app(app_id, bootstrap, src, out, state_dir, *, persistent=True, **settings) -> Application:
    app = Application(app_id, bootstrap, state_dir=str(state_dir), log_format="json", log_level="WARNING",
                      trigger_interval=0.0, **settings)
    app.aggregate(src, out, name="totals", initializer=lambda: {"count": 0, "sum": 0}, aggregator=add,
                  persistent=persistent)
    return app


def load(kafka, topic_factory, n=20_000, partitions=2):
    src, out = topic_factory("in", partitions=partitions), topic_factory("totals", partitions=partitions)
    produce(kafka.bootstrap_servers, src,
            ((f"k{i % KEYS}".encode(), json.dumps({"id": i, "n": i % 13}).encode()) for i in range(n)))
    return src, out


def expected_totals(n=20_000):
    totals = {}
    for i in range(n):
        t = totals.setdefault(f"k{i % KEYS}", {"count": 0, "sum": 0})
        t["count"] += 1
        t["sum"] += i % 13
    return totals


def local_store(state_dir, app_id, partitions):
    """What the tasks' RocksDB stores hold after the job stopped. An aggregate's store is timestamped: each
    value is 8 bytes of timestamp, then the serialized value."""
    content = {}
    with locked_task_directories(state_dir / app_id):
        for p in range(partitions):
            backend = RocksDBBackend(state_dir / app_id / f"totals-{p}" / "totals-store")
            content.update({k.decode(): json.loads(v[8:]) for k, v in backend.iterate()})
            backend.close()
    return content


def test_deleted_state_directory_is_restored_from_the_changelog(kafka, spark, topic_factory, unique_name, tmp_path):
    src, out = load(kafka, topic_factory)
    app_id, state = unique_name("app"), tmp_path / "state"
    first = totals_app(app_id, kafka.bootstrap_servers, src, out, state, max_records_per_batch=3000).run(
        spark, max_batches=2)
    assert first.records_in == 12_000 and first.changelog_records > 0
    admin = KafkaAdmin(kafka.bootstrap_servers)
    changelog = f"{app_id}-totals-store-changelog"
    ends = admin.partition_offsets(admin.topic_partitions(changelog))
    assert all(not o.open_transaction for o in ends.values())

    with locked_task_directories(state / app_id):
        shutil.rmtree(state / app_id / "totals-0" / "totals-store")
        shutil.rmtree(state / app_id / "totals-1" / "totals-store")
    second = totals_app(app_id, kafka.bootstrap_servers, src, out, state, max_records_per_batch=3000).run(
        spark, until_caught_up=True)
    assert second.restored_records == first.changelog_records  # replayed the whole changelog
    assert_totals_exact(kafka.bootstrap_servers, inputs=[src], totals=[out], group=app_id)
    assert local_store(state, app_id, 2) == expected_totals()


def test_state_directory_that_is_behind_catches_up(kafka, spark, topic_factory, unique_name, tmp_path):
    src, out = load(kafka, topic_factory)
    app_id, state, snapshot = unique_name("app"), tmp_path / "state", tmp_path / "snapshot"
    build = lambda: totals_app(app_id, kafka.bootstrap_servers, src, out, state,
                               max_records_per_batch=2000)
    build().run(spark, max_batches=1)
    with locked_task_directories(state / app_id):
        shutil.copytree(state, snapshot)  # the state as it was after batch 0
    middle = build().run(spark, max_batches=3)
    with locked_task_directories(state / app_id):
        shutil.rmtree(state)
    shutil.copytree(snapshot, state)  # now behind by three batches
    last = build().run(spark, until_caught_up=True)
    assert last.restored_records == middle.changelog_records  # exactly the tail it missed
    assert_totals_exact(kafka.bootstrap_servers, inputs=[src], totals=[out], group=app_id)
    assert local_store(state, app_id, 2) == expected_totals()


def test_crash_after_commit_before_local_apply_is_not_applied_twice(kafka, spark, topic_factory, unique_name,
                                                                    tmp_path):
    src, out = load(kafka, topic_factory)
    app_id, state = unique_name("app"), tmp_path / "state"
    app = totals_app(app_id, kafka.bootstrap_servers, src, out, state, max_records_per_batch=2500)
    # Task 0, batch 1, first attempt: the Python worker dies right after commit_transaction() returned,
    # before the write buffer reaches the local store.
    app.fault_hooks.on("after_commit", CrashWorker(Match(partition=0, batch=1, spark_attempt=0)))
    summary = app.run(spark, until_caught_up=True, keep_task_results=True)
    # The crashed attempt reported nothing. The task ran again, in the batch's other Spark task (which claims
    # it once the dead worker's claim is free) or in Spark's retry of the crashed one, and found it committed.
    again = [r for r in summary.task_results if str(r.task) == "totals-0" and r.batch == 1]
    assert [r.status for r in again] == ["noop"]
    assert sum(r.restored_records for r in summary.task_results if str(r.task) == "totals-0") > 0  # caught up
    assert_totals_exact(kafka.bootstrap_servers, inputs=[src], totals=[out], group=app_id)
    assert local_store(state, app_id, 2) == expected_totals()


def test_in_memory_stores_are_exact_too(kafka, spark, topic_factory, unique_name, tmp_path):
    src, out = load(kafka, topic_factory)
    app_id = unique_name("app")
    totals_app(app_id, kafka.bootstrap_servers, src, out, tmp_path, persistent=False,
               max_records_per_batch=4000).run(spark, until_caught_up=True)
    assert_totals_exact(kafka.bootstrap_servers, inputs=[src], totals=[out], group=app_id)
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[out], group=app_id, expected_inputs=20_000)


def test_in_memory_stores_are_exact_when_workers_die_mid_batch(kafka, spark, topic_factory, unique_name, tmp_path):
    """Python workers killed after producing, before committing and after committing (before the stores apply
    the batch): a killed worker's in-memory stores are gone and its tasks restore from their changelogs, while
    the other worker's stores, kept, read their changelogs' bounds at every batch, just after their own
    commits (`recovery.settled_bounds`). Every total exact against the input, every result once."""
    src, out = load(kafka, topic_factory)
    app_id = unique_name("app")
    app = totals_app(app_id, kafka.bootstrap_servers, src, out, tmp_path, persistent=False,
                     max_records_per_batch=2500)
    app.fault_hooks.on("after_produce", CrashWorker(Match(partition=0, batch=1, spark_attempt=0)))
    app.fault_hooks.on("before_commit", CrashWorker(Match(partition=1, batch=3, spark_attempt=0)))
    app.fault_hooks.on("after_commit", CrashWorker(Match(partition=0, batch=5, spark_attempt=0)))
    summary = app.run(spark, until_caught_up=True, keep_task_results=True)
    assert sum(r.restored_records for r in summary.task_results) > 0  # killed workers' tasks restored
    assert_totals_exact(kafka.bootstrap_servers, inputs=[src], totals=[out], group=app_id)
    assert_exactly_once(kafka.bootstrap_servers, inputs=[src], outputs=[out], group=app_id, expected_inputs=20_000)


def test_changelog_is_compacted_and_partitioned_like_the_input(kafka, spark, topic_factory, unique_name, tmp_path):
    src, out = load(kafka, topic_factory, n=1000, partitions=3)
    app_id = unique_name("app")
    totals_app(app_id, kafka.bootstrap_servers, src, out, tmp_path).run(spark, until_caught_up=True)
    admin = KafkaAdmin(kafka.bootstrap_servers)
    changelog = f"{app_id}-totals-store-changelog"
    assert admin.partition_counts([changelog, src]) == {changelog: 3, src: 3}
    assert admin.topic_config(changelog)["cleanup.policy"] == "compact"


def test_changelog_with_the_wrong_partition_count_is_refused(kafka, spark, topic_factory, unique_name, tmp_path):
    src, out = load(kafka, topic_factory, n=10, partitions=2)
    app_id = unique_name("app")
    KafkaAdmin(kafka.bootstrap_servers).create_topics(
        [TopicSpec(f"{app_id}-totals-store-changelog", 3, None, {"cleanup.policy": "compact"})])
    with pytest.raises(ConfigError, match="has 3 partitions but its sub-topology has 2 tasks"):
        totals_app(app_id, kafka.bootstrap_servers, src, out, tmp_path).run(spark, until_caught_up=True)
