from __future__ import annotations

import pytest

from eos.config import EosConfig
from eos.driver.planner import Planner, unit_size
from eos.serde import BytesSerde
from eos.topology import SubTopology
from eos.worker.plans import OffsetReset, SkipReason
from eos.worker.progress import CommitMetadata
from transactions import Committed


class FakeAdmin:
    def __init__(self, committed, ends, earliest, metadata=None, topic_ids=None, high=None):
        self.committed, self.ends, self.earliest = committed, ends, earliest
        self.metadata, self.ids = metadata or {}, topic_ids or {}
        self.high = high or {}  # high watermarks where above the last stable offset

    def group_commits(self, group, tps, stable=True, timeout=30):
        return {tp: Committed(self.committed.get(tp), self.metadata.get(tp)) for tp in tps}

    def end_offsets(self, tps, committed=True, timeout=30):
        return {tp: self.ends[tp] if committed else self.high.get(tp, self.ends[tp]) for tp in tps}

    def earliest_offsets(self, tps, timeout=30):
        return {tp: self.earliest.get(tp, 0) for tp in tps}

    def topic_ids(self, topics, timeout=30):
        return {t: self.ids.get(t) for t in topics}


def sub(inputs, name="s", output="out"):
    b = BytesSerde()
    return SubTopology(name, tuple(inputs), output, b, b, b, b, processor_factory=object)


def test_plans_from_committed_to_last_stable_offset_capped_and_skips_idle_tasks():
    admin = FakeAdmin(committed={("a", 0): 100, ("a", 1): 50, ("a", 2): None},
                      ends={("a", 0): 100, ("a", 1): 500, ("a", 2): 30}, earliest={("a", 2): 20})
    planner = Planner(admin, EosConfig("app", "b", max_records_per_batch=200), {"s": sub(["a"])}, {"a": 3})
    plans = planner.plan(batch=7)
    got = [(p.task.partition, [(r.start, r.end) for r in p.ranges]) for p in plans]
    assert got == [(1, [(50, 250)]), (2, [(20, 30)])]
    assert all(p.batch == 7 for p in plans)


def test_a_runs_first_batch_is_capped_smaller_then_batches_take_the_full_cap():
    admin = FakeAdmin(committed={("a", 0): 0}, ends={("a", 0): 100_000}, earliest={})
    planner = Planner(admin, EosConfig("app", "b", max_records_per_batch=20_000, first_batch_max_records=3_000),
                      {"s": sub(["a"])}, {"a": 1})
    [first] = planner.plan(0)
    assert (first.ranges[0].start, first.ranges[0].end) == (0, 3_000) and first.behind == {("a", 0)}
    admin.committed[("a", 0)] = 3_000
    [second] = planner.plan(1)
    assert (second.ranges[0].start, second.ranges[0].end) == (3_000, 23_000)
    # a first-batch cap above the batch cap changes nothing
    planner = Planner(admin, EosConfig("app", "b", max_records_per_batch=2_000), {"s": sub(["a"])}, {"a": 1})
    assert planner.plan(0)[0].ranges[0].end == 5_000


def test_first_batch_plans_say_so_and_plans_name_the_grouping_last_committed():
    """A run's first plans are marked (a unit then commits after its first task); each plan names the
    `tasks_per_transaction` of its task's last commits, which a unit of another grouping fences first."""
    tps = [("a", p) for p in range(8)]
    admin = FakeAdmin(committed=dict.fromkeys(tps, 0), ends=dict.fromkeys(tps, 100_000), earliest={},
                      metadata={("a", 0): CommitMetadata(5, "tok", grouping=2).encode(),
                                ("a", 1): CommitMetadata(5, "tok").encode(), ("a", 2): "written by another tool"})
    cfg = EosConfig("app", "b", max_records_per_batch=20_000, first_batch_max_records=3_000, tasks_per_transaction=4,
                    size_backlog_batches=False)
    planner = Planner(admin, cfg, {"s": sub(["a"])}, {"a": 8})
    first = planner.plan(0)
    assert {p.ranges[0].end for p in first} == {3_000} and all(p.first_batch for p in first)
    assert [p.last_groupings for p in first[:4]] == [frozenset({2}), frozenset({1}), frozenset(), frozenset()]
    second = planner.plan(1)
    assert {p.ranges[0].end for p in second} == {20_000} and not any(p.first_batch for p in second)


