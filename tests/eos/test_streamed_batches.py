"""Streamed batches: a task reading one input partition through a processor reads, processes and produces
its batch in slices (eos.worker.attempt.BatchAttempt.stream), inside the one transaction of the batch.
What it commits must be exactly what a batch held whole commits, whatever the slice size, a crash in the
middle of the slices, or a batch stopped early to keep its transaction short."""

from __future__ import annotations

import time

import pytest

from eos import Application
from eos.errors import ConfigError
from eos.hooks import FaultPoint
from eos.testing import TopologyTestDriver
from eos.worker.attempt import BatchAttempt
from eos.worker.plans import TaskStatus
from transactions.memory import MemoryCluster, MemoryConsumer
from transactions.reader import OffsetRange, read_ranges


def shop(name: str = "shop", slice_records: int = 5_000) -> Application:
    """A stateless step with a filter and a bad record, then a count: two single-input sub-topologies."""
    app = Application(name, batch_slice_records=slice_records)

    @app.process(input="orders", output="enriched", key_serde="string", value_serde="json")
    def enrich(record):
        order = record.value
        if order["qty"] == 0:
            return None  # filtered
        return record.key, {**order, "total": order["qty"] * order["price"]}  # KeyError without a price

    app.count("enriched", "counts", name="counts")
    return app


def orders(n: int) -> list[tuple[str, dict, int]]:
    return [(f"c{i % 7}", {"qty": i % 4, "price": 3} if i % 11 else {"qty": 1}, 1_000 + i) for i in range(n)]


def committed(driver: TopologyTestDriver, lineage: bool = True) -> dict[str, object]:
    """Everything a run committed: outputs with their headers (lineage: the counts' point at offsets of
    `enriched`, which aborted transactions move), dead letters, the count's store."""
    return {"enriched": [(r.key, r.value, r.timestamp, r.headers) for r in driver.records("enriched")],
            "counts": [(r.key, r.value, r.headers if lineage else None) for r in driver.records("counts")],
            "dead": [(d.key, d.error, d.stage) for d in driver.dead_letters()],
            "store": sorted(driver.store("counts-store").all())}


def run(slice_records: int, n: int = 200) -> TopologyTestDriver:
    d = TopologyTestDriver(shop(slice_records=slice_records), wall_clock_ms=0)
    d.pipe_many("orders", orders(n))
    return d


def test_slices_commit_what_a_whole_batch_commits() -> None:
    whole = run(0)  # not streamed
    assert "after_slice" not in whole.steps_reached
    one = run(10**9)  # streamed in one slice: produced in one go, before the batch's top-up looks up
    assert "after_slice" in one.steps_reached
    sliced = run(3)
    assert "after_slice" in sliced.steps_reached
    assert committed(sliced) == committed(whole) == committed(one)
    assert len(committed(whole)["dead"]) == 19 and len(committed(whole)["enriched"]) == 136  # type: ignore[arg-type]
    # one batch per step either way, with the same counts and the first dead letter's error
    for results in (whole.results, sliced.results):
        (first,) = [r for r in results if r.task.subtopology == "enrich" and r.records_in]
        assert (first.records_in, first.records_out, first.dead_letters) == (200, 136, 19)
        assert first.first_dead_letter_error == "KeyError: 'price'"
        assert first.committed_offsets == {("orders", 0): 200}
        assert first.produce_ms > 0 and first.read_ms > 0 and first.process_ms > 0


def test_slices_are_produced_into_the_open_transaction_as_they_gather() -> None:
    """Each slice reaches the transaction before the next records are processed: at every after_slice the
    transaction holds every output so far, and none of them is visible before the commit."""
    app = shop("slices", slice_records=10)
    seen: list[tuple[int, int]] = []
    driver: TopologyTestDriver

    def look(point: FaultPoint) -> None:
        if point.task == "enrich-0":
            pending = [m for m in driver.cluster.logs["enriched"][0] if not m.marker]
            seen.append((len(pending), len(driver.records("enriched"))))

    app.fault_hooks.on("after_slice", look)
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    driver.pipe_many("orders", orders(100))
    assert len(seen) >= 5
    assert all(visible == 0 for _, visible in seen)  # nothing visible before the commit
    assert [n for n, _ in seen] == sorted(n for n, _ in seen) and seen[-1][0] >= 50  # growing in the transaction
    assert len(driver.records("enriched")) == 68


