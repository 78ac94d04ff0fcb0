"""`TopologyTestDriver.audit()`: `eos audit app` of what the test driver committed, reading its in-memory
cluster by the address that names it, as the audits read a broker."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from rich.console import Console

from eos import Application
from eos.audit import audit_joins
from eos.audit.report import render
from eos.origin import ORIGIN_HEADER
from eos.testing import TopologyTestDriver
from eos.windows import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows
from transactions import admin_for, scan_consumer
from transactions.memory import MemoryProducer

BASE = 1_800_000_000_000


def views_job() -> Application:
    """Views re-keyed by page (0-2 outputs each behind the repartition topic), copied, counted per page in
    windows, and enriched with their user's tier."""
    app = Application("audited", bootstrap_servers="unused:9092")
    views = app.stream("views", value_serde="json")
    (views.select_key(lambda k, v: v["page"], name="by_page").repartition(name="pages")
        .flat_map_values(lambda v: [{"n": i} for i in range(v["n"] % 3)], name="some")
        .to("some", value_serde="json"))
    views.to("copies", value_serde="json")
    (views.group_by(lambda k, v: v["page"], name="per_page").window(TumblingWindows(60_000, grace=5_000))
        .count(name="counts").to_stream().to("counts"))
    users = app.table("users", value_serde="json", name="users")
    views.join(users, lambda v, u: {**v, "tier": u["tier"]}, name="enrich").to("enriched", value_serde="json")
    return app


def feed(driver: TopologyTestDriver) -> None:
    driver.pipe_many("users", [(f"u{i}", {"tier": i % 3}) for i in range(10)])
    driver.pipe_many("views", [(f"u{i % 10}", {"n": i, "page": f"p{i % 5}"}, BASE + i * 1_000) for i in range(300)])


@pytest.mark.no_audit  # (it forges committed records)
def test_the_driver_audits_every_step_window_and_join_it_committed_and_a_copy_fails():
    with TopologyTestDriver(views_job(), partitions=2) as driver:
        feed(driver)
        reports = driver.audit()
        assert [(r.mode, r.verdict, r.skipped) for r in reports] == [
            ("lineage", "PASS", None), ("window", "PASS", None), ("join", "PASS", None)]
        (lineage, window, join) = reports
        # (one step reads both topics, for the join, and writes both repartition topics and two outputs)
        assert lineage.outputs == ["copies", "enriched", "some", "counts"]
        assert lineage.lineage.output_records == 300 + 300 + (0 + 1 + 2) * 100 + 300
        assert lineage.lineage.runs_checked and lineage.lineage.ledger
        assert window.window.windows_expected > 0 and join.join.expected == 300
        # a second copy of one committed output, as a writer outside the job's transactions would make
        record = driver.records("copies")[7]
        forger = MemoryProducer(driver.cluster, "forger")
        forger.init()
        forger.begin()
        forger.produce("copies", b'{"forged": true}', record.key.encode(), partition=record.partition,
                       headers=[(ORIGIN_HEADER, record.headers[ORIGIN_HEADER])])
        forger.commit()
        (found, *_) = driver.audit()
        assert found.verdict == "FAIL" and found.lineage.duplicates == 1, found.lineage


@pytest.mark.no_audit  # (it leaves a transaction open)
def test_a_transaction_left_open_fails_the_audits_that_read_it_after_one_wait(monkeypatch):
    """A transaction whose markers are still being written is waited for before an audit reads a topic's end
    (`KafkaAdmin.settled_ends`); one left open is waited out once for all of `eos audit app`'s reports, not once
    per read of the topic (the lineage audit and the window audit both read the counts, and both check them
    for open transactions)."""
    import transactions.memory as memory

    reads = [0]
    waits: list[int] = []  # per `settled_ends` call that read more than once: its reads
    end_offsets, settled = memory.MemoryAdmin.end_offsets, memory.settled_ends

    def counted(self, partitions, *, committed=True, timeout=30.0):
        reads[0] += committed
        return end_offsets(self, partitions, committed=committed, timeout=timeout)

    def settled_ends(admin, partitions, **kw):
        before = reads[0]
        try:
            return settled(admin, partitions, **{**kw, "within": 0.2})
        finally:
            if reads[0] - before > 1:
                waits.append(reads[0] - before)

    monkeypatch.setattr(memory.MemoryAdmin, "end_offsets", counted)
    monkeypatch.setattr(memory, "settled_ends", settled_ends)
    with TopologyTestDriver(views_job(), partitions=2) as driver:
        feed(driver)
        assert [r.verdict for r in driver.audit()] == ["PASS"] * 3 and waits == []
        writer = MemoryProducer(driver.cluster, "writer")
        writer.init()
        writer.begin()
        writer.produce("counts", b"1", b"p0", partition=0)  # produced, never committed nor aborted
        lineage, window, _ = driver.audit()
        assert len(waits) == 1  # one wait ran out; every later read of the partition's end was answered at once
        for report in (lineage, window):
            assert report.verdict == "FAIL" and report.transactions.open_transactions == 1
            assert report.transactions.samples[0]["topic"] == "counts" and report.violations == 1
        writer.abort()
        assert [r.verdict for r in driver.audit()] == ["PASS"] * 3


