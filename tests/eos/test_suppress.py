"""`table.suppress(time_limit)` (Kafka Streams' `KTable.suppress(Suppressed.untilTimeLimit(...))`), through the
test driver: each key's latest update held until the stream time its step has seen is the time limit past the
key's first update, against a plain-Python reference; deletions; the buffer's bounds (keys let go early, or the
job stopped); updates a record cache flushed; the buffer restored after killed batches; the lineage of what was
let go; and the mistakes a user makes, refused where they are made."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from eos import Application
from eos.errors import BufferFullError, TaskFailedError
from eos.origin import decode_origin
from eos.queries import store_rows
from eos.testing import TopologyTestDriver
from transactions.memory import partition_for


def app_(**options) -> Application:
    return Application("sup", bootstrap_servers="unused:9092", **options)


def counted(app: Application, limit=10_000, **options) -> Application:
    """Clicks counted per user, each user's count let go at most once per `limit`."""
    (app.stream("clicks", key_serde="string").group_by_key().count(name="per-user")
        .suppress(limit, name="limited", **options).to_stream().to("alerts"))
    return app


def reference(updates, limit, max_records=None):
    """What suppression lets go of `updates` ((key, value, timestamp) in the order the step gets them), in
    order: a key waits from its first update until the largest timestamp seen is `limit` past it, keys due
    together in (first update, key) order; over `max_records` keys the first buffered go early."""
    buffer, observed, out = {}, -1, []
    for key, value, ts in updates:
        observed = max(observed, ts)
        first = buffer[key][0] if key in buffer else ts
        buffer[key] = (first, value, ts)
        for k in sorted((k for k, e in buffer.items() if e[0] <= observed - limit), key=lambda k: (buffer[k][0], k)):
            out.append((k, buffer[k][1], buffer[k][2]))
            del buffer[k]
        while max_records is not None and len(buffer) > max_records:
            k = min(buffer, key=lambda k: (buffer[k][0], k))
            out.append((k, buffer[k][1], buffer[k][2]))
            del buffer[k]
    return out, buffer


def running_counts(clicks):
    """The count's updates: each key's count, at the largest timestamp of its clicks so far."""
    seen: dict[str, tuple[int, int]] = {}
    updates = []
    for key, ts in clicks:
        n, latest = seen.get(key, (0, ts))
        seen[key] = (n + 1, max(latest, ts))
        updates.append((key, *seen[key]))
    return updates


def _out(driver, topic="alerts"):
    return [(r.key, r.value, r.timestamp) for r in driver.read(topic)]


def test_each_users_count_goes_on_once_per_time_limit_from_its_first_update():
    driver = TopologyTestDriver(counted(app_()))
    clicks = [("a", 0), ("a", 1_000), ("b", 2_000), ("a", 9_000), ("c", 10_000), ("a", 12_000), ("b", 13_000),
              ("c", 30_000)]
    for key, ts in clicks:
        driver.pipe("clicks", key, {}, timestamp=ts)
    # a's first count (0) waits until stream time reaches 10,000, and then its latest (3, made at 9,000) goes on;
    # at 30,000 every key waiting is due, in the order they were first buffered
    out = _out(driver)
    assert out == [("a", 3, 9_000), ("b", 1, 2_000), ("c", 2, 30_000), ("a", 4, 12_000), ("b", 2, 13_000)]
    assert out == reference(running_counts(clicks), 10_000)[0]
    assert driver.store("limited-buffer").view.all() == []


def test_what_goes_on_is_named_after_the_record_that_made_the_value_with_its_headers():
    driver = TopologyTestDriver(counted(app_()))
    driver.pipe("clicks", "a", {}, timestamp=0, headers=[("trace", b"first")])
    driver.pipe("clicks", "a", {}, timestamp=500, headers=[("trace", b"second")])
    driver.pipe("clicks", "b", {}, timestamp=20_000)
    (out,) = driver.read("alerts")
    assert (out.key, out.value, out.timestamp) == ("a", 2, 500)
    assert out.headers["trace"] == b"second"
    assert decode_origin(out.headers["eos.origin"])[:3] == ("clicks", 0, 1)  # the second click's count


