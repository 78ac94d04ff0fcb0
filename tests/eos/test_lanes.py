"""Lanes: how the driver deals units out to its batch loops, and what the loops share (`eos.driver.lanes`)."""

from __future__ import annotations

import threading
import time

import pytest

from eos.config import EosConfig
from eos.driver.lanes import LaneBoard, lane_shares
from eos.driver.planner import Planner
from eos.errors import ConfigError
from eos.topology import TaskId
from tests.eos.test_planner import FakeAdmin, sub


def _subs():
    return {"a": sub(["in"], name="a"), "b": sub(["mid"], name="b")}


def test_units_are_dealt_round_robin_over_every_step_and_never_split():
    cfg = EosConfig("app", "b", lanes=2, tasks_per_transaction=2)
    shares = lane_shares(_subs(), {"in": 8, "mid": 4}, cfg)
    assert shares == [frozenset({TaskId("a", 0), TaskId("a", 1), TaskId("a", 4), TaskId("a", 5),
                                 TaskId("b", 0), TaskId("b", 1)}),
                      frozenset({TaskId("a", 2), TaskId("a", 3), TaskId("a", 6), TaskId("a", 7),
                                 TaskId("b", 2), TaskId("b", 3)})]
    # every task in exactly one lane
    assert sum(len(s) for s in shares) == 12 and len(frozenset().union(*shares)) == 12


def test_more_lanes_than_units_leaves_none_empty():
    cfg = EosConfig("app", "b", lanes=8, tasks_per_transaction=32)
    shares = lane_shares({"a": sub(["in"], name="a")}, {"in": 64}, cfg)
    assert [len(s) for s in shares] == [32, 32]


def test_lanes_must_be_positive():
    with pytest.raises(ConfigError, match="lanes must be > 0"):
        EosConfig("app", "b", lanes=0)


def test_a_lanes_planner_plans_and_asks_for_its_own_partitions_only():
    asked = []

    class Admin(FakeAdmin):
        def end_offsets(self, tps, committed=True, timeout=30):
            asked.append(sorted(tps))
            return super().end_offsets(tps, committed, timeout)

    admin = Admin(committed={}, ends={("in", p): 10 for p in range(4)}, earliest={})
    mine = frozenset({TaskId("a", 1), TaskId("a", 3)})
    planner = Planner(admin, EosConfig("app", "b"), {"a": sub(["in"], name="a")}, {"in": 4}, tasks=mine)
    assert [p.task for p in planner.plan(0)] == [TaskId("a", 1), TaskId("a", 3)]
    assert asked == [[("in", 1), ("in", 3)]] and sorted(planner.lag) == [("in", 1), ("in", 3)]
    # batches are sized per partition as for the whole sub-topology, not for the lane's share of it
    whole = Planner(admin, EosConfig("app", "b"), {"a": sub(["in"], name="a")}, {"in": 4})
    assert planner.backlog_records == whole.backlog_records


def test_batch_numbers_are_unique_across_lanes_and_end_at_max_batches():
    board = LaneBoard(2, max_batches=50)
    taken: list[int] = []

    def lane(k: int) -> None:
        while (n := board.take(k)) is not None:
            taken.append(n)
            board.start(n)
            board.end(n, ran=True)

    threads = [threading.Thread(target=lane, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == list(range(50)) and board.halt.is_set()


def test_a_failed_batch_does_not_count_toward_max_batches():
    board = LaneBoard(1, max_batches=1)
    n = board.take(0)
    board.start(n)
    board.end(n, ran=False)
    assert not board.halt.is_set()
    board.start(n)
    board.end(n, ran=True)
    assert board.halt.is_set()


def test_claims_are_kept_from_the_batch_before_the_oldest_in_flight():
    board = LaneBoard(2, None)
    a, b = board.take(0), board.take(1)
    assert board.start(a) == a - 1
    assert board.start(b) == a - 1  # lane 0's batch still runs
    board.end(a, ran=True)
    c = board.take(0)
    assert board.start(c) == b - 1
    board.end(b, ran=True)
    board.end(c, ran=True)
    d = board.take(1)
    assert board.start(d) == d - 1  # alone in flight: as without lanes


def test_caught_up_only_when_every_lane_planned_idle_after_every_lanes_last_batch():
    board = LaneBoard(2, None)
    n = board.take(1)
    board.start(n)
    board.idle(0, time.monotonic())  # lane 0 idle while lane 1's batch may still write its input
    board.end(n, ran=True)
    board.idle(1, time.monotonic())
    assert not board.halt.is_set()
    board.idle(0, time.monotonic())  # lane 0 looked again after that batch ended
    assert board.halt.is_set() and board.caught_up


def test_a_lane_with_work_again_is_not_idle():
    board = LaneBoard(2, None)
    board.idle(0, time.monotonic())
    board.busy(0)
    board.idle(1, time.monotonic())
    assert not board.halt.is_set()


def test_an_error_in_one_lane_halts_all_and_is_kept_first():
    board = LaneBoard(2, None)
    first = RuntimeError("first")
    board.fail(first)
    board.fail(RuntimeError("second"))
    assert board.halt.is_set() and board.error is first
