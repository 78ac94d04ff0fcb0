"""Tasks that share one transaction (`tasks_per_transaction`), through the test driver: a unit's tasks commit
together in one transaction per batch, crashes anywhere in a unit leave results exactly once, the open-time
budget leaves the rest of a unit for the next batch, and a change of grouping fences the transactional id
that last committed each task first."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from eos import Application, ConfigError
from eos.driver.planner import Planner
from eos.testing import TopologyTestDriver
from eos.topology import TaskId
from eos.worker.attempt import BatchAttempt, together_groups
from eos.worker.plans import TaskStatus
from eos.worker.progress import CommitMetadata, fenced_since
from transactions import ProducerFencedError, TopicPartition, issued_after, producer_token
from transactions.memory import _COMMITTED, MemoryProducer

PARTITIONS = 8
SUB = "filter_1"  # the one sub-topology of counts_app, named after its first step


def counts_app(**settings) -> Application:
    app = Application("shared", **settings)
    app.stream("in").filter(lambda k, v: v["n"] % 5 != 0).group_by_key().count(name="counts").to_stream().to("out")
    return app


def inputs(n: int, seed: int = 1, partitions: int = PARTITIONS) -> list[tuple]:
    """(topic, key, value, timestamp, partition): keys spread over every partition."""
    rng = random.Random(seed)
    return [("in", f"k{k}", {"n": i}, None, k % partitions) for i in range(n) for k in [rng.randrange(40)]]


def committed_transactions(driver: TopologyTestDriver) -> list[set[tuple[str, int]]]:
    """The input partitions whose offsets each committed transaction carried."""
    return [{(topic, p) for offsets in t.offsets.values() for topic, p in offsets}
            for t in driver.cluster.txns.values() if t.state == _COMMITTED and t.offsets]


def latest_counts(driver: TopologyTestDriver) -> dict[str, int]:
    return {r.key: r.value for r in driver.records("out")}


# ---------------------------------------------------------------- ids and metadata


def test_a_unit_is_named_by_its_first_partition_and_size_never_by_the_partition_count():
    assert TaskId("count", 5).transactional_id("app") == "app-count-5"
    assert TaskId("count", 5).transactional_id("app", 1) == "app-count-5"
    assert [TaskId("count", p).transactional_id("app", 4) for p in (0, 3, 4, 9)] == [
        "app-count-0x4", "app-count-0x4", "app-count-4x4", "app-count-8x4"]


def test_the_grouping_travels_with_the_committed_offsets():
    text = CommitMetadata(12, "tok", grouping=4).encode()
    assert ";g=4" in text and CommitMetadata.decode(text).grouping == 4
    assert ";g=" not in CommitMetadata(12, "tok").encode()
    assert CommitMetadata.decode("eos1;st=3;p=tok").grouping == 1  # written before units existed: its own id
    assert CommitMetadata.decode("eos1;st=3;p=tok;g=x").grouping == 1


@pytest.mark.parametrize("value", [0, -2])
def test_a_unit_read_below_one_offset_is_refused_with_what_it_is(value):
    with pytest.raises(ConfigError, match="unit_read_records must be >= 1 offsets"):
        Application("bad", unit_read_records=value)


@pytest.mark.parametrize("value", [0, -2])
def test_a_grouping_below_one_is_refused_with_what_to_set(value):
    with pytest.raises(ConfigError, match="tasks_per_transaction must be > 0"):
        Application("bad", tasks_per_transaction=value)


@pytest.mark.parametrize("value", ["Auto", "many", 2.5, True])
def test_a_grouping_that_is_neither_a_number_nor_auto_is_refused_with_what_it_takes(value):
    with pytest.raises(ConfigError, match="tasks_per_transaction must be an integer or 'auto', got"):
        Application("bad", tasks_per_transaction=value)


def test_the_grouping_is_auto_by_default_and_taken_from_the_command_line_s_strings():
    assert Application("a").config.tasks_per_transaction == "auto"
    assert [Application("a", tasks_per_transaction=v).config.tasks_per_transaction for v in ("auto", "32", 4)] == [
        "auto", 32, 4]


def test_producer_tokens_are_ordered_by_issue_and_others_are_issued_after_nothing():
    first = producer_token()
    later = producer_token()
    assert issued_after(later, first) and not issued_after(first, later) and not issued_after(first, first)
    assert not issued_after("3f2a9c1b0d4e", first)  # a token of an older version: says nothing
    assert not issued_after(None, first)


def test_a_cached_producer_is_fenced_only_by_a_producer_made_after_it():
    """A unit's task that had no input for a while still names an earlier producer of the unit: that one did
    not fence the cached producer, so the worker keeps it."""
    earlier = MemoryProducer.__new__(MemoryProducer)
    earlier.token = producer_token()
    mine = MemoryProducer.__new__(MemoryProducer)
    mine.token, mine.commits = producer_token(), 3
    assert not fenced_since(mine, [earlier.token, mine.token, None])
    assert fenced_since(mine, [mine.token, producer_token()])
    mine.commits = 0
    assert not fenced_since(mine, [producer_token()])  # it has not committed: it cannot tell


# ---------------------------------------------------------------- one transaction per unit


def test_a_unit_commits_its_tasks_in_one_transaction_with_the_results_of_one_per_task():
    app = counts_app(tasks_per_transaction=4)
    driver = TopologyTestDriver(app, partitions={"in": PARTITIONS, "out": PARTITIONS})
    driver.pipe_records(inputs(400))
    txns = committed_transactions(driver)
    assert sorted(sorted(p for _, p in t) for t in txns if all(topic == "in" for topic, _ in t)) == [
        [0, 1, 2, 3], [4, 5, 6, 7]]
    assert set(driver.cluster.epochs) == {f"shared-{SUB}-0x4", f"shared-{SUB}-4x4"}
    counted = [r for r in driver.results if r.status is TaskStatus.COMMITTED]
    by_unit: dict[int, set[float]] = {}
    for r in driver.results:
        if r.status is TaskStatus.COMMITTED:
            by_unit.setdefault(r.task.partition // 4, set()).add(r.committed_at)
    assert counted and all(len(times) == 1 for times in by_unit.values())  # each unit: one commit

    alone = TopologyTestDriver(counts_app(tasks_per_transaction=1), partitions={"in": PARTITIONS, "out": PARTITIONS})
    alone.pipe_records(inputs(400))
    assert sorted((r.key, r.value) for r in driver.records("out")) == sorted(
        (r.key, r.value) for r in alone.records("out"))
    assert (len(committed_transactions(alone)), len(committed_transactions(driver))) == (PARTITIONS, 2)


@pytest.mark.parametrize("grouping", [2, 3, 8])
def test_crashes_anywhere_in_a_unit_leave_results_exactly_once(grouping):
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=grouping),
                                partitions={"in": PARTITIONS, "out": PARTITIONS})
    report = driver.check_exactly_once(inputs(600, seed=grouping), crashes=12, seed=grouping, chunk=37)
    assert report.ok and len(report.crashes) >= 8


# ---------------------------------------------------------------- tasks_per_transaction="auto" (the default)


def unit_ids(driver: TopologyTestDriver) -> set[str]:
    return {t for t in driver.cluster.epochs if t.startswith(f"shared-{SUB}-")}


@pytest.mark.parametrize(("partitions", "slots", "ids"), [
    (8, 2, {"0x4", "4x4"}),  # 4 tasks a slot: a unit per slot, as Kafka Streams' threads commit theirs
    (4, 2, {"0", "1", "2", "3"}),  # 2 a slot: a transaction per task
    (4, 1, {"0x4"}),
    (9, 2, {"0x5", "5x5"})])
def test_auto_makes_a_unit_per_task_slot_where_each_then_holds_four_tasks_or_more(partitions, slots, ids):
    app = counts_app()
    assert app.config.tasks_per_transaction == "auto"
    driver = TopologyTestDriver(app, partitions={"in": partitions, "out": partitions}, task_slots=slots)
    driver.pipe_records(inputs(300, partitions=partitions))
    assert unit_ids(driver) == {f"shared-{SUB}-{i}" for i in ids}
    want = Counter(key for _, key, value, _, _ in inputs(300, partitions=partitions) if value["n"] % 5 != 0)
    assert latest_counts(driver) == want


def test_auto_units_leave_every_result_once_through_crashes_and_keep_their_size_when_the_slots_change():
    """Batches killed at random steps give what a run without crashes gives; the counts are the reference's.
    Started again on more task slots (8: auto would now give a transaction per task), the application keeps
    the units its commits record, so no second transactional id ever covers a task."""
    driver = TopologyTestDriver(counts_app(), partitions={"in": PARTITIONS, "out": PARTITIONS})
    report = driver.check_exactly_once(inputs(600, seed=7), crashes=12, seed=7, chunk=37)
    assert report.ok and len(report.crashes) >= 8
    driver.pipe_records(inputs(600, seed=7))
    assert unit_ids(driver) == {f"shared-{SUB}-0x4", f"shared-{SUB}-4x4"}
    more = Planner(driver.admin, driver.config, driver.app.subtopologies, {"in": PARTITIONS}, timed=False,
                   task_slots=8)
    more.plan(0)
    assert more.groupings == {SUB: 4}  # (a fresh application on eight slots: 1)
    fresh = TopologyTestDriver(counts_app(), partitions={"in": PARTITIONS, "out": PARTITIONS}, task_slots=8)
    fresh.pipe_records(inputs(600, seed=7))
    assert unit_ids(fresh) == {f"shared-{SUB}-{p}" for p in range(PARTITIONS)}
    want = Counter(key for _, key, value, _, _ in inputs(600, seed=7) if value["n"] % 5 != 0)
    assert latest_counts(driver) == latest_counts(fresh) == want


def test_a_crash_before_the_commit_of_a_unit_s_second_task_shows_nothing_of_the_first():
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=2), partitions={"in": 2, "out": 1})
    driver.crash_at("before_commit", task=f"{SUB}-1")
    driver.pipe_records([("in", "a", {"n": 1}, None, 0), ("in", "b", {"n": 2}, None, 1)])
    assert [c[1].task for c in driver.crashes] == [f"{SUB}-1"]
    # the crashed attempt had produced both tasks' counts into the unit's transaction: aborted together,
    # then both committed once by the next attempt
    raw = [m for m in driver.cluster.logs["out"][0] if not m.marker]
    assert len(raw) == 4
    assert sorted((r.key, r.value) for r in driver.records("out")) == [("a", 1), ("b", 1)]
    committed = [r for r in driver.results if r.status is TaskStatus.COMMITTED]
    assert sorted(r.task.partition for r in committed) == [0, 1] and len({r.committed_at for r in committed}) == 1


def test_in_a_run_s_first_batch_a_unit_commits_after_its_first_task_with_input():
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4), partitions={"in": PARTITIONS, "out": PARTITIONS})
    # (the driver's own first plan found no input; a run started behind a backlog has it in its first)
    driver.planner._first_plan = True
    batch = driver.batch
    driver.pipe_records(inputs(400))
    first = [r for r in driver.results if r.batch == batch]
    assert [(r.task.partition, r.status) for r in first] == [
        (p, TaskStatus.COMMITTED if p % 4 == 0 else TaskStatus.DEFERRED) for p in range(PARTITIONS)]
    assert {r.task.partition for r in driver.results if r.batch == batch + 1} == set(range(1, PARTITIONS)) - {4}
    assert sum(r.records_in for r in driver.results) == 400


def spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, int, int]]]:
    """The (partition, start, end) of the ranges of each read of the test driver's input consumers."""
    import eos.testing.clients as memory_clients

    reads: list[list[tuple[int, int, int]]] = []
    real = memory_clients.MemoryClients.reader

    def reader(self, config, purpose="input"):
        read = real(self, config, purpose)

        def spied(ranges, timeout):
            reads.append([(r.partition, r.start, r.end) for r in ranges if not r.empty])
            return read(ranges, timeout)

        return spied

    monkeypatch.setattr(memory_clients.MemoryClients, "reader", reader)
    return reads


