"""Task groups: a batch's tasks on one executor shared out among as many Spark tasks as it has slots, by claims
(driver side `eos.driver.groups`, worker side `eos.worker.claims` and `eos.worker.entry.run_member`)."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from eos import Application
from eos.driver.groups import one_result_per_task, place_units_together, share_out
from eos.testing import TopologyTestDriver
from eos.testing.clients import MemoryWorker
from eos.topology import TaskId
from eos.worker.claims import TaskClaims, claim_order, claims_root
from eos.worker.entry import run_member
from eos.worker.plans import GroupMember, StandbyPlan, TaskGroup, TaskPlan, TaskResult, TaskStatus


def plan(partition: int, location: str | None = None, batch: int = 0) -> TaskPlan:
    return TaskPlan(TaskId("count", partition), batch, (), preferred_location=location)


def group_of(*partitions: int, batch: int = 0, members: int = 2) -> TaskGroup:
    return TaskGroup(tuple(plan(p, batch=batch) for p in partitions), batch, "local", members)


# ---------------------------------------------------------------- driver side


def test_a_local_masters_tasks_go_to_one_group_with_a_member_per_slot_and_standbys_stay_alone():
    standby = StandbyPlan(TaskId("count", 0), 0, None, lag=5, budget=1.0)
    items = share_out([plan(0), plan(1), plan(2), plan(3), standby], {None: 2})
    members = [i for i in items if isinstance(i, GroupMember)]
    assert [m.member for m in members] == [0, 1]
    assert members[0].group is members[1].group
    assert [p.task.partition for p in members[0].group.plans] == [0, 1, 2, 3]
    assert standby in items and len(items) == 3


def test_each_executor_gets_its_own_group_at_most_one_member_per_task_and_unplaced_tasks_run_alone():
    a, b = "executor_h_1", "executor_h_2"
    items = share_out([plan(0, a), plan(1, b), plan(2, a), plan(3, None)], {a: 4, b: 4})
    groups = {i.preferred_location: i.group for i in items if isinstance(i, GroupMember)}
    assert {k: [p.task.partition for p in g.plans] for k, g in groups.items()} == {a: [0, 2], b: [1]}
    assert groups[a].members == 2 and groups[b].members == 1  # no more members than tasks
    assert groups[a].key.startswith(a) and groups[a].key != groups[b].key
    assert [i for i in items if isinstance(i, TaskPlan)] == [plan(3, None)]  # no location on a cluster


def test_a_unit_s_tasks_always_go_to_one_spark_task_and_a_group_has_no_more_members_than_units():
    """`tasks_per_transaction` 2: units {0, 1} and {2, 3}. On a local master the group gets a member per unit
    (not per task); tasks without a location on a cluster go one Spark task per unit."""
    def unit(p: TaskPlan) -> str:
        return p.task.transactional_id("app", 2)

    items = share_out([plan(p) for p in range(4)] + [plan(4)], {None: 8}, unit)
    groups = [i.group for i in items if isinstance(i, GroupMember)]
    assert len(groups) == 3 and all(g is groups[0] for g in groups)
    assert groups[0].members == 3  # units {0, 1}, {2, 3}, {4}
    a = "executor_h_1"
    items = share_out([plan(0, a), plan(1, None), plan(2, None), plan(3, None), plan(5, None)], {a: 4}, unit)
    alone = {tuple(p.task.partition for p in i.group.plans) for i in items
             if isinstance(i, GroupMember) and i.group.preferred_location is None}
    assert alone == {(2, 3)}  # one Spark task for the unit; the partial units 1 and 5 are plain tasks
    assert sorted(i.task.partition for i in items if isinstance(i, TaskPlan)) == [1, 5]


def test_a_unit_s_tasks_are_placed_where_its_first_planned_task_is():
    placed = place_units_together([plan(1, "e2"), plan(0, "e1"), plan(2, "e1"), plan(3, "e2")],
                                  lambda p: p.task.transactional_id("app", 2))
    assert [(p.task.partition, p.preferred_location) for p in placed] == [(1, "e2"), (0, "e2"), (2, "e1"),
                                                                          (3, "e1")]


def result(partition: int, status: TaskStatus) -> TaskResult:
    return TaskResult(TaskId("count", partition), 0, status)


def test_one_result_per_task_keeps_a_failure_then_a_commit_and_names_tasks_without_one():
    plans = [plan(0), plan(1), plan(2)]
    results = [result(0, TaskStatus.FENCED), result(0, TaskStatus.COMMITTED), result(1, TaskStatus.NOOP),
               result(1, TaskStatus.FAILED)]
    with capture_logs() as logs:
        kept = one_result_per_task(plans, results)
    assert sorted((r.task.partition, r.status) for r in kept) == [(0, TaskStatus.COMMITTED), (1, TaskStatus.FAILED)]
    assert [e["tasks"] for e in logs if "no result" in e["event"]] == [["count-2"]]


# ---------------------------------------------------------------- worker side: claims


def test_a_member_tries_the_tasks_its_worker_holds_first_then_the_rest_from_the_far_end():
    units = [(plan(p),) for p in range(6)]
    held = {1, 4}
    order = claim_order(units, lambda u: u[0].task.partition in held)
    assert [u[0].task.partition for u in order] == [1, 4, 5, 3, 2, 0]


def test_a_claimed_task_is_skipped_by_siblings_while_held_and_after_it_is_reported(tmp_path):
    group = group_of(0, 1)
    first, second = TaskClaims(tmp_path, "run", GroupMember(group, 0)), TaskClaims(tmp_path, "run",
                                                                                   GroupMember(group, 1))
    done = [result(0, TaskStatus.COMMITTED)]
    with first.claim(str(group.plans[0].task)) as claim:
        assert claim is not None and claim.earlier is None
        with second.claim(str(group.plans[0].task)) as other:
            assert other is None  # held right now
        claim.done(done)
    with second.claim(str(group.plans[0].task)) as other:
        assert other is None  # member 0 reported it
    with first.claim(str(group.plans[0].task)) as again:  # member 0's retry reports what it stored
        assert again is not None and again.earlier == done
    with second.claim(str(group.plans[1].task)) as free:
        assert free is not None and free.earlier is None


def _claim_and_die(root: str, report: bool) -> None:
    group = group_of(0, 1)
    claims = TaskClaims(Path(root), "run", GroupMember(group, 0))
    with claims.claim(str(group.plans[0].task)) as claim:
        assert claim is not None
        if report:
            claim.done([result(0, TaskStatus.COMMITTED)])
        os._exit(0)  # as a killed worker: the claim is never let go of by the process itself


@pytest.mark.parametrize("reported", [False, True])
def test_a_dead_workers_claim_is_free_again_and_only_what_it_reported_stays_its_own(tmp_path, reported):
    child = multiprocessing.get_context("fork").Process(target=_claim_and_die, args=(str(tmp_path), reported))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    group = group_of(0, 1)
    sibling = TaskClaims(tmp_path, "run", GroupMember(group, 1))
    retry = TaskClaims(tmp_path, "run", GroupMember(group, 0))
    with sibling.claim(str(group.plans[0].task)) as claim:
        assert (claim is None) is reported  # reported: the dead member's retry reports it; else anyone runs it
    if reported:
        with retry.claim(str(group.plans[0].task)) as claim:
            assert claim is not None and claim.earlier == [result(0, TaskStatus.COMMITTED)]


def test_claims_of_batches_before_the_previous_one_and_of_other_runs_gone_quiet_are_removed(tmp_path):
    import os
    import time

    from eos.worker.claims import OTHER_RUNS_STALE_S

    for batch in range(4):
        TaskClaims(tmp_path, "old-run", GroupMember(group_of(0, batch=batch), 0))
    TaskClaims(tmp_path, "other-run", GroupMember(group_of(0, batch=7), 0))
    quiet = time.time() - OTHER_RUNS_STALE_S - 60
    os.utime(tmp_path / "old-run", (quiet, quiet))
    for batch in range(4):
        TaskClaims(tmp_path, "run", GroupMember(group_of(0, batch=batch), 0))
    # a run of the same application id that is still going (another cluster, another process of a test suite)
    # keeps its claims: removed under its tasks, they made its members fail and lose what they had reported
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-run", "run"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["2-local", "3-local"]
    with TaskClaims(tmp_path, "other-run", GroupMember(group_of(0, batch=7), 1)).claim("t") as claim:
        assert claim is not None


def test_a_process_removes_the_claims_of_other_applications_that_no_batch_touched_for_an_hour(tmp_path,
                                                                                               monkeypatch):
    import time

    from eos.worker.claims import OTHER_RUNS_STALE_S

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    base = tmp_path / f"eos-claims-{os.getuid()}"
    for app in ("gone-quiet", "long-running", "mine"):
        TaskClaims(base / app, "run", GroupMember(group_of(0, batch=3), 0))
    (base / "someone's-file").write_text("not a directory of claims")
    quiet = time.time() - OTHER_RUNS_STALE_S - 60
    for path in (base / "gone-quiet", base / "gone-quiet" / "run", base / "long-running", base / "mine",
                 base / "mine" / "run", base / "someone's-file"):
        os.utime(path, (quiet, quiet))  # the long-running application's run still adds batches

    assert claims_root("mine") == base / "mine"
    assert sorted(p.name for p in base.iterdir()) == ["long-running", "mine", "someone's-file"]
    with TaskClaims(base / "long-running", "run", GroupMember(group_of(0, batch=3), 1)).claim("t") as claim:
        assert claim is not None


# ---------------------------------------------------------------- worker side: members running a batch


def counting_app(state_dir) -> Application:
    app = Application("groups", "memory:0", state_dir=str(state_dir))
    app.count("clicks", "clicks-per-user", name="clicks")
    return app


def test_members_run_every_task_once_and_a_retried_member_reports_its_results_without_running_again(tmp_path,
                                                                                                   monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the claims go
    monkeypatch.setattr(tempfile, "tempdir", None)
    with TopologyTestDriver(counting_app(tmp_path), partitions=4) as driver:
        driver.pipe_records([("clicks", f"user{i % 8}", b"click") for i in range(40)], process=False)
        plans = tuple(driver.planner.plan(0))
        assert len(plans) == 4
        group = TaskGroup(plans, 0, "local", 2)
        job, a, b = driver.job, driver.worker, MemoryWorker(driver.cluster)

        ran = list(run_member(GroupMember(group, 0), job, 0, "run", a.clients, a.runtimes, in_memory=True))
        assert sorted(r.task.partition for r in ran) == [0, 1, 2, 3]  # no sibling took any meanwhile
        assert {r.status for r in ran} == {TaskStatus.COMMITTED} and sum(r.records_in for r in ran) == 40
        assert list(run_member(GroupMember(group, 1), job, 0, "run", b.clients, b.runtimes, in_memory=True)) == []

        outputs = len(driver.records("clicks-per-user"))
        retried = list(run_member(GroupMember(group, 0), job, 1, "run", b.clients, b.runtimes, in_memory=True))
        assert retried == ran  # reported from the claims: nothing ran again
        assert len(driver.records("clicks-per-user")) == outputs == 40
        counts = {r.key: r.value for r in driver.read("clicks-per-user")}
        assert counts == {f"user{u}": 5 for u in range(8)}
    assert [p.name for p in (tmp_path / f"eos-claims-{os.getuid()}" / "groups" / "run").iterdir()] == ["0-local"]


def test_a_batch_planned_again_after_its_spark_job_failed_runs_its_tasks_instead_of_reporting_the_old_jobs(
        tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    with TopologyTestDriver(counting_app(tmp_path / "state"), partitions=2) as driver:
        driver.pipe_records([("clicks", f"user{i}", b"click") for i in range(10)], process=False)
        plans = driver.planner.plan(0)
        worker = driver.worker
        failed_job = next(i for i in share_out(plans, {None: 1}) if isinstance(i, GroupMember))
        first = list(run_member(failed_job, driver.job, 0, "run", worker.clients, worker.runtimes, in_memory=True))
        assert {r.status for r in first} == {TaskStatus.COMMITTED}
        # The job failed (another Spark task, say), and a new job runs batch 0 again (planned as before).
        again = next(i for i in share_out(plans, {None: 1}) if isinstance(i, GroupMember))
        rerun = list(run_member(again, driver.job, 0, "run", worker.clients, worker.runtimes, in_memory=True))
    assert sorted(r.task.partition for r in rerun) == sorted(r.task.partition for r in first)
    assert {r.status for r in rerun} == {TaskStatus.NOOP}  # ran: found committed; not the old job's results


def test_a_temporary_directory_the_executor_cannot_use_is_a_configuration_error(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(blocker))
    with TopologyTestDriver(counting_app(tmp_path), partitions=2) as driver:
        driver.pipe_records([("clicks", "ann", b"click")], process=False)
        group = TaskGroup(tuple(driver.planner.plan(0)), 0, "local", 1)
        worker = driver.worker
        results = list(run_member(GroupMember(group, 0), driver.job, 0, "run", worker.clients, worker.runtimes,
                                  in_memory=True))
    assert group.plans and [r.status for r in results] == [TaskStatus.FAILED] * len(group.plans)
    assert all(r.failure is not None and "spark.executorEnv.TMPDIR" in r.failure.message for r in results)


def test_a_worker_whose_producer_another_worker_fenced_drops_it_and_no_longer_claims_the_task_first(tmp_path,
                                                                                                     monkeypatch):
    """A task that moved once (a sibling ran out of its own tasks and took it) must not move back and forth: the
    worker it left still holds its fenced producer, and without the plan's `last_producer` both workers would
    take the task for their own every batch, the loser paying a fenced attempt and a new producer."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    with TopologyTestDriver(counting_app(tmp_path / "state"), partitions=4) as driver:
        job, a, b = driver.job, driver.worker, MemoryWorker(driver.cluster)

        def batch(n: int, *shares: tuple[MemoryWorker, tuple[int, ...]],
                  planned: dict[int, TaskPlan] | None = None) -> list[TaskResult]:
            driver.pipe_records([("clicks", f"user{i % 8}", b"click") for i in range(40)], process=False)
            plans = {p.task.partition: p for p in driver.planner.plan(n)}
            (planned if planned is not None else {}).update(plans)
            ran = []
            for worker, partitions in shares:
                group = TaskGroup(tuple(plans[p] for p in partitions), n, f"w{id(worker)}", 1)
                ran += run_member(GroupMember(group, 0), job, 0, "run", worker.clients, worker.runtimes,
                                  in_memory=True)
            assert {r.status for r in ran} == {TaskStatus.COMMITTED}
            return ran

        batch(0, (a, (0, 1, 2, 3)))
        batch(1, (b, (0,)), (a, (1, 2, 3)))  # b takes task 0 over: a's producer of it is fenced
        planned: dict[int, TaskPlan] = {}
        ran = batch(2, (a, (0, 1, 2, 3)), planned=planned)
        txn0 = planned[0].task.transactional_id(job.config.application_id)
        assert planned[0].last_producer == b.clients.cached_producer(txn0).token  # type: ignore[union-attr]
        assert planned[1].last_producer == a.clients.cached_producer(planned[1].task.transactional_id(
            job.config.application_id)).token  # type: ignore[union-attr]
        assert [r.task.partition for r in ran] == [1, 2, 3, 0]  # its own first; task 0 is b's now
        assert [r.batch_attempts for r in ran] == [1, 1, 1, 1]  # no attempt on the fenced producer
        assert a.clients.cached_producer(txn0) is not b.clients.cached_producer(txn0)
        b.close()
        counts = {r.key: r.value for r in driver.read("clicks-per-user")}
    assert counts == {f"user{u}": 15 for u in range(8)}
