"""Where a source starts reading a partition nothing was committed for (`eos.offset_reset`, Kafka Streams'
`AutoOffsetReset` and `Consumed.withOffsetResetPolicy`): the application's policy or a source's own,
"earliest", "latest", "none" or a duration back from the start; and the audits of a job that started so."""

from __future__ import annotations

from datetime import timedelta

import pytest

from eos import Application
from eos.config import EosConfig
from eos.errors import ConfigError
from eos.offset_reset import offset_reset, reset_duration_ms
from eos.testing import TopologyTestDriver
from eos.worker.plans import SkipReason

MINUTE = 60_000


@pytest.mark.parametrize(("given", "policy", "back"), [
    ("earliest", "earliest", None), (" Latest ", "latest", None), ("none", "none", None),
    (timedelta(hours=1), "by_duration:PT1H", 3_600_000), (timedelta(days=2, minutes=1), "by_duration:PT48H1M", None),
    (timedelta(0), "by_duration:PT0S", 0), (timedelta(seconds=1.5), "by_duration:PT1.5S", 1_500),
    ("by_duration:PT1H", "by_duration:PT1H", 3_600_000), ("by_duration:P1DT12H", "by_duration:PT36H", None),
    ("BY_DURATION:pt90m", "by_duration:PT1H30M", 5_400_000), ("by_duration:PT0.25S", "by_duration:PT0.25S", 250),
])
def test_a_policy_has_one_text_form_that_kafkas_consumer_setting_reads_too(given, policy, back):
    assert offset_reset(given) == policy
    assert offset_reset(policy) == policy
    if back is not None:
        assert reset_duration_ms(policy) == back


def test_the_old_consumers_words_are_refused_with_the_ones_they_became():
    with pytest.raises(ConfigError, match="old Kafka consumer's word: 'earliest' says the same"):
        offset_reset("smallest")
    with pytest.raises(ConfigError, match="'latest' says the same"):
        Application("a").stream("clicks", auto_offset_reset="LARGEST")


@pytest.mark.parametrize("given", ["by_duration:", "by_duration:1h", "by_duration:PT", "by_duration:P1H",
                                   "-PT1H", 3_600, None, timedelta(hours=-1)])
def test_anything_else_is_refused_saying_what_a_policy_is(given):
    with pytest.raises(ConfigError) as refused:
        offset_reset(given)
    assert "'earliest', 'latest', 'none'" in str(refused.value) or "goes forward in time" in str(refused.value)


def test_an_unknown_word_says_every_policy():
    with pytest.raises(ConfigError, match="must be 'earliest', 'latest', 'none', or how far back"):
        offset_reset("latests")


def test_the_application_and_each_source_take_a_policy_and_a_bad_one_fails_at_once_naming_where():
    assert Application("a", auto_offset_reset=timedelta(minutes=5)).config.auto_offset_reset == "by_duration:PT5M"
    assert EosConfig("a", "b", auto_offset_reset="by_duration:P1D").auto_offset_reset == "by_duration:PT24H"
    with pytest.raises(ConfigError, match="auto_offset_reset must be"):
        Application("a", auto_offset_reset="soonest")
    app = Application("a")
    with pytest.raises(ConfigError, match=r"source 'clicks\.source': auto_offset_reset must be"):
        app.stream("clicks", auto_offset_reset="newest")
    with pytest.raises(ConfigError, match="table 'users': auto_offset_reset"):
        app.table("users", auto_offset_reset=timedelta(hours=-1))
    app.stream("views", auto_offset_reset=timedelta(hours=1)).to("out")
    app.stream("clicks", auto_offset_reset="latest").join(app.table("users", auto_offset_reset="none"),
                                                          lambda c, u: [c, u], name="enrich").to("enriched")
    app.process(input=["refunds", "returns"], output="out", name="copy", auto_offset_reset="latest")(
        lambda record: (record.key, record.value))
    app.process_batch(input="bulk", output="out", name="bulk_copy", auto_offset_reset=timedelta(minutes=1))(
        lambda table: table)
    with pytest.raises(ConfigError, match=r"sub-topology 'broken': auto_offset_reset must be"):
        app.process(input="x", output="out", name="broken", auto_offset_reset="latests")(lambda record: record)
    subs = app.subtopologies
    assert {name: dict(sub.offset_resets) for name, sub in subs.items()} == {
        "views.source": {"views": "by_duration:PT1H"}, "enrich": {"clicks": "latest", "users": "none"},
        "copy": {"refunds": "latest", "returns": "latest"}, "bulk_copy": {"bulk": "by_duration:PT1M"}}