def test_a_unit_reads_its_tasks_input_in_one_read_and_each_task_processes_what_is_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads = spy_reads(monkeypatch)
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4), partitions={"in": PARTITIONS, "out": PARTITIONS})
    driver.pipe_records(inputs(400))
    units = [[(p, 0, n) for p, n in sorted(Counter(r[4] for r in inputs(400) if r[4] // 4 == unit).items())]
             for unit in (0, 1)]
    assert reads == units  # one read per unit, every task's range in it, none read again
    alone = TopologyTestDriver(counts_app(tasks_per_transaction=1), partitions={"in": PARTITIONS, "out": PARTITIONS})
    alone.pipe_records(inputs(400))
    assert sorted((r.key, r.value) for r in driver.records("out")) == sorted(
        (r.key, r.value) for r in alone.records("out"))
    assert sorted((r.task.partition, r.records_in) for r in driver.results) == sorted(
        (r.task.partition, r.records_in) for r in alone.results)
    assert sum(r.read_ms > 0 for r in driver.results) >= 2  # the unit's read is counted, once, to its first task


def test_a_unit_read_together_cuts_each_task_off_late(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records that arrive between the plan and the unit's read are in the batch of every task read together."""
    from eos.testing.clients import MemoryClients

    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4), partitions={"in": 4, "out": 4})
    original = MemoryClients.stable_ends
    arrived: list[int] = []

    asked: list[list[tuple[str, int]]] = []

    def stable_ends(self, config, partitions, timeout):
        asked.append(list(partitions))
        for _, partition in partitions:
            if partition not in arrived:
                arrived.append(partition)
                driver.pipe_records([("in", f"late{partition}", {"n": 1}, None, partition)], process=False)
        return original(self, config, partitions, timeout)

    monkeypatch.setattr(MemoryClients, "stable_ends", stable_ends)
    reads = spy_reads(monkeypatch)
    driver.pipe_records([("in", f"k{p}", {"n": 1}, None, p) for p in range(4)])
    assert sorted(arrived) == [0, 1, 2, 3]
    assert asked == [[("in", p) for p in range(4)]]  # the unit's last stable offsets in one request
    assert reads == [[(p, 0, 2) for p in range(4)]]  # each range as the late cut-off extended it, in one read
    assert sorted((r.task.partition, r.records_in, r.extended) for r in driver.results) == [
        (p, 2, 1) for p in range(4)]
    assert latest_counts(driver) == {**{f"k{p}": 1 for p in range(4)}, **{f"late{p}": 1 for p in range(4)}}


def test_each_task_of_a_unit_too_large_to_read_together_reads_what_was_prefetched_while_the_one_before_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import eos.testing.clients as memory_clients

    prefetched: list[tuple[int, str]] = []
    real = memory_clients.MemoryClients.prefetch

    def spy(self, config, ranges, purpose):
        prefetched.append((ranges[0].partition, purpose))
        return real(self, config, ranges, purpose)

    monkeypatch.setattr(memory_clients.MemoryClients, "prefetch", spy)
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4, unit_read_records=10),
                                partitions={"in": PARTITIONS, "out": PARTITIONS})
    driver.pipe_records(inputs(400))
    # the first task of each unit reads with the worker's input consumer, the next ones alternate
    assert prefetched == [(1, "input-ahead"), (2, "input"), (3, "input-ahead"),
                          (5, "input-ahead"), (6, "input"), (7, "input-ahead")]
    alone = TopologyTestDriver(counts_app(tasks_per_transaction=1), partitions={"in": PARTITIONS, "out": PARTITIONS})
    alone.pipe_records(inputs(400))
    assert sorted((r.key, r.value) for r in driver.records("out")) == sorted(
        (r.key, r.value) for r in alone.records("out"))