def test_co_partitioned_inputs_form_one_task_per_partition_index():
    admin = FakeAdmin(committed={("a", 0): 0, ("b", 0): 5}, ends={("a", 0): 10, ("b", 0): 5}, earliest={})
    plans = Planner(admin, EosConfig("app", "b"), {"s": sub(["a", "b"])}, {"a": 1, "b": 1}).plan(0)
    assert len(plans) == 1 and [(r.topic, r.start, r.end) for r in plans[0].ranges] == [("a", 0, 10), ("b", 5, 5)]


def test_a_topic_read_by_several_subtopologies_commits_under_one_group_per_reader():
    from eos.driver.checks import check_topics
    from eos.topology import offset_groups, topic_groups

    class Admin:
        bootstrap_servers = "b"

        def partition_counts(self, topics):
            return dict.fromkeys(topics, 1)

    b = BytesSerde()
    subs = {"a": SubTopology("a", ("in",), "x", b, b, b, b, processor_factory=object),
            "b": SubTopology("b", ("in", "other"), "y", b, b, b, b, processor_factory=object)}
    assert check_topics(Admin(), subs)["in"] == 1  # allowed: each reader commits its own progress
    # the first reader keeps the application's group (adding a reader never moves it), the next gets its own
    assert offset_groups(subs, "app") == {("a", "in"): "app", ("b", "in"): "app.b", ("b", "other"): "app"}
    assert topic_groups(subs, "app") == {"in": ["app", "app.b"], "other": ["app"]}


def test_records_deleted_by_retention_before_processing_are_skipped_and_recorded():
    admin = FakeAdmin(committed={("a", 0): 100}, ends={("a", 0): 500}, earliest={("a", 0): 300})
    [plan] = Planner(admin, EosConfig("app", "b"), {"s": sub(["a"])}, {"a": 1}).plan(0)
    assert (plan.ranges[0].start, plan.ranges[0].end) == (300, 500)
    assert plan.resets == {("a", 0): OffsetReset(100, 300, SkipReason.RETENTION)}


def test_a_recreated_topic_is_read_from_its_start_not_from_the_old_committed_offset():
    old = CommitMetadata(5, "tok", "old-id").encode()
    for ends in ({("a", 0): 50}, {("a", 0): 5000}):  # smaller than, or grown past, the old committed offset
        admin = FakeAdmin(committed={("a", 0): 1000}, ends=ends, earliest={("a", 0): 0},
                          metadata={("a", 0): old}, topic_ids={"a": "new-id"})
        [plan] = Planner(admin, EosConfig("app", "b", max_records_per_batch=100), {"s": sub(["a"])}, {"a": 1}).plan(0)
        assert (plan.ranges[0].start, plan.ranges[0].end) == (0, 50 if ends[("a", 0)] == 50 else 100)
        assert plan.resets == {("a", 0): OffsetReset(1000, 0, SkipReason.RECREATED)}
        assert plan.topic_ids == {"a": "new-id"}


def test_a_committed_offset_past_the_end_starts_over_per_auto_offset_reset():
    admin = FakeAdmin(committed={("a", 0): 1000}, ends={("a", 0): 40}, earliest={("a", 0): 10})
    [plan] = Planner(admin, EosConfig("app", "b"), {"s": sub(["a"])}, {"a": 1}).plan(0)
    assert plan.ranges[0].start == 10 and plan.resets[("a", 0)].reason == SkipReason.RECREATED
    latest = Planner(admin, EosConfig("app", "b", auto_offset_reset="latest"), {"s": sub(["a"])}, {"a": 1}).plan(0)
    assert latest == []  # starts at the end: nothing to read yet


