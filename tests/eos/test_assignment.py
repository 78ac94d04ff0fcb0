"""Placement decisions (pure logic)."""

from __future__ import annotations

from eos.driver.assignor import TaskAssignor, TaskPlacement

ENDS = {"t0": {"s": 1000}, "t1": {"s": 1000}, "t2": {"s": 1000}, "t3": {"s": 1000}}


def placed() -> TaskAssignor:
    p = TaskAssignor(standbys=1, acceptable_lag=50)
    for task, executor in (("t0", "a"), ("t1", "b"), ("t2", "c"), ("t3", "c")):
        p.observe_active(task, executor, f"loc-{executor}", {"s": 1000})
    p.observe_copy("t0", "b", "loc-b", {"s": 990})  # t0's standby on b, 10 records behind
    p.observe_copy("t0", "c", "loc-c", {"s": 100})
    return p


def test_tasks_stay_where_their_state_is():
    p = placed()
    assert p.assign(list(ENDS), ["a", "b", "c"], ENDS) == []
    assert p.active == {"t0": "a", "t1": "b", "t2": "c", "t3": "c"}


def test_a_lost_executors_task_moves_to_the_least_lagging_copy_and_stays_there():
    p = placed()
    p.forget_lost(["b", "c"])
    moves = p.assign(list(ENDS), ["b", "c"], ENDS)
    assert [(m.task, m.source, m.target, m.reason, m.lag) for m in moves] == [("t0", "a", "b", "executor lost", 10)]
    assert p.assign(list(ENDS), ["b", "c"], ENDS) == []  # no second move for balance right after


def test_balance_moves_only_to_caught_up_copies_else_warms_one_up():
    p = placed()
    p.observe_active("t3", "c", "loc-c", {"s": 1000})
    p.observe_copy("x", "d", "loc-d", {})  # a new, empty executor d
    assert p.assign(list(ENDS), ["a", "b", "c", "d"], ENDS) == []  # d has no copy of t2/t3: no move yet
    assert p.warming == {"t2": "d"}
    assert "d" in p.standby_targets("t2", ["a", "b", "c", "d"], ENDS["t2"])  # the warm-up copy is refreshed
    p.observe_copy("t2", "d", "loc-d", {"s": 990})  # caught up
    moves = p.assign(list(ENDS), ["a", "b", "c", "d"], ENDS)
    assert [(m.task, m.target, m.reason) for m in moves] == [("t2", "d", "balance")]


def test_standbys_avoid_the_active_executor_and_prefer_existing_copies():
    p = placed()
    assert p.standby_targets("t0", ["a", "b", "c"], ENDS["t0"]) == ["b"]
    assert p.lag("t0", "b", ENDS["t0"]) == 10 and p.lag("t1", "a", ENDS["t1"]) == 1000


def test_snapshot_shows_each_tasks_active_executor_and_its_standbys_with_their_lag():
    p = placed()
    p.standby_targets("t0", ["a", "b", "c"], ENDS["t0"])
    snap = p.snapshot(ENDS)
    assert snap["t0"] == TaskPlacement(active="a", standbys={"b": 10}, warming={})
    assert snap["t1"].active == "b" and "b" not in snap["t1"].standbys