@pytest.mark.parametrize(("sizes", "cap", "groups"), [
    ([], 10, []),
    ([4, 4, 4], 10, [(0, 2), (2, 3)]),
    ([5, 5, 5, 5], 10, [(0, 2), (2, 4)]),  # (a read of exactly the cap)
    ([3, 12, 3, 3, 3], 10, [(0, 1), (1, 2), (2, 5)]),  # a task above the cap reads alone
    ([12, 12], 10, [(0, 1), (1, 2)]),
    ([1] * 5, 100, [(0, 5)])])
def test_a_unit_s_tasks_are_read_in_runs_of_consecutive_tasks_each_within_the_cap(sizes, cap, groups):
    assert together_groups(sizes, cap) == groups


def test_a_unit_too_large_for_one_read_reads_its_tasks_in_runs_each_within_the_cap_each_range_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At ~120,000 records a second a unit of 32 tasks has ~60,000 to read a batch, above the most of one read:
    its tasks are read in runs of consecutive tasks, each in one read of at most the cap (a task above it
    alone), the first before any task runs and each later one when its first task is about to, rather than
    task after task. What each task processes, and the counts, are what a transaction per task gives."""

    sizes = [50, 50, 50, 50, 30, 90, 30, 30]  # unit 0: two runs of two; unit 1: 30 | 90 | 30 + 30

    def records(seed: int) -> list[tuple]:
        return [("in", f"k{p}-{i % 7}", {"n": seed * 1000 + i}, None, p) for p in range(PARTITIONS)
                for i in range(sizes[p])]

    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4, unit_read_records=110),
                                partitions={"in": PARTITIONS, "out": PARTITIONS})
    alone = TopologyTestDriver(counts_app(tasks_per_transaction=1), partitions={"in": PARTITIONS, "out": PARTITIONS})
    driver.pipe_records([("in", "warm", {"n": 1}, None, p) for p in range(PARTITIONS)])  # (past the first batch)
    alone.pipe_records([("in", "warm", {"n": 1}, None, p) for p in range(PARTITIONS)])
    events = spy_reads(monkeypatch)
    real = BatchAttempt.work

    def work(self, scope):
        events.append([("ran", self.task.partition, 0)])
        return real(self, scope)

    monkeypatch.setattr(BatchAttempt, "work", work)
    done = len(driver.results)
    driver.pipe_records(records(1))
    reads = [[p for p, _, _ in e] for e in events if e and e[0][0] != "ran"]
    assert reads == [[0, 1], [2, 3], [4], [5], [6, 7]]
    assert [e for e in events if e] == [  # each later run read as its first task begins
        [(0, 1, 51), (1, 1, 51)], [("ran", 0, 0)], [("ran", 1, 0)], [("ran", 2, 0)], [(2, 1, 51), (3, 1, 51)],
        [("ran", 3, 0)],
        [(4, 1, 31)], [("ran", 4, 0)], [("ran", 5, 0)], [(5, 1, 91)], [("ran", 6, 0)], [(6, 1, 31), (7, 1, 31)],
        [("ran", 7, 0)]]
    alone.pipe_records(records(1))
    assert latest_counts(driver) == latest_counts(alone)
    assert sorted((r.task.partition, r.records_in) for r in driver.results[done:]) == [
        (p, n) for p, n in enumerate(sizes)]


def test_crashes_anywhere_in_a_unit_read_in_runs_leave_results_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches killed at random steps (among them the reads of a unit's later runs, and the tasks between) give
    what the run without crashes gives."""
    import eos.worker.attempt as attempt

    runs: list[list[tuple[int, int]]] = []
    reads: list[int] = []
    cut, read = attempt.together_groups, attempt.read_together

    def cut_spy(sizes, cap):
        runs.append(cut(sizes, cap))
        return runs[-1]

    def read_spy(reader, ranges, timeout):
        reads.append(len(ranges))
        return read(reader, ranges, timeout)

    monkeypatch.setattr(attempt, "together_groups", cut_spy)
    monkeypatch.setattr(attempt, "read_together", read_spy)
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4, unit_read_records=12),
                                partitions={"in": PARTITIONS, "out": PARTITIONS})
    report = driver.check_exactly_once(inputs(600, seed=4), crashes=12, seed=4, chunk=37)
    assert report.ok and len(report.crashes) >= 8
    # the batches cut into several runs read each run in a read of its own (but where a crash ended the batch
    # before a later run was asked for): ~146 such runs here, 7 reads in all where such batches read task after task
    cut_into_runs = [g for g in runs if len(g) > 1 and any(end - first > 1 for first, end in g)]
    assert len(cut_into_runs) >= 20 and len(reads) >= sum(len(g) for g in cut_into_runs) - 12