def test_the_audit_passes_when_batches_crash_at_every_step():
    for step in ("after_read", "after_produce", "before_commit", "after_commit"):
        with TopologyTestDriver(views_job(), partitions=2) as driver:
            driver.crash_at(step, batch=1)
            driver.crash_at(step, batch=2)
            feed(driver)
            assert len(driver.crashes) == 2 and [r.verdict for r in driver.audit()] == ["PASS"] * 3, step


def test_an_address_of_an_in_memory_cluster_reads_that_cluster_and_nothing_else():
    with TopologyTestDriver(views_job()) as driver:
        feed(driver)
        address = driver.cluster.bootstrap_servers
        assert address.startswith("memory://")
        assert admin_for(address).partition_counts(["views", "nope"]) == {"views": 1, "nope": None}
        with pytest.raises(ValueError, match="read_committed only"):
            scan_consumer(address, "read_uncommitted")
    with pytest.raises(ValueError, match="names no in-memory cluster of this process"):
        admin_for("memory://gone")


def test_a_job_run_without_lineage_has_its_lineage_and_join_audits_reported_not_checked_and_why():
    """Its outputs carry no origin and it writes no ledger: those audits say so (not a FAIL over every output);
    its window audits, which need neither, still run."""
    app = Application("untraced", bootstrap_servers="unused:9092", lineage=False)
    views = app.stream("views", value_serde="json")
    (views.group_by(lambda k, v: v["page"], name="per_page").window(TumblingWindows(60_000, grace=5_000))
        .count(name="counts").to_stream().to("counts"))
    users = app.table("users", value_serde="json", name="users")
    views.join(users, lambda v, u: {**v, "tier": u["tier"]}, name="enrich").to("enriched", value_serde="json")
    with TopologyTestDriver(app, partitions=2) as driver:
        feed(driver)
        reports = driver.audit()
        (joins,) = audit_joins(app, bootstrap_servers=driver.cluster.bootstrap_servers)  # (eos audit join)
    assert joins.mode == "join" and joins.verdict == "PASS" and "lineage=False" in joins.skipped
    assert [(r.mode, r.verdict, bool(r.skipped)) for r in reports] == [  # (a lineage audit per sub-topology)
        ("lineage", "PASS", True), ("lineage", "PASS", True), ("window", "PASS", False), ("join", "PASS", True)]
    assert "lineage=False" in reports[0].skipped and reports[0].skipped == reports[1].skipped == reports[3].skipped
    assert reports[2].window.windows_expected > 0 and reports[2].window.output_records > 0