def test_a_random_stream_of_clicks_matches_the_reference_on_several_partitions():
    rnd = random.Random(7)
    clicks = [(rnd.choice("abcdefgh"), 10_000 + i * 700 + rnd.randint(-3_000, 3_000)) for i in range(400)]
    driver = TopologyTestDriver(counted(app_(), limit=timedelta(seconds=5)), partitions=3)
    for key, ts in clicks:
        driver.pipe("clicks", key, {}, timestamp=ts)
    got, held = driver.read("alerts"), driver.store("limited-buffer").view.all()
    waiting_all = {}
    for partition in range(3):  # each task suppresses its own keys, on its own stream time
        mine = [(k, ts) for k, ts in clicks if partition_for(k.encode(), 3) == partition]
        expected, waiting = reference(running_counts(mine), 5_000)
        assert expected and [(r.key, r.value, r.timestamp) for r in got if r.partition == partition] == expected
        waiting_all.update(waiting)
    assert {s.key: (s.buffer_time, s.value, s.timestamp) for s in held} == waiting_all


def test_a_deletion_waits_and_goes_on_like_any_update():
    app = app_()
    prices = app.table("prices", key_serde="string", value_serde="json")
    prices.filter(lambda k, v: v["price"] > 10).suppress(1_000, name="dear").to_stream().to("dear")
    driver = TopologyTestDriver(app)
    driver.pipe("prices", "x", {"price": 20}, timestamp=0)
    driver.pipe("prices", "x", {"price": 5}, timestamp=100)  # no longer dear: the filter deletes the row
    driver.pipe("prices", "y", {"price": 30}, timestamp=2_000)
    assert _out(driver, "dear") == [("x", None, 100)]
    driver.pipe("prices", "z", {"price": 30}, timestamp=5_000)
    assert _out(driver, "dear") == [("y", {"price": 30}, 2_000)]


def test_a_time_limit_of_zero_lets_every_update_go_at_once():
    driver = TopologyTestDriver(counted(app_(), limit=0))
    for key, ts in [("a", 5), ("a", 6), ("b", 1)]:
        driver.pipe("clicks", key, {}, timestamp=ts)
    assert _out(driver) == [("a", 1, 5), ("a", 2, 6), ("b", 1, 1)]  # (b's 1 is before stream time: due at once)


def test_over_max_records_the_keys_waiting_longest_go_on_early():
    clicks = [(k, i * 10) for i, k in enumerate("abcabdeaf")]
    driver = TopologyTestDriver(counted(app_(), limit=60_000, max_records=2))
    for key, ts in clicks:
        driver.pipe("clicks", key, {}, timestamp=ts)
    expected, waiting = reference(running_counts(clicks), 60_000, max_records=2)
    assert _out(driver) == expected and len(waiting) == 2
    assert [s.key for s in driver.store("limited-buffer").view.all()] == sorted(waiting, key=lambda k: waiting[k][0])


def test_max_bytes_counts_the_keys_and_values_waiting():
    driver = TopologyTestDriver(counted(app_(), limit=60_000, max_bytes=15))
    for i in range(6):  # a string key of 2 bytes and a long of 8: 10 bytes a key, so one key fits
        driver.pipe("clicks", f"u{i}", {}, timestamp=i)
    assert [k for k, _, _ in _out(driver)] == ["u0", "u1", "u2", "u3", "u4"]
    assert [s.key for s in driver.store("limited-buffer").view.all()] == ["u5"]


def test_a_full_buffer_that_shuts_down_stops_the_job_and_commits_nothing_of_its_batch():
    driver = TopologyTestDriver(counted(app_(), limit=60_000, max_records=2, when_full="shut_down"))
    driver.pipe("clicks", "a", {}, timestamp=0)
    driver.pipe("clicks", "b", {}, timestamp=1)
    with pytest.raises(TaskFailedError, match=r"suppression buffer 'limited-buffer' holds 3 keys .*max_records=2"
                                              r".*when_full=\"emit_early\"") as failed:
        driver.pipe("clicks", "c", {}, timestamp=2)
    assert isinstance(failed.value, BufferFullError) or failed.value.cause_type == "BufferFullError"
    assert driver.dead_letters() == []


def test_updates_a_record_cache_flushed_wait_and_go_on_in_a_scope_without_a_record():
    clicks = [(k, i * 1_000) for i, k in enumerate("aabacbbdae")]
    driver = TopologyTestDriver(counted(app_(cache_max_bytes=1 << 20), limit=3_000))
    driver.pipe_many("clicks", [(k, {}, ts) for k, ts in clicks[:5]])
    driver.pipe_many("clicks", [(k, {}, ts) for k, ts in clicks[5:]])
    out = driver.read("alerts")
    assert out and all("eos.derived" in r.headers and "eos.origin" not in r.headers for r in out)
    # each value one the count had, each key's in order, none twice
    history = {}
    for key, value, _ in running_counts(clicks):
        history.setdefault(key, []).append(value)
    for key in {r.key for r in out}:
        values = [r.value for r in out if r.key == key]
        assert values == sorted(set(values)) and set(values) <= set(history[key])