def test_a_unit_whose_input_is_gone_at_a_later_run_s_read_aborts_what_its_earlier_tasks_wrote_and_loses_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The second run's read finds an offset the partition no longer has, after the first run's tasks wrote
    their outputs into the unit's transaction: the transaction is aborted, the unit's tasks are deferred, and
    the next batch reads and commits each once."""
    import eos.testing.clients as memory_clients
    from transactions import OffsetOutOfRangeError

    real = memory_clients.MemoryClients.reader
    unit_reads: list[list[int]] = []

    def reader(self, config, purpose="input"):
        read = real(self, config, purpose)
        if purpose != "input-unit":
            return read

        def second_gone(ranges, timeout):
            unit_reads.append([r.partition for r in ranges])
            if len(unit_reads) == 2:
                raise OffsetOutOfRangeError("in[2]: offset 0 is out of range")
            return read(ranges, timeout)

        return second_gone

    monkeypatch.setattr(memory_clients.MemoryClients, "reader", reader)
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4, unit_read_records=60),
                                partitions={"in": 4, "out": 4})
    driver.pipe_records([("in", "warm", {"n": 1}, None, p) for p in range(4)])  # (past the first batch)
    unit_reads.clear()
    batch = [("in", f"k{p}-{i % 3}", {"n": i}, None, p) for p in range(4) for i in range(30)]
    done = len(driver.results)
    driver.pipe_records(batch)
    assert unit_reads[:3] == [[0, 1], [2, 3], [0, 1]]  # the failed attempt's two runs, then the next batch's
    failed = driver.results[done:done + 4]
    assert {r.status for r in failed} == {TaskStatus.DEFERRED} and not any(r.committed_offsets for r in failed)
    written = [m for log in driver.cluster.logs["out"] for m in log if not m.marker]
    assert len(written) > len(driver.records("out"))  # (the first run's outputs, written and aborted)
    alone = TopologyTestDriver(counts_app(), partitions={"in": 4, "out": 4})
    alone.pipe_records([("in", "warm", {"n": 1}, None, p) for p in range(4)])
    alone.pipe_records(batch)
    assert latest_counts(driver) == latest_counts(alone)
    assert sorted(r.value for r in driver.records("out")) == sorted(r.value for r in alone.records("out"))
    assert sum(r.records_in for r in driver.results) == 124


def spy_bounds(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, int]]]:
    """The partitions of each read of changelog bounds (step 3's, before a store's restore)."""
    from eos.worker.clients import KafkaChangelogs

    asked: list[list[tuple[str, int]]] = []
    real = KafkaChangelogs.bounds

    def bounds(self, partitions):
        asked.append(list(partitions))
        return real(self, partitions)

    monkeypatch.setattr(KafkaChangelogs, "bounds", bounds)
    return asked


@pytest.mark.parametrize("state_dir", [False, True], ids=["memory", "rocksdb"])
def test_a_unit_reads_its_tasks_changelog_bounds_in_one_read_and_each_restores_to_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path, state_dir) -> None:
    """Tasks whose stores read their changelogs' bounds in a batch (new in the worker, the first batch or the one
    after a crash replaced the worker; or in memory, every batch) have them read for the whole unit at once, and
    each restores to them: the counts go on from the last committed ones, the reference's. Persistent stores a
    worker kept open and current read none."""
    asked = spy_bounds(monkeypatch)
    changelog = "shared-counts-store-changelog"
    unit0, unit4 = [[(changelog, p) for p in range(u, u + 4)] for u in (0, 4)]
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4), partitions={"in": PARTITIONS, "out": PARTITIONS},
                                state_dir=tmp_path if state_dir else None)
    waves = [(3, 400), (4, 200), (5, 300), (6, 100)]

    def wave(i: int) -> list[list[tuple[str, int]]]:
        asked.clear()
        driver.pipe_records(inputs(waves[i][1], seed=waves[i][0]))
        return list(asked)

    assert wave(0) == [unit0, unit4]
    assert wave(1) == ([] if state_dir else [unit0, unit4])
    driver.crash_at("before_commit", task=f"{SUB}-5")
    # the crashed attempt of unit 4x4 found its stores current on disk (in memory: read them); its next attempt,
    # on a new worker, reads its unit's bounds at once
    assert wave(2) == ([unit4] if state_dir else [unit0, unit4, unit4])
    assert len(driver.crashes) == 1
    retried = {r.task.partition: r.restored_records for r in driver.results if r.batch == driver.crashes[0][1].batch}
    # in memory the new worker's stores were rebuilt from the changelogs; on disk they were current already
    assert all((n > 0) != state_dir for p, n in retried.items() if p >= 4) and len(retried) == PARTITIONS
    assert wave(3) == ([unit0] if state_dir else [unit0, unit4])  # unit 0x4 runs on the new worker now too
    want = Counter(key for seed, n in waves for _, key, value, _, _ in inputs(n, seed=seed) if value["n"] % 5 != 0)
    assert latest_counts(driver) == want


def test_a_unit_whose_transaction_is_open_too_long_leaves_its_other_tasks_to_the_next_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With no time left in the transaction, a unit runs its first task only (it stops after its first slice)
    and defers the rest: every batch commits what it did, and the results are those of a plain run."""
    monkeypatch.setattr(BatchAttempt, "_open_budget", lambda self: 0.0)
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4, batch_slice_records=10),
                                partitions={"in": 4, "out": 4})
    driver.pipe_records(inputs(200, partitions=4))
    assert any(r.status is TaskStatus.DEFERRED for r in driver.results)
    alone = TopologyTestDriver(counts_app(), partitions={"in": 4, "out": 4})
    alone.pipe_records(inputs(200, partitions=4))
    assert latest_counts(driver) == latest_counts(alone)
    assert sum(r.records_in for r in driver.results if r.task.subtopology == SUB) == 200


