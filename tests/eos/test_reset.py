"""Reprocessing after `eos reset` (`eos.driver.reset`, on the test driver's cluster: `driver.reset()`): an input
that a step of the job writes goes to its end, as Kafka Streams' reset tool takes `--intermediate-topics`, so
the steps downstream read each record once; and the audits hold the job to what it wrote since the reset, where
the outputs of the run before it made every record look written twice."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from eos import Application
from eos.audit.report import render
from eos.testing import TopologyTestDriver
from eos.windows import TumblingWindows

MINUTE = 60_000


def chained() -> Application:
    """Orders doubled into a topic of their own, which a windowed count and a join with a table read (each a
    sub-topology of its own, which the window and the join audits replay)."""
    app = Application("again", bootstrap_servers="memory:1")
    app.stream("orders").map_values(lambda v: {**v, "qty": v["qty"] * 2}, name="double").to("doubled")
    (app.stream("doubled").group_by_key().window(TumblingWindows(MINUTE)).count(name="per_minute")
        .to_stream(lambda window, n: f"{window.key}@{window.start}").to("minutes", value_serde="long"))
    (app.stream("doubled").join(app.table("customers"), lambda o, c: {**o, "tier": c["tier"]}, name="tiered")
        .to("tiered"))
    return app


def feed(driver: TopologyTestDriver, first: int, n: int) -> None:
    start = driver.now // MINUTE * MINUTE
    driver.pipe_records([("orders", f"c{i % 3}", {"i": i, "qty": i}, start + i * 1_000)
                         for i in range(first, first + n)])


def test_a_reset_reprocesses_each_record_once_downstream_and_the_audits_hold_the_new_run_to_its_own_outputs():
    driver = TopologyTestDriver(chained(), partitions=2)
    driver.pipe_records([("customers", f"c{i}", {"tier": i}) for i in range(3)])
    feed(driver, 0, 30)
    first = {t: sorted(map(repr, (r.value for r in driver.records(t)))) for t in ("doubled", "tiered")}
    minutes = {r.key: r.value for r in driver.records("minutes")}

    plan = driver.reset()
    assert plan.starts == {"orders": "earliest", "doubled": "latest", "customers": "earliest"}
    assert any("doubled: written by a step of the job and read by another, so read from their end" in n
               for n in plan.notes)
    assert {t for t, _ in plan.outputs_from} == {"doubled", "minutes", "tiered", "again-dlq"}
    assert ("  create the lineage ledger again-ledger again, with where the job's outputs end now (again-dlq, "
            "doubled, minutes, tiered): the audits read what the next runs write after that") in plan.lines()
    # the same results again, after the first run's; each doubled order read once by the steps after it
    assert {t: sorted(map(repr, (r.value for r in driver.records(t)))) for t in first} == {
        t: sorted(v * 2) for t, v in first.items()}
    assert {r.key: r.value for r in driver.records("minutes")} == minutes  # (each window's last count, the same)
    assert len(driver.records("minutes")) == 2 * 30

    feed(driver, 30, 6)  # and on from there
    reports = driver.audit()
    assert sorted((r.mode, r.verdict, r.skipped) for r in reports) == [
        ("join", "PASS", None), ("lineage", "PASS", None), ("lineage", "PASS", None), ("lineage", "PASS", None),
        ("window", "PASS", None)], [(r.mode, r.skipped, r.lineage or r.window or r.join) for r in reports]
    by_mode = {(r.mode, tuple(r.inputs)): r for r in reports}
    assert by_mode[("lineage", ("orders",))].lineage.expected == 36
    assert by_mode[("lineage", ("orders",))].before_reset > 30  # (the first run's doubled orders and markers)
    assert by_mode[("window", ("doubled",))].window.input_records == 36
    assert by_mode[("join", ("doubled", "customers"))].join.output_records == 36
    out = io.StringIO()
    render(by_mode[("lineage", ("orders",))], Console(file=out, width=200))
    assert "output offsets before the last eos reset (not this run's: left out)" in out.getvalue()


@pytest.mark.no_audit  # (the doubled orders read twice on purpose: the audit says so, a FAIL)
def test_an_intermediate_topic_read_again_on_request_is_processed_twice_and_the_audit_says_so():
    driver = TopologyTestDriver(chained(), partitions=1)
    driver.pipe_records([("customers", "c0", {"tier": 0})])
    feed(driver, 0, 4)
    counts = {r.key: r.value for r in driver.records("minutes")}
    plan = driver.reset(inputs={"doubled": "earliest"})
    assert plan.starts["doubled"] == "earliest" and "doubled" not in {t for t, _ in plan.outputs_from}
    # the old doubled orders and the new ones, counted each
    assert {r.key: r.value for r in driver.records("minutes")} == {k: 2 * n for k, n in counts.items()}
    verdicts = {(r.mode, tuple(r.inputs)): r.verdict for r in driver.audit()}
    assert verdicts[("lineage", ("orders",))] == "FAIL"  # (each order twice in "doubled" since the reset)


def test_a_reset_to_the_end_skips_what_is_there_and_the_audits_say_where_the_job_started():
    driver = TopologyTestDriver(chained(), partitions=2)
    feed(driver, 0, 10)
    driver.reset(to="latest")
    assert len(driver.records("doubled")) == 10  # (nothing read again)
    feed(driver, 10, 5)
    reports = driver.audit()
    assert all(r.verdict == "PASS" for r in reports), [(r.mode, r.lineage or r.window) for r in reports]
    lineage = next(r for r in reports if r.mode == "lineage" and r.inputs == ["orders"])
    assert (lineage.lineage.expected, lineage.lineage.not_read) == (5, 10)


def test_a_reset_wipes_the_drivers_rocksdb_stores_and_counts_from_scratch(tmp_path):
    app = Application("kept", bootstrap_servers="memory:1")
    app.stream("in").group_by_key().count(name="n").to_stream().to("out", value_serde="long")
    with TopologyTestDriver(app, partitions=2, state_dir=tmp_path) as driver:
        driver.pipe_many("in", [("a", 1), ("a", 2), ("b", 3)])
        assert (tmp_path / "kept" / "n-0").is_dir()
        plan = driver.reset()
        assert plan.local_state == [tmp_path / "kept"]
        driver.pipe("in", "a", 4)
        assert [(r.key, r.value) for r in driver.records("out")][3:] == [("a", 1), ("a", 2), ("b", 1), ("a", 3)]
        assert driver.store("n-store").get("a") == 3


def test_a_job_run_without_lineage_gets_the_resets_record_too_for_its_window_audit():
    app = Application("untraced", bootstrap_servers="memory:1", lineage=False)
    app.stream("views").group_by_key().window(TumblingWindows(MINUTE)).count(name="per_minute").to_stream().to("m")
    with TopologyTestDriver(app) as driver:
        feed_views = [("views", "u", {"i": i}, driver.now // MINUTE * MINUTE + i) for i in range(5)]
        driver.pipe_records(feed_views)
        driver.reset()
        (window,) = [r for r in driver.audit() if r.mode == "window"]
        assert (window.verdict, window.window.output_records, window.before_reset) == ("PASS", 5, 6)