@pytest.mark.parametrize("cache", [0, 1 << 20])
def test_suppressed_counts_are_committed_exactly_once_through_crashes(cache):
    rnd = random.Random(cache)
    inputs = [("clicks", rnd.choice("abcdefg"), {}, i * 400 + rnd.randint(0, 2_000)) for i in range(150)]
    report = TopologyTestDriver(counted(app_(cache_max_bytes=cache), limit=4_000, max_records=4),
                                partitions=2).check_exactly_once(inputs, crashes=10, seed=3)
    assert report.crashes


def test_the_buffer_outlives_a_killed_batch():
    app = counted(app_(), limit=10_000)
    driver = TopologyTestDriver(app)
    driver.pipe("clicks", "a", {}, timestamp=0)
    driver.pipe("clicks", "a", {}, timestamp=1_000)
    driver.crash_at("after_read")  # the task's runtime is dropped: the next batch restores it from changelogs
    driver.pipe("clicks", "b", {}, timestamp=10_000)
    assert _out(driver) == [("a", 2, 1_000)]
    # what `eos store dump` prints of it
    assert store_rows(driver.store("limited-buffer")) == [{"key": "b", "value": "1", "timestamp": 10_000,
                                                            "buffer_time": 10_000}]


def test_describe_names_the_step_its_limit_and_its_buffer():
    text = str(counted(app_(), limit=timedelta(minutes=1), max_records=100).describe())
    assert "table suppress (time limit 60000 ms, max_records 100, when full: emit_early)" in text
    assert "stores: [limited-buffer]" in text


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda t: t.suppress(), TypeError, r"suppress\(time_limit\) holds each key's updates back for a time; "
                                        r"each window's final result once, when it closes, is "
                                        r"window\(..., emit=\"final\"\)"),
    (lambda t: t.suppress("1m"), TypeError, r"suppress\(time_limit\) is milliseconds \(an int\) or a datetime"),
    (lambda t: t.suppress(-1), ValueError, r"a time limit is >= 0 ms, got -1"),
    (lambda t: t.suppress(1_000, max_records=0), ValueError, r"max_records=...\): a bound is a whole number >= 1"),
    (lambda t: t.suppress(1_000, max_bytes=1.5), ValueError, r"max_bytes=...\): a bound is a whole number >= 1"),
    (lambda t: t.suppress(1_000, when_full="drop"), ValueError, r"one of 'emit_early', 'shut_down', got 'drop'"),
])
def test_a_mistake_in_a_suppression_fails_where_it_is_written(call, error, message):
    table = app_().stream("clicks").group_by_key().count()
    with pytest.raises(error, match=message):
        call(table)


def test_a_stream_or_a_grouped_stream_suppressed_says_what_to_write():
    stream = app_().stream("clicks")
    with pytest.raises(AttributeError, match=r"aggregate first \(stream.group_by_key\(\).count\(\).suppress"):
        stream.suppress(1_000)
    with pytest.raises(AttributeError, match=r"aggregate first, grouped.count\(\).suppress\(time_limit\)"):
        stream.group_by_key().suppress(1_000)


def test_a_value_the_buffers_serde_refuses_sends_its_record_to_the_dead_letter_topic_naming_the_store():
    app = app_()
    (app.stream("clicks", key_serde="string").group_by_key().count(name="per-user")
        .map_values(lambda n: {n} if n == 2 else n).suppress(0, name="limited").to_stream().to("alerts"))
    driver = TopologyTestDriver(app)
    for ts in (1, 2, 3):
        driver.pipe("clicks", "a", {}, timestamp=ts)
    # the second click's count (2) cannot wait: the click is dead-lettered and its count rolled back, so the
    # third one counts 2 again and goes the same way
    assert [r.value for r in driver.read("alerts")] == [1]
    dead = driver.dead_letters()
    assert len(dead) == 2 and all("store 'limited-buffer' cannot take the value {2} (set)" in d.error for d in dead)
    assert driver.store("per-user-store").get("a") == 1