def job() -> Application:
    """Three sources starting three ways: views an hour back... here a minute back, clicks at the end, orders (the
    application's default) at the beginning; each counted per key, windowed, and copied."""
    app = Application("starts", bootstrap_servers="unused:9092")
    views = app.stream("views", auto_offset_reset=timedelta(minutes=1))
    views.map_values(lambda v: {**v, "seen": True}, name="mark").to("seen")
    views.group_by_key().count(name="per_user").to_stream().to("view-counts")
    clicks = app.stream("clicks", auto_offset_reset="latest")
    clicks.join(app.table("users"), lambda c, u: [c["i"], u["tier"]], name="tiered").to("tiered")
    app.stream("orders").map_values(lambda v: v["i"], name="order_ids").to("order-ids")
    return app


def test_each_source_starts_where_its_policy_says_and_the_audits_leave_out_what_it_started_after():
    with TopologyTestDriver(job(), partitions=2) as driver:
        NOW = driver.now  # (the driver's wall clock starts at the real one, which a start-up reads)
        # before the application's first start: views of the last 10 minutes, one every 30 s (the last 2 of
        # them within the minute), clicks, orders and users
        driver.pipe_records([
            *[("views", f"u{i % 2}", {"i": i}, NOW - 10 * MINUTE + 30_000 * i + 1_000) for i in range(20)],
            *[("clicks", f"u{i % 2}", {"i": i}, NOW - MINUTE + i) for i in range(6)],
            *[("orders", f"o{i}", {"i": i}, NOW - 5 * MINUTE) for i in range(4)],
            ("users", "u0", {"tier": 0}, NOW - 20 * MINUTE), ("users", "u1", {"tier": 1}, NOW - 20 * MINUTE),
        ], process=False)
        driver.cluster.groups.clear()  # (as if the application started for the first time now, with those there)
        pinned = driver.planner.initialize_offsets()
        # views from the first at or after a minute ago (i = 18, 19; u0 and u1 share a partition, the other is
        # empty), clicks at their end; orders and users start at the beginning, nothing pinned
        views = {tp: o for tp, o in pinned.items() if tp[0] == "views"}
        assert sorted(views.values()) == [0, 18] and sum(o for tp, o in pinned.items() if tp[0] == "clicks") == 6
        assert {tp[0] for tp in pinned} == {"views", "clicks"}
        driver.crash_at("before_commit", batch=driver.batch)  # (its first batch, killed inside its transaction)
        driver.pipe_records([("views", "u0", {"i": 20}, NOW + 1), ("clicks", "u1", {"i": 6}, NOW + 1)])
        assert driver.crashes
        assert sorted(r.value["i"] for r in driver.read("seen")) == [18, 19, 20]
        assert {r.key: r.value for r in driver.read("view-counts")} == {"u0": 2, "u1": 1}
        assert [r.value for r in driver.read("tiered")] == [[6, 1]]
        assert sorted(r.value for r in driver.read("order-ids")) == [0, 1, 2, 3]
        reports = driver.audit()
        assert all((r.verdict, r.skipped) == ("PASS", None) for r in reports), [(r.mode, r.skipped) for r in reports]
        assert sum(r.lineage.not_read for r in reports if r.mode == "lineage") == 18 + 6
        assert any(r.mode == "join" for r in reports)