# ---------------------------------------------------------------- a change of grouping


def regroup(driver: TopologyTestDriver, grouping: int) -> None:
    """The application started again with another tasks_per_transaction (on the same cluster)."""
    config = driver.config.with_overrides(tasks_per_transaction=grouping)
    driver.config = driver.job.config = driver.planner.config = config
    driver.planner.groupings = None  # (a new run settles its unit sizes at its first plan)


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 1), (2, 4)])
def test_a_new_grouping_fences_the_id_that_last_committed_a_task_before_committing_it(before, after):
    """An attempt of the old grouping still alive (a previous run's, on an executor cut off from the driver)
    holds an open transaction with the task's outputs and its offsets. Without the fence its commit would
    land after the new run committed the same input: the count twice."""
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=before), partitions={"in": 4, "out": 4})
    driver.pipe_records([("in", "a", {"n": 1}, None, 0)])
    old_id = TaskId(SUB, 0).transactional_id("shared", before)
    assert old_id in driver.cluster.epochs
    # the old attempt is fenced by no one yet: it takes the next batch's input and keeps it open
    zombie = MemoryProducer(driver.cluster, old_id)
    zombie.init()
    driver.pipe_records([("in", "a", {"n": 2}, None, 0)], process=False)
    zombie.begin()
    zombie.produce("out", b"zombie", b"a", partition=0)
    offset = driver.cluster.last_stable("in", 0)
    zombie.send_offsets([TopicPartition("in", 0, offset, CommitMetadata(0, zombie.token, grouping=before).encode())],
                        driver.worker.clients.consumer(driver.config).consumer_group_metadata())
    regroup(driver, after)
    driver.pipe_records([])  # the new grouping's run: it fences the zombie's id, then commits
    with pytest.raises(ProducerFencedError):
        zombie.commit()
    assert [(r.key, r.value) for r in driver.records("out")] == [("a", 1), ("a", 2)]
    driver.pipe_records([("in", "a", {"n": 3}, None, 0)])
    assert [(r.key, r.value) for r in driver.records("out")][-1] == ("a", 3)


