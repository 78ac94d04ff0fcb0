"""Folded windows on a real broker and Spark (eos.worker.folding): a count per key in tumbling windows, a sum in
hopping windows behind a filter, a count per key and session and one per key and sliding window, every update
forwarded (or held in a record cache), their batches folded and their windows expiring inside the fold, SIGKILLed
mid-batch and inside their transactions, then restarted on the rest of the input. Each window's committed updates
must be its reference's running count or sum, one per record, none twice or missing (with the cache, a part of them,
in order, ending with the last); the sessions left once each merged-away one's tombstone removed it must be the
reference's, with its counts, one update per record (uncached), none removed twice; the sliding count's updates
the record-at-a-time loop's of the same input (with the cache, a part of them, in order, ending with the last),
each window's last its records' count; and every window of a key in the key's own partition."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import defaultdict

import pytest

from eos.audit import audit_application
from integration_tests.engine.test_kill_restart import kill_job_repeatedly
from integration_tests.helpers import produce
from integration_tests.streams.test_time_and_rekey import committed_records
from integration_tests.streams.test_windows import BASE
from tests.eos.test_folded_sessions import reference_sessions, surviving
from transactions.partitioner import partition_for

JOB = """
import os
from eos import Application
from eos.testing import MarkWhile
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows

DIFF = 10_000
app = Application(os.environ["APP"], max_records_per_batch=int(os.environ["BATCH"]), trigger_interval=0.0,
                  log_format="json", log_level="WARNING", state_dir=os.environ["STATE"],
                  cache_max_bytes=int(os.environ["CACHE"]), timestamp=os.environ.get("STAMP") or None)
# the peers' window job's shape: Application.count with windows, its keys written binary
app.count(os.environ["IN"], os.environ["COUNTS"], name="counts", windows=TumblingWindows(60_000, grace=20_000),
          windowed_key="binary")
(app.stream(os.environ["IN"], value_serde="json").filter(lambda key, v: v["amount"] % 7 != 0, name="not-sevens")
    .group_by_key().window(HoppingWindows(60_000, 20_000, grace=20_000)).sum(lambda v: v["amount"], name="amounts")
    .to_stream().to(os.environ["SUMS"]))
# the peers' session job's shape: a record within 20 s of its key's session extends it (or joins two)
app.count(os.environ["IN"], os.environ["SESSIONS"], name="sessions", windows=SessionWindows(20_000, grace=20_000),
          windowed_key="binary")
# the peers' sliding job's shape
app.count(os.environ["IN"], os.environ["SLIDING"], name="sliding", windows=SlidingWindows(DIFF, grace=20_000),
          windowed_key="binary")
if os.environ.get("MARKS"):
    app.fault_hooks.on("before_commit", MarkWhile(os.environ["MARKS"], seconds=0.3))