def test_two_steps_reading_one_topic_into_one_topic_are_reported_not_checked_and_a_fused_pair_is_audited():
    """Two sub-topologies that read the same input and write the same output give the outputs of one input
    record the same origin: the lineage audit cannot tell a copy from the other step's output, so it says so
    for both rather than call them duplicates; another step of that input, with its own output, is audited.
    The same two steps on one stream are one sub-topology, its outputs numbered apart, and audited."""
    app = Application("alike", bootstrap_servers="unused:9092")
    app.stream("events", value_serde="json", name="all").to("alerts")
    app.stream("events", value_serde="json", name="big").filter(lambda k, v: v["n"] > 2, name="over").to("alerts")
    app.stream("events", value_serde="json", name="counted").group_by_key().count(name="per_key").to_stream().to(
        "counts")
    fused = Application("fused", bootstrap_servers="unused:9092")
    events = fused.stream("events", value_serde="json")
    events.to("alerts")
    events.filter(lambda k, v: v["n"] > 2, name="over").to("alerts")
    lineage = {}
    for job in (app, fused):
        with TopologyTestDriver(job) as driver:
            driver.pipe_many("events", [(f"k{n % 2}", {"n": n}) for n in range(5)])
            assert len(driver.records("alerts")) == 7  # 5 + 2
            lineage[job.config.application_id] = [r for r in driver.audit() if r.mode == "lineage"]
    alike = lineage["alike"]
    assert [(r.inputs, r.outputs, r.verdict, bool(r.skipped)) for r in alike] == [
        (["events"], ["alerts"], "PASS", True), (["events"], ["alerts"], "PASS", True),
        (["events"], ["counts"], "PASS", False)]
    assert alike[0].skipped.startswith("sub-topology 'over' too reads 'events' and writes 'alerts', so the outputs "
                                       "both make of one input record carry the same origin")
    assert "read the topic once (one stream, its steps fused)" in alike[1].skipped and "'all'" in alike[1].skipped
    assert (alike[2].lineage.expected, alike[2].lineage.output_records) == (5, 5)
    (fused_report,) = lineage["fused"]
    assert fused_report.verdict == "PASS" and not fused_report.skipped
    assert (fused_report.lineage.expected, fused_report.lineage.output_records) == (5, 7)


@pytest.mark.no_audit  # (it forges a committed record)
def test_steps_of_other_inputs_writing_one_topic_are_each_audited_on_their_own_records():
    """Two steps that read other topics and write one: each audit held the other's records for outputs of
    inputs it never read, and failed a correct job. Each leaves them to the other's audit, counted apart, and
    still fails on a copy of one of its own."""
    app = Application("ledger", bootstrap_servers="unused:9092")
    app.stream("payments").map_values(lambda v: v * 100, name="cents").to("movements")
    app.stream("refunds").filter(lambda k, v: v > 1, name="big").map_values(lambda v: -v, name="negative").to(
        "movements")
    with TopologyTestDriver(app, partitions=2) as driver:
        driver.pipe_records([*[("payments", f"p{i}", i) for i in range(5)], *[("refunds", f"r{i}", i)
                                                                              for i in range(4)]])
        assert sorted(r.value for r in driver.read("movements")) == [-3, -2, 0, 100, 200, 300, 400]
        reports = [r for r in driver.audit() if r.mode == "lineage"]
        assert [(r.inputs, r.verdict, r.skipped) for r in reports] == [(["payments"], "PASS", None),
                                                                       (["refunds"], "PASS", None)]
        assert [(r.lineage.expected, r.lineage.output_records, r.lineage.other_steps, r.lineage.filtered)
                for r in reports] == [(5, 5, 2, 0), (4, 2, 5, 2)]
        shown = StringIO()
        render(reports[0], Console(file=shown, width=200))
        assert "outputs of the job's other steps to the same topic" in shown.getvalue()
        (copy,) = [m for m in driver.cluster.records("movements", None) if m.value() == b"-3"]
        forger = MemoryProducer(driver.cluster, "forger")
        forger.init()
        forger.begin()
        forger.produce("movements", copy.value(), copy.key(), partition=copy.partition(), headers=copy.headers())
        forger.commit()
        payments, refunds = [r for r in driver.audit() if r.mode == "lineage"]
        assert payments.verdict == "PASS" and (refunds.verdict, refunds.lineage.duplicates) == ("FAIL", 1)