def test_crashes_between_slices_leave_results_exactly_once() -> None:
    """check_exactly_once arms crashes at every step the batches reach, after_slice among them here."""
    inputs = [("orders", key, value, ts) for key, value, ts in orders(300)]
    steps = []
    for seed in range(4):
        driver = TopologyTestDriver(shop("crashy", 4), wall_clock_ms=0)
        report = driver.check_exactly_once(inputs, crashes=10, seed=seed, chunk=40)
        assert len(report.crashes) >= 5
        steps += [c.step for c, _ in report.crashes]
    assert steps.count("after_slice") >= 3


def test_a_crash_in_the_middle_of_the_slices_commits_none_of_them() -> None:
    straight = TopologyTestDriver(shop("straight", 5), wall_clock_ms=0)
    straight.pipe_many("orders", orders(120))
    driver = TopologyTestDriver(shop("straight", 5), wall_clock_ms=0)
    driver.crash_at("after_slice", task="enrich-0")
    driver.crash_at("after_slice", task="counts-0")
    driver.pipe_many("orders", orders(120))
    assert [c.step for c, _ in driver.crashes] == ["after_slice", "after_slice"]
    assert committed(driver, lineage=False) == committed(straight, lineage=False)
    # the crashed attempts' slices sit in aborted transactions, not in what readers see
    raw = [m for m in driver.cluster.logs["enriched"][0] if not m.marker]
    assert len(raw) > len(driver.records("enriched"))


def test_a_batch_whose_transaction_is_open_too_long_stops_and_commits_what_it_processed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With no time left in the transaction (budget 0), every drain stops the batch after its record: the
    batch commits up to there and the rest comes in the batches the planner makes next."""
    whole = run(0)
    monkeypatch.setattr(BatchAttempt, "_open_budget", lambda self: 0.0)
    stopped = run(25)
    assert committed(stopped, lineage=False) == committed(whole, lineage=False)  # (more commit markers)
    enrich = [r for r in stopped.results if r.task.subtopology == "enrich" and r.records_in]
    assert len(enrich) > 3
    assert all(r.status is TaskStatus.COMMITTED for r in enrich)
    ends = [r.committed_offsets[("orders", 0)] for r in enrich]
    assert ends == sorted(ends) and ends[-1] == 200 and ends[0] < 200
    assert sum(r.records_in for r in enrich) == 200


def test_the_budget_leaves_the_commit_its_batch_timeout() -> None:
    app = Application("budget", transaction_timeout_ms=60_000, batch_timeout=30.0)
    attempt = BatchAttempt.__new__(BatchAttempt)
    attempt.config = app.config
    assert attempt._open_budget() == 30.0
    attempt.config = app.config.with_overrides(transaction_timeout_ms=30_000)
    assert attempt._open_budget() == 15.0  # the two close: half the timeout


def test_the_read_deadline_counts_reading_not_the_processing_between_chunks() -> None:
    cluster = MemoryCluster()
    cluster.create_topic("t", 1)
    for i in range(30):
        cluster.append("t", 0, b"k", b"%d" % i, [], None)
    consumer = MemoryConsumer(cluster, "g")
    chunks = read_ranges(consumer, [OffsetRange("t", 0, 0, 30)], timeout=0.2, batch_size=10)  # type: ignore[arg-type]
    got = []
    for chunk in chunks:
        got.extend(m.offset() for m in chunk)
        time.sleep(0.15)  # processing a slice: 0.45 s in all, past the read's 0.2 s
    assert got == list(range(30))
    # a read abandoned half-way (a batch stopped early) leaves the consumer unassigned when closed
    chunks = read_ranges(consumer, [OffsetRange("t", 0, 0, 30)], timeout=5, batch_size=10)  # type: ignore[arg-type]
    next(chunks)
    chunks.close()
    assert consumer._positions == {}


@pytest.mark.parametrize("bad", [-1, 1.5, "5k"])
def test_a_bad_slice_size_is_refused_saying_what_to_set(bad: object) -> None:
    with pytest.raises(ConfigError, match="batch_slice_records"):
        Application("bad", batch_slice_records=bad)