"""

SIZE, ADVANCE, GAP, DIFF = 60_000, 20_000, 20_000, 10_000


def timed_events(n: int, seed: int, keys: int = 40) -> list[tuple[bytes, bytes, int]]:
    """(key, value, timestamp): in time order but for lags within the windows' grace (none is late), ~450 ms
    apart, so that windows close and expire while the job runs; each value holds its timestamp too ("at")."""
    rng, t, out = random.Random(seed), BASE, []
    for i in range(n):
        t += rng.randrange(0, 900)
        at = t - rng.choice([0] * 12 + [5_000, 15_000])
        value = json.dumps({"id": i, "amount": rng.randrange(1, 50), "at": at}).encode()
        out.append((f"user-{rng.randrange(keys)}".encode(), value, at))
    return out


@pytest.mark.parametrize("cache, stamp", [(0, None), (1 << 20, None), (0, "field:at")],
                         ids=["uncached", "cached", "event-time-of-a-field"])
def test_folded_windows_killed_repeatedly_commit_each_windows_updates_once(kafka, spark, topic_factory, unique_name,
                                                                           tmp_path, request, monkeypatch, cache,
                                                                           stamp):
    """Uncached, every update is committed; with a record cache, each window's last update of every batch, so its
    committed updates are a part of the reference's, in order, ending with its last. With event time a field of
    each value (its record's own timestamp the producer's clock), the same."""
    soak = request.config.getoption("--soak")
    n, kills = (40_000, 6) if soak else (10_000, 3) if not cache else (6_000, 2)
    events = timed_events(n, seed=4)
    topics = {name: topic_factory(name, partitions=2) for name in ("in", "counts", "sums", "sessions", "sliding")}
    first, rest = events[: n * 3 // 4], events[n * 3 // 4:]

    def load(part: list[tuple[bytes, bytes, int]]) -> None:
        stamps = [ts for *_, ts in part]
        produce(kafka.bootstrap_servers, topics["in"], [(k, v) for k, v, _ in part],
                timestamp_of=None if stamp else lambda i, key: stamps[i])

    load(first)
    (tmp_path / "job.py").write_text(JOB)
    marks = tmp_path / "marks"
    marks.mkdir()
    app_id = unique_name("app")
    env = {**os.environ, "EOS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "APP": app_id,
           "STATE": str(tmp_path / "state"), "MARKS": str(marks), "BATCH": "1500" if soak else "600",
           "CACHE": str(cache), "STAMP": stamp or "", **{k.upper(): v for k, v in topics.items()}}
    in_txn = kill_job_repeatedly(tmp_path, env, kills, marks, seed=6, pause=(3.0, 6.0))
    assert in_txn >= (kills + 1) // 2
    env.pop("MARKS")
    restarted = subprocess.run([sys.executable, "-m", "eos.cli", "run", "job.py", "--until-caught-up"], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=600)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    # the rest of the input, in this process on the test's Spark: its summary says the batches were folded
    load(rest)
    sys.path.insert(0, str(tmp_path))
    try:
        from eos.cli.loader import load_application

        for key, value in env.items():  # (this job's, not an earlier test's)
            monkeypatch.setenv(key, value)
        app = load_application(str(tmp_path / "job.py"))
    finally:
        sys.path.remove(str(tmp_path))
    summary = app.run(spark, until_caught_up=True)
    assert summary.records_in >= 2 * len(rest) and summary.records_folded == summary.records_in
    assert summary.dead_letters == 0 and not summary.dropped

    # the reference: each window's records in input order (a key's records are in one partition, in order)
    counts: dict[tuple[str, int], list[int]] = defaultdict(list)
    sums: dict[tuple[str, int], list[int]] = defaultdict(list)
    for key, value, ts in events:
        amount = json.loads(value)["amount"]
        window = (key.decode(), ts - ts % SIZE)
        counts[window].append(len(counts[window]) + 1)
        if amount % 7:
            start = max(0, ts - SIZE + ADVANCE) // ADVANCE * ADVANCE
            while start <= ts:
                running = sums[(key.decode(), start)]
                running.append((running[-1] if running else 0) + amount)
                start += ADVANCE
    # every window of a key in the key's partition, as its input (Kafka Streams' WindowedStreamPartitioner)
    got_counts: dict[tuple[str, int], list[int]] = defaultdict(list)
    for key, value, _, partition in committed_records(kafka.bootstrap_servers, topics["counts"], partition=True):
        assert partition == partition_for(key[:-16], 2), key
        got_counts[(key[:-16].decode(), int.from_bytes(key[-8:], "big"))].append(int.from_bytes(value, "big"))
    got_sums: dict[tuple[str, int], list[int]] = defaultdict(list)
    for key, value, _, partition in committed_records(kafka.bootstrap_servers, topics["sums"], partition=True):
        windowed = json.loads(key)
        assert partition == partition_for(windowed["key"].encode(), 2), key
        got_sums[(windowed["key"], windowed["start"])].append(json.loads(value))
    if not cache:
        assert got_counts == counts  # every update once, in order, none missing
        assert got_sums == sums
    else:  # the cache forwards some of a window's updates: in order, none twice, ending with its last
        for got, want in ((got_counts, counts), (got_sums, sums)):
            assert got.keys() == want.keys()
            for window, updates in got.items():
                assert updates[-1] == want[window][-1], window
                assert updates == sorted(set(updates)) and set(updates) <= set(want[window]), window
        assert sum(map(len, got_counts.values())) < len(events)
    assert len(counts) > 300 and len(sums) > 600
    # sessions: what is left once each tombstone removed its session is the reference's (every record, lags within
    # the gap and grace: none late), each session's last count exact; uncached, one update per record
    committed = committed_records(kafka.bootstrap_servers, topics["sessions"], partition=True)
    assert all(partition == partition_for(key[:-16], 2) for key, _, _, partition in committed)
    alive = surviving((key[:-16].decode(), int.from_bytes(key[-8:], "big"), int.from_bytes(key[-16:-8], "big"),
                       None if value is None else int.from_bytes(value, "big")) for key, value, _, _ in committed)
    updates = sum(value is not None for _, value, _, _ in committed)
    assert alive == reference_sessions([(key.decode(), ts) for key, _, ts in events], GAP)
    assert updates == len(events) if not cache else updates < len(events)
    assert len(alive) > 100 and len(alive) < len(events) // 2
    check_sliding(kafka.bootstrap_servers, topics["sliding"], events, cache)
    reports = audit_application(app)
    assert all(r.verdict == "PASS" for r in reports), [(r.inputs, r.lineage) for r in reports]



def check_sliding(bootstrap: str, topic: str, events: list[tuple[bytes, bytes, int]], cache: int = 0) -> None:
    """The sliding count's committed updates: each window's the record-at-a-time loop makes of the same records in
    the same partitions (the test driver, the fold off, no cache), once each, in order, none missing (with a record
    cache, a part of them, in order, none twice, ending with the last); each window's last count its records
    between its bounds; every window of a key in the key's partition."""
    from eos import Application
    from eos.testing import TopologyTestDriver
    from eos.windows import SlidingWindows
    from eos.worker import processing

    got: dict[tuple[str, int], list[int]] = defaultdict(list)
    for key, value, _, partition in committed_records(bootstrap, topic, partition=True):
        assert partition == partition_for(key[:-16], 2), key
        got[(key[:-16].decode(), int.from_bytes(key[-8:], "big"))].append(int.from_bytes(value, "big"))
    app = Application("sliding-reference")
    app.count("in", "out", name="sliding", windows=SlidingWindows(DIFF, grace=20_000), windowed_key="binary")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(processing, "fold_target", lambda processor: None)
        driver = TopologyTestDriver(app, partitions=2)
        driver.pipe_many("in", events, serialized=True)
        want: dict[tuple[str, int], list[int]] = defaultdict(list)
        for record in driver.create_output_topic("out", "bytes", "bytes").read_records_to_list():
            want[(record.key[:-16].decode(), int.from_bytes(record.key[-8:], "big"))].append(
                int.from_bytes(record.value, "big"))
    if not cache:
        assert got == want
    else:
        assert got.keys() == want.keys()
        for window, updates in got.items():
            assert updates[-1] == want[window][-1], window
            assert updates == sorted(set(updates)) and set(updates) <= set(want[window]), window
        assert sum(map(len, got.values())) < sum(map(len, want.values()))
    times: dict[str, list[int]] = defaultdict(list)
    for key, _, ts in events:
        times[key.decode()].append(ts)
    for (key, start), updates in got.items():
        assert updates[-1] == sum(start <= t <= start + DIFF for t in times[key]), (key, start)
    assert len(got) > len(events)  # a record's own window, and the window after most records
