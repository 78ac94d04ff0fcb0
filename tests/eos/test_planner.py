from __future__ import annotations

from eos.config import EosConfig
from eos.driver.planner import Planner
from eos.serde import BytesSerde
from eos.topology import SubTopology


class FakeAdmin:
    def __init__(self, committed, ends, earliest):
        self.committed, self.ends, self.earliest = committed, ends, earliest

    def group_offsets(self, group, tps, stable=True, timeout=30):
        return {tp: self.committed.get(tp) for tp in tps}

    def end_offsets(self, tps, committed=True, timeout=30):
        return {tp: self.ends[tp] for tp in tps}

    def earliest_offsets(self, tps):
        return {tp: self.earliest[tp] for tp in tps}


def sub(inputs):
    b = BytesSerde()
    return SubTopology("s", tuple(inputs), "out", b, b, b, b, processor_factory=object)


def test_plans_from_committed_to_last_stable_offset_capped_and_skips_idle_tasks():
    admin = FakeAdmin(committed={("a", 0): 100, ("a", 1): 50, ("a", 2): None},
                      ends={("a", 0): 100, ("a", 1): 500, ("a", 2): 30}, earliest={("a", 2): 20})
    planner = Planner(admin, EosConfig("app", "b", max_records_per_batch=200), {"s": sub(["a"])}, {"a": 3})
    plans = planner.plan(batch=7)
    got = [(p.task.partition, [(r.start, r.end) for r in p.ranges]) for p in plans]
    assert got == [(1, [(50, 250)]), (2, [(20, 30)])]
    assert all(p.batch == 7 for p in plans)


def test_co_partitioned_inputs_form_one_task_per_partition_index():
    admin = FakeAdmin(committed={("a", 0): 0, ("b", 0): 5}, ends={("a", 0): 10, ("b", 0): 5}, earliest={})
    plans = Planner(admin, EosConfig("app", "b"), {"s": sub(["a", "b"])}, {"a": 1, "b": 1}).plan(0)
    assert len(plans) == 1 and [(r.topic, r.start, r.end) for r in plans[0].ranges] == [("a", 0, 10), ("b", 5, 5)]


def test_a_topic_can_feed_only_one_subtopology():
    import pytest

    from eos.config import ConfigError
    from eos.driver.checks import check_topics

    class Admin:
        bootstrap_servers = "b"

        def partition_counts(self, topics):
            return dict.fromkeys(topics, 1)

    b = BytesSerde()
    subs = {"a": SubTopology("a", ("in",), "x", b, b, b, b, processor_factory=object),
            "b": SubTopology("b", ("in",), "y", b, b, b, b, processor_factory=object)}
    with pytest.raises(ConfigError, match="overwrite each other's offsets"):
        check_topics(Admin(), subs)