def test_the_fence_happens_once_per_grouping_change_not_every_batch():
    driver = TopologyTestDriver(counts_app(), partitions={"in": 4, "out": 4})
    driver.pipe_records(inputs(40, partitions=4))
    regroup(driver, 2)
    epochs = dict(driver.cluster.epochs)
    driver.pipe_records(inputs(40, seed=2, partitions=4))
    fenced = {t for t, e in driver.cluster.epochs.items() if t in epochs and e > epochs[t] and "x" not in t}
    assert fenced == {f"shared-{SUB}-{p}" for p in range(4)}
    epochs = dict(driver.cluster.epochs)
    driver.pipe_records(inputs(40, seed=3, partitions=4))
    assert {t: e for t, e in driver.cluster.epochs.items() if "x" not in t} == {
        t: e for t, e in epochs.items() if "x" not in t}



def test_the_consumer_a_unit_reads_together_with_reads_ahead_little_unless_the_application_says_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its ranges are many and small: librdkafka's read-ahead (up to 1 MiB a partition per fetch, 64 MiB held)
    would fetch and hold mostly records past their ends, dropped when the read ends."""
    import eos.worker.clients as clients
    from eos.config import EosConfig

    built: dict[str, dict] = {}

    def consumer(bootstrap, group, overrides=None, *, out_of_range="error"):
        built[group] = dict(overrides or {})
        return object()

    monkeypatch.setattr(clients, "input_consumer", consumer)
    plain = EosConfig("units", "127.0.0.1:9")
    clients.WorkerClients().consumer(plain, clients.UNIT_PURPOSE)
    clients.WorkerClients().consumer(plain.with_overrides(application_id="plain"), "input")
    told = plain.with_overrides(application_id="told", consumer_config={"max.partition.fetch.bytes": 1_048_576})
    clients.WorkerClients().consumer(told, clients.UNIT_PURPOSE)
    assert built[plain.group_id] == clients.UNIT_READS
    assert built["plain"] == {}
    assert built["told"] == {**clients.UNIT_READS, "max.partition.fetch.bytes": 1_048_576}
    # a changelog's or a global table's reader reads further ahead than an input's, unless told otherwise too
    clients.WorkerClients().consumer(plain.with_overrides(application_id="restores"), "restore")
    clients.WorkerClients().consumer(plain.with_overrides(application_id="globals"), "global")
    clients.WorkerClients().consumer(told.with_overrides(application_id="told-restores",
                                                         consumer_config={"queued.min.messages": 1_000}), "restore")
    assert built["restores"] == built["globals"] == clients.BULK_READS
    assert built["told-restores"] == {"queued.min.messages": 1_000}


def test_a_unit_produces_its_tasks_changelog_records_last_all_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka adds a partition to the transaction when its first record is produced: a unit's tasks, each
    staging its changelog records in turn, added their changelog partitions in a request each. A unit now
    produces every task's changelog records after all its tasks' outputs, dead letters and ledger entries; a
    task alone produces them within its own staging. Either way a task's AFTER_PRODUCE hook fires once all its
    records are produced."""
    produced: list[tuple[str, int | None, str]] = []  # (transactional id, transaction, topic), in order

    real = MemoryProducer.produce

    def produce(self, topic, *args, **kwargs):
        produced.append((self.transactional_id, self._txn, topic))
        return real(self, topic, *args, **kwargs)

    monkeypatch.setattr(MemoryProducer, "produce", produce)

    def run(grouping: int, partitions: int, records: list[tuple]) -> tuple[dict, list[int]]:
        produced.clear()
        app = counts_app(tasks_per_transaction=grouping)
        hooked: list[int] = []  # how many records were produced when a task's AFTER_PRODUCE fired
        app.fault_hooks.on("after_produce", lambda point: hooked.append(len(produced)))
        TopologyTestDriver(app, partitions={"in": partitions, "out": partitions}).pipe_records(records)
        txns: dict[tuple[str, int | None], list[str]] = {}
        for txn_id, txn, topic in produced:
            kind = "changelog" if topic.endswith("-changelog") else "out" if topic == "out" else "other"
            txns.setdefault((txn_id, txn), []).append(kind)
        return txns, hooked

    txns, hooked = run(4, PARTITIONS, inputs(400))
    units = [kinds for (txn_id, _), kinds in txns.items() if txn_id.startswith(f"shared-{SUB}-") and "x4" in txn_id]
    assert units and all("out" in kinds and "changelog" in kinds for kinds in units)
    for kinds in units:  # the changelog records last, none before the unit's other records
        first = kinds.index("changelog")
        assert kinds[first:] == ["changelog"] * (len(kinds) - first), kinds
    # each task's hook fired after its changelog records, when only changelog records of its unit were still to come
    assert len(hooked) >= PARTITIONS
    for at in hooked:
        assert produced[at - 1][2].endswith("-changelog")
        assert all(topic.endswith("-changelog") for txn_id, txn, topic in produced[at:]
                   if (txn_id, txn) == produced[at - 1][:2])

    txns, hooked = run(1, 2, inputs(50, 2, 2))
    alone = [kinds for (txn_id, _), kinds in txns.items() if txn_id in (f"shared-{SUB}-0", f"shared-{SUB}-1")]
    assert alone and all("changelog" in kinds for kinds in alone)
    assert hooked and all(produced[at - 1][2].endswith("-changelog") for at in hooked)