def test_records_others_write_to_a_topic_the_job_writes_and_reads_are_its_input_not_unexpected_outputs():
    """A step corrects rows of a table the job reads, whose topic other systems write too: a record there
    without an origin is input of the job (the table's), not an output of the correcting step without one."""
    app = Application("fixes", bootstrap_servers="unused:9092")
    app.stream("fixes", value_serde="json", name="fixes").map_values(lambda v: {"tier": v["tier"]}, name="fix").to(
        "customers")
    customers = app.table("customers", value_serde="json", name="customers")
    app.stream("orders", value_serde="json", name="orders").join(
        customers, lambda order, c: {**order, "tier": c["tier"]}, name="enrich").to("enriched")
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("customers", [("c1", {"tier": "gold"}), ("c2", {"tier": "gold"})])
        driver.pipe("fixes", "c1", {"tier": "basic"})
        driver.pipe_many("orders", [("c1", {"id": 1}), ("c2", {"id": 2})])
        assert [r.value["tier"] for r in driver.read("enriched")] == ["basic", "gold"]
        reports = {r.outputs[0]: r for r in driver.audit() if r.mode == "lineage"}
    fix = reports["customers"]
    assert fix.verdict == "PASS" and (fix.lineage.written_by_others, fix.lineage.expected) == (2, 1)
    assert fix.lineage.unexpected == 0 and reports["enriched"].verdict == "PASS"


@pytest.mark.no_audit  # (it forges committed records)
@pytest.mark.parametrize("windows, emit", [(TumblingWindows(60_000, grace=5_000), "update"),
                                           (TumblingWindows(60_000, grace=5_000), "final"),
                                           (SessionWindows(20_000), "update"), (SlidingWindows(20_000), "final")],
                         ids=["tumbling-update", "tumbling-final", "session-update", "sliding-final"])
def test_the_window_audit_checks_results_changed_on_their_way_to_their_topic_and_a_copy_fails(windows, emit):
    """A windowed count whose results are mapped to their window's key (Kafka Streams' usual
    `map((window, n) -> KeyValue.pair(window.key(), n))`) and filtered before their topic: the window audit passes
    each expected result through both steps, as the task did, and counts the topic's records against them,
    with batches killed inside their transactions; a record committed twice fails it."""
    app = Application("changed", bootstrap_servers="unused:9092")
    (app.stream("views", value_serde="json").group_by(lambda k, v: v["page"], name="per_page")
        .window(windows, emit=emit).count(name="counts").to_stream()
        .map(lambda window, n: (window.key, {"start": window.start, "n": n}), name="flat")
        .filter(lambda page, row: row["n"] != 2, name="not_two").to("flat"))
    with TopologyTestDriver(app, partitions=2) as driver:
        driver.crash_at("before_commit", batch=3)
        for part in range(3):
            driver.pipe_many("views", [(f"u{i % 10}", {"page": f"p{i % 5}"}, BASE + i * 7_000 + part * 50)
                                       for i in range(part * 40, part * 40 + 40)])
        reports = {r.mode: r for r in driver.audit()}
        window = reports["window"]
        assert driver.crashes and window.verdict == "PASS" and window.skipped is None, window.window
        assert window.window.output_records == len(driver.records("flat")) > 0 and window.window.windows_expected
        assert all(isinstance(r.key, str) and r.value["n"] != 2 for r in driver.records("flat"))
        shown = StringIO()
        render(window, Console(file=shown, width=200))
        text = shown.getvalue()
        assert "unexpected, repeated or wrong results" in text and "update sequences" not in text
        assert "results changed on their way to the topic: each expected one changed alike" in text
        record = driver.records("flat")[-1]
        forger = MemoryProducer(driver.cluster, "forger")
        forger.init()
        forger.begin()
        forger.produce("flat", json.dumps(record.value).encode(), record.key.encode(), partition=record.partition)
        forger.commit()
        window = next(r for r in driver.audit() if r.mode == "window")
        assert window.verdict == "FAIL" and window.window.unexpected == 1, window.window


def test_a_cached_hopping_window_changed_on_its_way_is_reported_not_checked_saying_why():
    """With a record cache, a hopping window's updates are held back: mapped, which window a record is of cannot be
    told, so that audit is not checked, saying why; its final results are whole, and checked."""
    app = Application("cached", bootstrap_servers="unused:9092", cache_max_bytes=1 << 20)
    views = app.stream("views", value_serde="json").group_by_key()
    (views.window(HoppingWindows(60_000, 20_000)).count(name="counts").to_stream()
        .map(lambda window, n: (window.key, n), name="flat").to("flat"))
    (views.window(HoppingWindows(60_000, 20_000), emit="final").count(name="finals").to_stream()
        .map(lambda window, n: (window.key, n), name="flat_finals").to("flat-finals"))
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("views", [(f"u{i % 3}", {}, BASE + i * 5_000) for i in range(30)])
        updates, finals = (next(r for r in driver.audit() if r.mode == "window" and r.outputs == [topic])
                           for topic in ("flat", "flat-finals"))
    assert updates.skipped and "a record cache holds some back" in updates.skipped
    assert (finals.verdict, finals.skipped) == ("PASS", None) and finals.window.windows_expected > 0