def test_a_plan_names_the_producer_that_last_committed_its_task_when_its_inputs_agree():
    def meta(token):
        return CommitMetadata(producer=token).encode()

    admin = FakeAdmin(committed={("a", 0): 5, ("b", 0): 5, ("a", 1): 5, ("b", 1): 5, ("a", 2): None, ("b", 2): 5},
                      ends={(t, p): 9 for t in "ab" for p in range(3)}, earliest={},
                      metadata={("a", 0): meta("tok0"), ("b", 0): meta("tok0"), ("a", 1): meta("tok1"),
                                ("b", 1): meta("other"), ("b", 2): meta("tok2")})
    plans = Planner(admin, EosConfig("app", "b"), {"s": sub(["a", "b"])}, {"a": 3, "b": 3}).plan(0)
    # one transaction commits a task's inputs: two tokens mean offsets written by something else; nothing
    # committed on one input leaves the other's token
    assert [p.last_producer for p in plans] == ["tok0", None, "tok2"]
    admin.metadata = {}
    assert {p.last_producer for p in Planner(admin, EosConfig("app", "b"), {"s": sub(["a", "b"])},
                                             {"a": 3, "b": 3}).plan(0)} == {None}


def test_a_batch_right_after_a_commit_is_planned_from_it_though_the_group_still_shows_the_offsets_before():
    # The group coordinator takes a transaction's offsets in when its commit marker arrives, a moment after the
    # producer's commit returned: a plan made at once may still read the offsets before the batch.
    from eos.topology import TaskId
    from eos.worker.plans import TaskResult, TaskStatus

    admin = FakeAdmin(committed={("a", 0): 100, ("a", 1): 100}, ends={("a", 0): 1_000, ("a", 1): 300},
                      earliest={}, topic_ids={"a": "id-1"})
    planner = Planner(admin, EosConfig("app", "b", max_records_per_batch=200, first_batch_max_records=200),
                      {"s": sub(["a"])}, {"a": 2})
    planner.plan(0)

    def committed(partition, offset, status=TaskStatus.COMMITTED):
        return TaskResult(task=TaskId("s", partition), batch=0, status=status,
                          committed_offsets={("a", partition): offset})

    planner.observe([committed(0, 300), committed(1, 300)])
    plans = planner.plan(1)  # the group still shows 100 for both
    assert [(p.task.partition, p.ranges[0].start, p.ranges[0].end) for p in plans] == [(0, 300, 500)]
    assert planner.lag == {("a", 0): 700, ("a", 1): 0}  # partition 1 is done: no task planned for it
    admin.committed[("a", 0)] = 500  # once the group shows a later offset, it wins
    assert planner.plan(2)[0].ranges[0].start == 500
    # a batch that did not commit teaches nothing; nor does a commit to an earlier incarnation of the topic
    planner.observe([committed(0, 900, TaskStatus.FENCED)])
    assert planner.plan(3)[0].ranges[0].start == 500
    planner.observe([committed(0, 900)])
    admin.ids["a"] = "id-2"
    planner.refresh_topic_ids()
    assert planner.plan(4)[0].ranges[0].start == 500