def test_a_unit_s_producer_lingers_longer_than_a_task_s_own_unless_the_application_says_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit's producer writes its tasks' outputs to all their output partitions, and librdkafka sends one
    partition per produce request: it lingers longer, so that each request carries more. The unit asks for it
    (`tasks_per_transaction` > 1), a task alone does not, and the application's producer_config wins."""
    import eos.testing.clients as memory_clients
    import eos.worker.clients as clients
    from eos.config import EosConfig

    asked: dict[str, bool] = {}
    real = memory_clients.MemoryClients.producer

    def producer(self, transactional_id, config, *, unit=False):
        asked[transactional_id] = unit
        return real(self, transactional_id, config, unit=unit)

    monkeypatch.setattr(memory_clients.MemoryClients, "producer", producer)
    TopologyTestDriver(counts_app(tasks_per_transaction=4), partitions={"in": PARTITIONS, "out": PARTITIONS}
                       ).pipe_records(inputs(100))
    TopologyTestDriver(counts_app(tasks_per_transaction=1), partitions={"in": 2, "out": 2}
                       ).pipe_records(inputs(50, 2, 2))
    assert asked == {f"shared-{SUB}-0x4": True, f"shared-{SUB}-4x4": True, f"shared-{SUB}-0": False,
                     f"shared-{SUB}-1": False}

    built: dict[str, dict] = {}

    class Producer:
        def __init__(self, bootstrap, transactional_id, *, transaction_timeout_ms, overrides):
            built[transactional_id] = dict(overrides)

        def init(self, timeout):
            pass

    monkeypatch.setattr(clients, "TransactionalProducer", Producer)
    plain = EosConfig("units", "127.0.0.1:9")
    told = plain.with_overrides(producer_config={"linger.ms": 5, "compression.type": "lz4"})
    clients.WorkerClients().producer("unit", plain, unit=True)
    clients.WorkerClients().producer("alone", plain)
    clients.WorkerClients().producer("told", told, unit=True)
    assert built == {"unit": clients.UNIT_WRITES, "alone": {}, "told": {"linger.ms": 5, "compression.type": "lz4"}}
    assert clients.UNIT_WRITES["linger.ms"] > 50  # (the producers' own default: transactions.settings)