def test_none_refuses_to_start_a_partition_nothing_was_committed_for_and_starts_where_offsets_were_set():
    app = Application("careful", bootstrap_servers="unused:9092")
    app.stream("payments", auto_offset_reset="none").map_values(lambda v: v * 100, name="cents").to("cents")
    app.stream("refunds").map_values(lambda v: -v, name="negative").to("cents")
    with TopologyTestDriver(app, partitions=2) as driver:  # (its topics are new: "none" starts them at once)
        driver.pipe_records([("payments", "a", 1), ("refunds", "a", 2)], process=False)
        driver.cluster.groups.clear()
        with pytest.raises(ConfigError) as refused:
            driver.planner.initialize_offsets()
        text = str(refused.value)
        assert "2 input partition(s)" in text and "payments[0], payments[1]" in text and "refunds" not in text
        assert "eos reset" in text and "auto_offset_reset" in text
        driver.admin.set_group_offsets("careful", {("payments", 0): 0, ("payments", 1): 0})  # (`eos reset`)
        assert driver.planner.initialize_offsets() == {}
        driver.pipe("payments", "b", 3)
        assert sorted(r.value for r in driver.read("cents")) == [-2, 100, 300]


@pytest.mark.no_audit  # (it forges committed offsets past the topics' ends)
def test_a_topic_created_again_starts_where_its_sources_policy_says():
    app = Application("again", bootstrap_servers="unused:9092")
    app.stream("recent", auto_offset_reset=timedelta(minutes=1)).map_values(lambda v: v, name="copy").to("copy")
    app.stream("strict", auto_offset_reset="none").map_values(lambda v: v, name="copy2").to("copy2")
    with TopologyTestDriver(app) as driver:
        NOW = driver.now
        driver.pipe_records([("recent", "k", i, NOW - 5 * MINUTE + i * MINUTE) for i in range(6)])
        assert [r.value for r in driver.read("copy")] == [0, 1, 2, 3, 4, 5]
        driver.cluster.groups["again"][("recent", 0)] = (50, "")  # (a committed offset past the topic's end)
        driver.pipe("recent", "k", 6, timestamp=NOW)
        # read again from the first record at or after a minute ago: 4 (at NOW - 1 min), 5, 6
        assert [r.value for r in driver.read("copy")] == [4, 5, 6]
        (reset,) = [r.resets[("recent", 0)] for r in driver.results if ("recent", 0) in r.resets]
        assert (reset.reason, reset.start) == (SkipReason.RECREATED, 4)
        driver.cluster.groups["again"][("strict", 0)] = (50, "")
        with pytest.raises(ConfigError, match=r"strict\[0\] was deleted and created again .* 'none'"):
            driver.pipe("strict", "k", 1)
        # the audit reads a partition up to its end when the committed offset lies past it, where it waited for
        # ever for offset 50: the record the stopped job never read, below that offset, is reported lost
        by_input = {tuple(r.inputs): r for r in driver.audit() if r.mode == "lineage"}
        assert (by_input[("strict",)].verdict, by_input[("strict",)].lineage.lost) == ("FAIL", 1)


def test_a_start_set_past_the_first_records_is_left_out_by_the_window_audit_whatever_the_policy():
    """`eos reset --to <time>` commits a position past a partition's first records, saying where they start,
    for a job whose policy is "earliest": the window audit recomputed the windows from those records too and
    failed the job's correct results, where the lineage audit left them out."""
    from eos.windows import TumblingWindows
    from eos.worker.progress import CommitMetadata

    app = Application("restarted", bootstrap_servers="unused:9092")
    (app.stream("views").group_by_key().window(TumblingWindows(MINUTE)).count(name="per_minute").to_stream()
        .to("minutes"))
    with TopologyTestDriver(app) as driver:
        start = (driver.now - 10 * MINUTE) // MINUTE * MINUTE  # (one minute's window for them all)
        driver.pipe_records([("views", "u", {"i": i}, start + i * 1_000) for i in range(10)], process=False)
        driver.cluster.groups.clear()
        driver.admin.set_group_offsets("restarted", {("views", 0): 6},  # (what `eos reset --to <time>` commits)
                                       metadata={("views", 0): CommitMetadata(not_read_from=0).encode()})
        driver.pipe("views", "u", {"i": 10}, timestamp=start + 10_000)
        assert [r.value for r in driver.read("minutes")] == [1, 2, 3, 4, 5]  # (from offset 6 on)
        reports = driver.audit()
        assert all((r.verdict, r.skipped) == ("PASS", None) for r in reports), [(r.mode, r.window or r.lineage)
                                                                                 for r in reports]
        (window,) = [r for r in reports if r.mode == "window"]
        assert window.window.input_records == 5