def test_what_one_reader_of_a_topic_committed_never_moves_another_readers_plan():
    # Two sub-topologies read topic "a", each committing its progress under its own group: the first reader's
    # commit says nothing of the second's (planned from it, the second would find its partition done and stall)
    from eos.topology import TaskId
    from eos.worker.plans import TaskResult, TaskStatus

    b = BytesSerde()
    subs = {"s": SubTopology("s", ("a",), "x", b, b, b, b, processor_factory=object),
            "t": SubTopology("t", ("a",), "y", b, b, b, b, processor_factory=object)}
    admin = FakeAdmin(committed={("a", 0): 0}, ends={("a", 0): 500}, earliest={})
    planner = Planner(admin, EosConfig("app", "b", max_records_per_batch=1_000), subs, {"a": 1})
    assert [p.task.subtopology for p in planner.plan(0)] == ["s", "t"]
    planner.observe([TaskResult(task=TaskId("s", 0), batch=0, status=TaskStatus.COMMITTED,
                                committed_offsets={("a", 0): 500})])
    [plan] = planner.plan(1)  # the group of "s" does not show 500 yet; "t" has committed nothing
    assert (plan.task.subtopology, plan.ranges[0].start, plan.ranges[0].end) == ("t", 0, 500)


def test_batches_behind_a_backlog_are_sized_to_take_the_trigger_interval():
    admin = FakeAdmin(committed={("a", 0): 0, ("a", 1): 0}, ends={("a", 0): 10**9, ("a", 1): 10**9}, earliest={})
    cfg = EosConfig("app", "b", trigger_interval=1.0, max_records_per_batch=300_000, first_batch_max_records=4_000)
    planner = Planner(admin, cfg, {"s": sub(["a"])}, {"a": 2})

    def sizes(batch: int, seconds: float) -> list[int]:
        plans = planner.plan(batch)
        planner.time_batch(plans, seconds)
        return [r.end - r.start for p in plans for r in p.ranges]

    assert sizes(0, 9.0) == [4_000, 4_000]  # the first batch starts the workers: its time does not count
    assert sizes(1, 0.5) == [50_000, 50_000]  # no backlog batch timed yet
    assert sizes(2, 0.1) == [100_000, 100_000]  # at most doubled per batch
    assert sizes(3, 0.8) == [200_000, 200_000]
    assert sizes(4, 1.0) == [250_000, 250_000]  # took the interval: kept
    assert sizes(5, 0.2) == [250_000, 250_000]
    assert sizes(6, 30.0) == [300_000, 300_000]  # never past max_records_per_batch
    assert sizes(7, 30.0) == [150_000, 150_000]  # at most halved per batch
    for batch in range(8, 16):
        sizes(batch, 30.0)
    assert planner.backlog_records == 4_000  # never below first_batch_max_records
    # a batch the cap did not hold back says nothing of it
    admin.ends = {("a", 0): 10, ("a", 1): 10}
    admin.committed = {("a", 0): 0, ("a", 1): 0}
    assert sizes(16, 0.001) == [10, 10] and planner.backlog_records == 4_000


def test_the_first_backlog_batch_shares_200000_records_over_the_widest_sub_topologys_partitions():
    """50,000 records per partition up to 4 partitions; on 64, 3,125 each: 200,000 records, not 3.2M in one
    batch without a commit. The floor (first_batch_max_records per partition) is shared the same way."""
    def planner(partitions: int, **settings) -> Planner:
        return Planner(FakeAdmin({}, {}, {}), EosConfig("app", "b", **settings), {"s": sub(["a"])},
                       {"a": partitions})

    assert [planner(p).backlog_records for p in (1, 4, 8, 64)] == [50_000, 50_000, 25_000, 3_125]
    assert [planner(p).backlog_floor for p in (1, 4, 8, 64)] == [5_000, 5_000, 2_500, 312]
    assert planner(64, first_batch_max_records=100_000).backlog_records == 6_250  # the floor
    assert planner(4, max_records_per_batch=20_000).backlog_records == 20_000