@pytest.mark.no_audit  # (it forges a committed record)
def test_a_job_started_at_the_end_of_its_inputs_is_audited_from_where_it_started():
    """auto_offset_reset="latest": an application's first start sets each input partition's offset at its end,
    with where the records start that it starts after in the commit; its first batch writes that range to the
    ledger, and every audit leaves those records out (they are not its input), where the lineage audit called
    them lost and the window and join audits recomputed from them. A record of them in an output fails it."""
    app = Application("late-start", bootstrap_servers="unused:9092", auto_offset_reset="latest")
    views = app.stream("views")
    views.map_values(lambda v: {**v, "seen": True}, name="mark").to("seen")
    views.group_by_key().window(TumblingWindows(60_000)).count(name="per_minute").to_stream().to("minutes")
    app.stream("orders").join(app.table("users"), lambda o, u: [o["i"], u["tier"]], name="enrich").to("enriched")
    app.table("carts").join(app.table("prices"), lambda cart: cart["product"], lambda cart, price: [cart["i"], price],
                            name="priced").to_stream().to("priced")  # (a foreign-key join: two sub-topologies)
    with TopologyTestDriver(app, partitions=2) as driver:
        before = [("users", "u1", {"tier": 1}, BASE), ("prices", "p1", 5, BASE),
                  ("carts", "c1", {"i": 1, "product": "p1"}),
                  ("views", "x", {"i": 99}, BASE, 1),  # (a partition no later record reaches: no batch writes it)
                  *[(t, f"u{i % 2}", {"i": i}, BASE + i) for i in range(10) for t in ("views", "orders")]]
        driver.pipe_records(before, process=False)
        driver.cluster.groups.clear()  # (as if the application started for the first time now, with those there)
        assert sum(driver.planner.initialize_offsets().values()) == 24
        driver.crash_at("before_commit", batch=driver.batch)  # (its first batch, killed inside its transaction)
        driver.pipe_records([("users", "u0", {"tier": 0}, BASE + 100), ("prices", "p2", 7, BASE + 100),
                             ("carts", "c2", {"i": 2, "product": "p2"}), ("carts", "c3", {"i": 3, "product": "p1"}),
                             *[(t, f"u{i % 2}", {"i": i}, BASE + 100 + i) for i in range(10, 16) for t in ("views",
                                                                                                          "orders")]])
        assert driver.crashes and sorted(r.value["i"] for r in driver.read("seen")) == list(range(10, 16))
        assert sorted(r.value for r in driver.records("minutes"))[-2:] == [3, 3]  # (u0 and u1: three each since)
        assert sorted(r.value for r in driver.read("enriched")) == [[10, 0], [12, 0], [14, 0]]  # (u1's row: before)
        assert {r.key: r.value for r in driver.read("priced")} == {"c2": [2, 7], "c3": None}  # (p1's: before)
        reports = driver.audit()
        assert all((r.verdict, r.skipped) == ("PASS", None) for r in reports), [(r.mode, r.skipped) for r in reports]
        assert sorted(r.mode for r in reports).count("join") == 2 and [r.mode for r in reports].count("window") == 1
        assert sum(r.lineage.not_read for r in reports if r.mode == "lineage") == 11 + 11 + 2
        forger = MemoryProducer(driver.cluster, "forger")  # an output of a record the job never read
        forger.init()
        forger.begin()
        (first,) = [m for m in driver.cluster.records("views", 0) if m.offset() == 0]
        forger.produce("seen", b'{"i": 0, "seen": true}', first.key(), partition=0,
                       headers=[(ORIGIN_HEADER, b"views:0:0:0")])
        forger.commit()
        (mark, *_) = [r for r in driver.audit() if r.mode == "lineage" and "seen" in r.outputs]
        assert mark.verdict == "FAIL" and mark.lineage.unexpected == 1, mark.lineage