def test_a_unit_whose_input_is_gone_when_read_together_goes_back_to_the_planner_and_loses_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read together finds an offset the partition no longer has (as after retention): the plan is
    stale, the unit's tasks are deferred without committing, and the next batch reads and commits each once."""
    import eos.testing.clients as memory_clients
    from transactions import OffsetOutOfRangeError

    real = memory_clients.MemoryClients.reader
    failed: list[str] = []

    def reader(self, config, purpose="input"):
        read = real(self, config, purpose)
        if purpose != "input-unit" or failed:
            return read

        def gone(ranges, timeout):
            failed.append(purpose)
            raise OffsetOutOfRangeError("in[0]: offset 0 is out of range")

        return gone

    monkeypatch.setattr(memory_clients.MemoryClients, "reader", reader)
    driver = TopologyTestDriver(counts_app(tasks_per_transaction=4), partitions={"in": 4, "out": 4})
    driver.pipe_records(inputs(200, partitions=4))
    assert failed == ["input-unit"]
    first = driver.results[:4]
    assert {r.status for r in first} == {TaskStatus.DEFERRED} and not any(r.committed_offsets for r in first)
    alone = TopologyTestDriver(counts_app(), partitions={"in": 4, "out": 4})
    alone.pipe_records(inputs(200, partitions=4))
    assert latest_counts(driver) == latest_counts(alone)
    assert sorted(r.value for r in driver.records("out")) == sorted(r.value for r in alone.records("out"))
    assert sum(r.records_in for r in driver.results) == 200