def test_fixed_backlog_batches_without_sizing_a_trigger_or_a_clock():
    admin = FakeAdmin(committed={("a", 0): 0}, ends={("a", 0): 10**9}, earliest={})
    for cfg, timed in [(EosConfig("app", "b", size_backlog_batches=False), True),
                       (EosConfig("app", "b", trigger_interval=0), True),
                       (EosConfig("app", "b"), False)]:  # (a test driver's planner)
        planner = Planner(admin, cfg, {"s": sub(["a"])}, {"a": 1}, timed=timed)
        planner.plan(0)
        for batch in (1, 2):
            plans = planner.plan(batch)
            planner.time_batch(plans, 0.01)
            assert [r.end - r.start for p in plans for r in p.ranges] == [cfg.max_records_per_batch]
    assert EosConfig("app", "b").max_records_per_batch == 200_000


def test_unsettled_names_the_applications_own_inputs_with_records_past_the_stable_offset_the_plan_saw():
    # a -> m -> out: m is written and read by the application. Its last batch's commit was answered but its
    # markers not yet written when the plan read m's last stable offset (or the transaction is still open)
    admin = FakeAdmin(committed={("a", 0): 10, ("m", 0): 4}, ends={("a", 0): 10, ("m", 0): 4}, earliest={},
                      high={("a", 0): 12, ("m", 0): 9})
    planner = Planner(admin, EosConfig("app", "b"), {"s1": sub(["a"], "s1", "m"), "s2": sub(["m"], "s2")},
                      {"a": 1, "m": 1})
    assert planner.own_inputs == [("m", 0)]
    assert planner.plan(3) == []  # every plan idle: a run until caught up would have stopped here
    assert planner.unsettled() == [("m", 0)]  # (a's open transaction is someone else's: not waited for)
    admin.ends[("m", 0)] = 9  # the markers are written
    assert planner.unsettled() == [("m", 0)]  # past what the plan saw: plan again
    [plan] = planner.plan(3)
    assert (plan.task.subtopology, plan.ranges[0].start, plan.ranges[0].end) == ("s2", 4, 9)
    assert planner.unsettled() == []
    # an application without such topics asks the broker nothing
    single = Planner(admin, EosConfig("app", "b"), {"s": sub(["a"])}, {"a": 1})
    assert single.own_inputs == [] and single.unsettled() == []


def test_a_run_until_caught_up_waits_for_its_own_topics_only_until_its_bound():
    import time

    from eos.driver.runner import Runner

    class Unsettled:
        def unsettled(self):
            return [("m", 0)]

    assert not Runner._settled(Unsettled(), time.monotonic() + 5)  # plan again
    assert Runner._settled(Unsettled(), time.monotonic() - 0.1)  # a transaction still open: stop as caught up


def test_a_batch_planned_ahead_is_returned_once_without_looking_again_and_a_failed_look_up_leaves_nothing():
    """A run plans its first batch while Spark's context starts (`Planner.plan_ahead`): `plan` returns those
    plans once, for that batch only; the next call (a failed batch planned again, the next batch) looks up."""

    class Counting(FakeAdmin):
        lookups = 0
        fail = False

        def end_offsets(self, tps, committed=True, timeout=30):
            Counting.lookups += 1
            if self.fail:
                raise TimeoutError("no answer from the broker")
            return super().end_offsets(tps, committed, timeout)

    admin = Counting(committed={("a", 0): 0}, ends={("a", 0): 100}, earliest={})
    planner = Planner(admin, EosConfig("app", "b", first_batch_max_records=30), {"s": sub(["a"])}, {"a": 1})
    assert planner.plan_ahead(0) and Counting.lookups == 1
    admin.ends[("a", 0)] = 500  # records that arrive later wait for the next batch, as after any plan
    [ahead] = planner.plan(0)
    assert Counting.lookups == 1 and ahead.first_batch and (ahead.ranges[0].start, ahead.ranges[0].end) == (0, 30)
    [again] = planner.plan(0)  # (the batch failed: planned again, from what the broker says now)
    assert Counting.lookups == 2 and not again.first_batch and again.ranges[0].end == 500
    planner.plan_ahead(4)
    assert [p.batch for p in planner.plan(5)] == [5] and Counting.lookups == 4  # another batch: looked up
    admin.fail = True
    assert not planner.plan_ahead(6)
    with pytest.raises(TimeoutError):
        planner.plan(6)  # nothing was kept: the run's handling of a failed batch sees the error


