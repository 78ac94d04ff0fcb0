"""Restore by replay against real changelog partitions whose last offsets are transaction markers."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer

from eos.worker.clients import KafkaChangelogs
from recovery import MemoryBackend, restore_store, settled_bounds
from transactions import KafkaAdmin, consumer_settings, range_reader


def write(bootstrap, topic, txn_id, batches):
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    for outcome, records in batches:
        producer.begin_transaction()
        for key, value in records:
            producer.produce(topic, key=key, value=value, partition=0)
        producer.flush(30)
        producer.commit_transaction(30) if outcome == "commit" else producer.abort_transaction(30)
    # A broker answers a commit before it writes the transaction's markers: wait for them, so that the bounds a
    # test reads next are the whole changelog's (a loaded machine once read the last stable offset of the last
    # transaction's start, and compared a complete restore with it)
    admin, tp = KafkaAdmin(bootstrap), (topic, 0)
    deadline = time.monotonic() + 30
    while admin.end_offsets([tp], committed=True)[tp] < admin.end_offsets([tp], committed=False)[tp]:
        assert time.monotonic() < deadline, "the last transaction's markers were not written within 30 s"
        time.sleep(0.02)


def restore(bootstrap, topic, backend, budget=None):
    admin = KafkaAdmin(bootstrap)
    tp = (topic, 0)
    end, start = admin.end_offsets([tp])[tp], admin.earliest_offsets([tp])[tp]
    consumer = Consumer(consumer_settings(bootstrap, "restore-test"))
    t0 = time.monotonic()
    result = restore_store(backend, range_reader(consumer), topic, 0, start_offset=start, end_offset=end, timeout=30,
                           budget=budget)
    consumer.close()
    return result, time.monotonic() - t0, end


def test_changelog_ending_in_a_commit_marker_restores_without_hanging(kafka, topic_factory, unique_name):
    topic = topic_factory("changelog", config={"cleanup.policy": "compact"})
    write(kafka.bootstrap_servers, topic, unique_name("t"),
          [("commit", [(b"a", b"1"), (b"b", b"1")]), ("commit", [(b"a", b"2"), (b"b", None)])])
    backend = MemoryBackend()
    result, seconds, end = restore(kafka.bootstrap_servers, topic, backend)
    assert end == 6  # 4 records + 2 commit markers: the last offset (5) is a marker, not a record
    assert result.records == 4 and seconds < 10
    assert backend.get(b"a") == b"2" and backend.get(b"b") is None
    assert backend.changelog_offset() == 6


def test_changelog_ending_in_aborted_records_restores_only_committed_writes(kafka, topic_factory, unique_name):
    topic = topic_factory("changelog", config={"cleanup.policy": "compact"})
    write(kafka.bootstrap_servers, topic, unique_name("t"),
          [("commit", [(b"a", b"1")]), ("abort", [(b"a", b"zombie"), (b"c", b"zombie")])])
    backend = MemoryBackend()
    result, seconds, _ = restore(kafka.bootstrap_servers, topic, backend)
    assert result.records == 1 and seconds < 10
    assert backend.get(b"a") == b"1" and backend.get(b"c") is None
    again, _, _ = restore(kafka.bootstrap_servers, topic, backend)  # already at the end: nothing to do
    assert again.records == 0


def test_store_ahead_of_its_changelog_is_wiped_and_restored(kafka, topic_factory, unique_name):
    topic = topic_factory("changelog", config={"cleanup.policy": "compact"})
    write(kafka.bootstrap_servers, topic, unique_name("t"), [("commit", [(b"a", b"1")])])
    backend = MemoryBackend()
    backend.write({b"stale": b"x"}, changelog_offset=1000)  # e.g. the changelog was deleted and recreated
    result, _, _ = restore(kafka.bootstrap_servers, topic, backend)
    assert result.wiped and result.records == 1
    assert backend.get(b"stale") is None and backend.get(b"a") == b"1"


def test_a_restore_cut_short_by_its_budget_resumes_where_it_stopped(kafka, topic_factory, unique_name):
    topic = topic_factory("changelog", config={"cleanup.policy": "compact"})
    batches = [("commit", [(b"k%d" % (i % 5000), b"%d" % i) for i in range(t * 2000, (t + 1) * 2000)])
               for t in range(25)]  # 50k writes of 5k keys in 25 transactions
    write(kafka.bootstrap_servers, topic, unique_name("t"), batches)
    backend = MemoryBackend()
    first, _, end = restore(kafka.bootstrap_servers, topic, backend, budget=1e-6)  # stops after one chunk
    assert not first.complete and 0 < first.records < 50_000
    assert backend.changelog_offset() == first.position < end
    rest, _, _ = restore(kafka.bootstrap_servers, topic, backend)
    assert rest.complete and first.records + rest.records == 50_000
    assert backend.changelog_offset() == end
    assert all(backend.get(b"k%d" % k) == b"%d" % (45_000 + k) for k in range(5000))  # the last write of each key


def test_a_store_that_applied_a_commit_whose_markers_are_not_written_yet_is_not_wiped(kafka, topic_factory,
                                                                                    unique_name):
    """A broker answers a commit before it writes the transaction's markers: read just after a commit, a
    changelog's last stable offset is often still the committed transaction's first offset, behind a store
    that applied it. Through the worker's changelog source, commits are made and applied as a worker makes
    them and the bounds read at once, until that has happened five times: the store waits for the markers
    (`settled_bounds`) and is never wiped, which restored it to before its last commit."""
    topic = topic_factory("changelog", config={"cleanup.policy": "compact"})
    bootstrap = kafka.bootstrap_servers
    source = KafkaChangelogs(KafkaAdmin(bootstrap), Consumer(consumer_settings(bootstrap, "restore-test")))
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("t"), "linger.ms": 0})
    producer.init_transactions(60)
    delivered: list[int] = []
    backend, tp, lagging = MemoryBackend(), (topic, 0), 0
    for i in range(1000):
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"%d" % i, partition=0,
                         on_delivery=lambda err, msg: delivered.append(msg.offset()))
        producer.flush(30)
        producer.commit_transaction(30)
        backend.write({b"k": b"%d" % i}, changelog_offset=delivered[-1] + 1)  # applied once committed (I3)
        bounds = source.bounds([tp])[tp]
        lagging += bounds[1] <= delivered[-1]
        bounds = settled_bounds(source, tp, delivered[-1] + 1, bounds, timeout=30)
        result = restore_store(backend, source.read, topic, 0, start_offset=bounds[0], end_offset=bounds[1],
                               timeout=30)
        assert not result.wiped and backend.get(b"k") == b"%d" % i
        assert backend.changelog_offset() == bounds[1] == delivered[-1] + 2  # (past the commit's marker)
        if lagging == 5:
            break
    assert lagging == 5, f"the last stable offset lagged behind a commit only {lagging} times in {i + 1} commits"