# ---------------------------------------------------------------- tasks_per_transaction="auto"


def test_auto_makes_a_unit_per_task_slot_only_where_units_then_hold_several_tasks():
    assert [unit_size("auto", tasks, 2, {}) for tasks in (1, 2, 4, 6, 7, 8, 9, 64)] == [1, 1, 1, 1, 4, 4, 5, 32]
    assert [unit_size("auto", 64, slots, {}) for slots in (1, 8, 16, 17, 22, 64)] == [64, 8, 4, 4, 1, 1]
    assert unit_size(3, 64, 2, {}) == 3 and unit_size(1, 64, 2, {4: 64}) == 1  # a number is taken as it is


def test_auto_keeps_the_size_the_tasks_were_last_committed_under():
    """So that an application's unit size never changes by itself (a change is exactly-once only when no
    attempt of the previous run is alive): what its commits record wins over the task slots."""
    assert unit_size("auto", 64, 2, {1: 64}) == 1  # committed one by one (an earlier version's default): kept
    assert unit_size("auto", 8, 64, {4: 8}) == 4
    assert unit_size("auto", 8, 2, {2: 5, 4: 3}) == 2  # a change left half-way: the most common
    assert unit_size("auto", 8, 2, {2: 4, 4: 4}) == 4  # (then the larger)


def test_an_auto_unit_size_is_settled_by_the_first_plan_from_the_commits_it_reads():
    tps = [("a", p) for p in range(8)]
    committed = dict.fromkeys(tps, 0)
    fresh = Planner(FakeAdmin(committed=committed, ends=dict.fromkeys(tps, 50), earliest={}),
                    EosConfig("app", "b"), {"s": sub(["a"])}, {"a": 8})
    assert {p.grouping for p in fresh.plan(0)} == {4} and fresh.groupings == {"s": 4}
    metadata = dict.fromkeys(tps, CommitMetadata(5, "tok").encode())  # committed a task at a time
    kept = Planner(FakeAdmin(committed=committed, ends=dict.fromkeys(tps, 50), earliest={}, metadata=metadata),
                   EosConfig("app", "b"), {"s": sub(["a"])}, {"a": 8})
    assert {p.grouping for p in kept.plan(0)} == {1}


def test_a_plan_made_ahead_under_other_unit_sizes_is_made_again_once_the_task_slots_are_known():
    """The first batch is planned while Spark's context starts, before the task slots are known: a unit's size
    names its transactional id, so plans made for two slots are not run on eight. Once a batch has been
    planned for good, the sizes stay for the run whatever the slots do."""
    tps = [("a", p) for p in range(8)]
    admin = FakeAdmin(committed=dict.fromkeys(tps, 0), ends=dict.fromkeys(tps, 100_000), earliest={})
    cfg = EosConfig("app", "b", first_batch_max_records=3_000, size_backlog_batches=False)
    planner = Planner(admin, cfg, {"s": sub(["a"])}, {"a": 8})
    assert planner.plan_ahead(0)
    planner.set_task_slots(8)
    first = planner.plan(0)
    assert {p.grouping for p in first} == {1}
    assert all(p.first_batch for p in first) and {p.ranges[0].end for p in first} == {3_000}
    planner.set_task_slots(2)
    assert {p.grouping for p in planner.plan(1)} == {1}

    same = Planner(admin, cfg, {"s": sub(["a"])}, {"a": 8})
    assert same.plan_ahead(0)
    ahead = same._ahead
    same.set_task_slots(2)  # (the guess held: the plan made ahead is the one run)
    assert same._ahead is ahead and {p.grouping for p in same.plan(0)} == {4}
