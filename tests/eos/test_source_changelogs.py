"""The source-topic optimization (`topology_optimization`, Kafka Streams' `reuse.ktable.source.topics`), through
the test driver: a table read from a topic and kept only by stream-table joins uses the topic as its stores'
changelog. Nothing is written to a changelog of their own; a store is restored by replaying the topic up to the
task's committed offset in it (never past it: those records are the batch's to process), as the task read it
(bad records and records without a key skipped, versioned tables' rules applied); queries read it the same way."""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from datetime import timedelta

import pytest

from eos import Application, TaskId
from eos.driver.checks import check_table_stores
from eos.errors import ConfigError
from eos.records import Record
from eos.serde import serde_for
from eos.testing import TopologyTestDriver
from eos.time import RECORD_TIME
from eos.topology import offset_groups, table_changelogs
from eos.worker.plans import StandbyPlan
from eos.worker.processing import entries
from eos.worker.standby import run_standby
from eos.worker.stores import table_replay, view_of
from recovery import ChangelogConfigError, MemoryBackend, StoreSpec, WriteBuffer, check_source_changelogs
from transactions import TopicSpec
from transactions.memory import MemoryAdmin, MemoryCluster, MemoryMessage

BASE = 1_800_000_000_000
MIN = 60_000


def app_(optimization: str = "all", **options) -> Application:
    return Application("t", bootstrap_servers="unused:9092", topology_optimization=optimization, **options)


def priced(app: Application, *, versioned=None, grace=None) -> Application:
    prices = app.table("prices", versioned=versioned)
    app.stream("orders").left_join(prices, lambda o, p: [o, p], name="priced", grace=grace).to("out")
    return app


def _out(driver) -> list[tuple]:
    return [(r.key, *r.value, r.timestamp) for r in driver.read("out")]


def _store(app: Application, name: str) -> StoreSpec:
    return next(s for sub in app.subtopologies.values() for s in sub.stores if s.name == name)


def test_a_table_joined_by_a_stream_has_no_changelog_of_its_own():
    app = priced(app_())
    assert _store(app, "priced-prices").source_topic == "prices"
    assert table_changelogs(app.subtopologies) == {"prices"}
    assert "priced-prices (changelog: the table's topic prices)" in str(app.describe())
    driver = TopologyTestDriver(app)
    driver.pipe("prices", "a", 1, timestamp=BASE)
    driver.pipe("orders", "a", "o1", timestamp=BASE + 1)
    assert _out(driver) == [("a", "o1", 1, BASE + 1)]
    assert "t-priced-prices-changelog" not in driver.cluster.logs
    assert driver.admin.topic_config("prices")["cleanup.policy"] == "compact"  # (the driver made it so)
    assert list(driver.store("priced-prices").all()) == [("a", 1)]


def test_without_the_optimization_the_store_keeps_its_own_changelog():
    for optimization in ("none",):
        app = priced(app_(optimization))
        assert _store(app, "priced-prices").source_topic is None
        driver = TopologyTestDriver(app)
        driver.pipe("prices", "a", 1, timestamp=BASE)
        assert "t-priced-prices-changelog" in driver.cluster.logs


@pytest.mark.parametrize("case", ["filtered", "also_a_stream", "regrouped", "table_table", "wall_clock"])
def test_a_table_something_else_reads_keeps_its_own_changelog(case):
    """Only a table whose records reach nothing but stream-table joins: anything else that takes them could fail
    and roll the update back (dead-lettering it), which a replay of the topic would not know."""
    app = app_()
    prices = app.table("prices", timestamp="wall_clock" if case == "wall_clock" else None)
    table = prices.filter(lambda k, v: v > 0) if case == "filtered" else prices
    app.stream("orders").left_join(table, lambda o, p: [o, p], name="priced").to("out")
    if case == "also_a_stream":
        prices.to_stream().map_values(lambda v: v * 2).to("doubled")
    elif case == "regrouped":
        prices.group_by(lambda k, v: (v, 1)).count().to_stream().to("counted")
    elif case == "table_table":
        prices.join(app.table("costs"), lambda p, c: p - c, name="margin").to_stream().to("margins")
    stores = [s for sub in app.subtopologies.values() for s in sub.stores]
    assert all(s.source_topic is None for s in stores), [(s.name, s.source_topic) for s in stores]


def two_joins(app: Application) -> Application:
    prices = app.table("prices")
    app.stream("orders").left_join(prices, lambda o, p: [o, p], name="priced").to("out")
    app.stream("quotes").join(prices, lambda q, p: [q, p], name="quoted").to("out2")
    return app


def test_two_stream_joins_of_one_table_keep_it_in_one_store(tmp_path):
    """Both joins' stores are restored from the table's topic and hold the same rows: the task keeps them in one
    store (one directory, one restore), as Kafka Streams keeps one store per table."""
    app = two_joins(app_())
    assert {s.name: s.source_topic for sub in app.subtopologies.values() for s in sub.stores} == {
        "priced-prices": "prices", "quoted-prices": "prices"}
    assert "quoted-prices (changelog: the table's topic prices) (one store with priced-prices)" in str(app.describe())
    driver = TopologyTestDriver(app, state_dir=tmp_path)
    driver.pipe_many("prices", [("a", 1, BASE), ("b", 2, BASE)])
    driver.crash_at("after_read")
    driver.pipe_records([("prices", "a", 3, BASE + 1), ("orders", "a", "o1", BASE + 2), ("quotes", "b", "q1", BASE + 2),
                         ("quotes", "c", "q2", BASE + 3)])
    assert len(driver.crashes) == 1
    assert _out(driver) == [("a", "o1", 3, BASE + 2)]
    assert [(r.key, *r.value) for r in driver.read("out2")] == [("b", "q1", 2)]
    assert sorted(p.name for p in (tmp_path / "t" / "priced-0").iterdir() if p.is_dir()) == ["priced-prices@prices"]
    in_memory = TopologyTestDriver(app)  # (a crash loses the stores: the table is replayed once, not once a join)
    in_memory.pipe_many("prices", [("a", 1, BASE), ("b", 2, BASE)])
    in_memory.crash_at("after_read")
    in_memory.pipe("orders", "a", "o1", timestamp=BASE + 2)
    assert [r.restored_records for r in in_memory.results if r.restored_records] == [2]
    plain = two_joins(app_("none"))  # (each with a changelog of its own: two stores)
    assert "one store with" not in str(plain.describe())


def test_the_one_step_join_and_a_versioned_table_with_a_grace_period():
    app = app_()
    app.join("orders", app.table("prices"), "out", name="priced", joiner=lambda o, p: [o, p], how="left")
    assert _store(app, "priced-prices").source_topic == "prices"
    app = priced(app_(), versioned=timedelta(hours=1), grace=timedelta(minutes=5))
    assert _store(app, "priced-prices").source_topic == "prices"
    assert _store(app, "priced-buffer").source_topic is None  # (the held records have a changelog of their own)
    assert "priced-prices (versioned, history 3600000 ms) (changelog: the table's topic prices)" in str(app.describe())


def test_a_restore_stops_at_the_committed_offset():
    """An order and a later price update in one batch, the order first by time. The batch is killed before its
    commit; its retry restores the table from the topic up to the committed offset: the order joins the price
    before the update, as it did in the killed attempt, not the update the batch has yet to process."""
    driver = TopologyTestDriver(priced(app_()))
    driver.pipe("prices", "a", 1, timestamp=BASE)
    driver.crash_at("before_commit")
    driver.pipe_records([("prices", "a", 2, BASE + 20), ("orders", "a", "o1", BASE + 10)])
    assert len(driver.crashes) == 1
    driver.pipe("orders", "a", "o2", timestamp=BASE + 30)
    assert _out(driver) == [("a", "o1", 1, BASE + 10), ("a", "o2", 2, BASE + 30)]


def test_a_restore_after_every_step_gives_what_a_straight_run_gives():
    rnd = random.Random(5)
    inputs = []
    for i in range(160):
        if rnd.random() < 0.4:
            inputs.append(("prices", rnd.choice("abc"), None if rnd.random() < 0.1 else i, BASE + i * 100))
        else:
            inputs.append(("orders", rnd.choice("abcd"), f"o{i}", BASE + i * 100 + rnd.randint(-500, 0)))
    for versioned, grace in ((None, None), (timedelta(minutes=1), None), (timedelta(minutes=1), 2_000)):
        app = priced(app_(), versioned=versioned, grace=grace)
        for seed in range(3):
            report = TopologyTestDriver(app, partitions=2).check_exactly_once(inputs, crashes=10, seed=seed, chunk=9)
            assert report.crashes and report.ok
        plain = TopologyTestDriver(priced(app_("none"), versioned=versioned, grace=grace), partitions=2)
        reused = TopologyTestDriver(priced(app_(), versioned=versioned, grace=grace), partitions=2)
        for step in ("after_read", "after_produce", "before_commit", "after_commit"):
            reused.crash_at(step)
        for i in range(0, len(inputs), 9):
            plain.pipe_records(inputs[i:i + 9])
            reused.pipe_records(inputs[i:i + 9])
        assert len(reused.crashes) == 4
        assert sorted(_out(reused)) == sorted(_out(plain))


def test_bad_table_records_are_dead_lettered_once_and_skipped_by_the_restore():
    driver = TopologyTestDriver(priced(app_()))
    driver.pipe("prices", "a", 1, timestamp=BASE)
    driver.pipe_many("prices", [(b"b", b"{not json", BASE + 1)], serialized=True)
    driver.pipe_many("prices", [(None, b"3", BASE + 2)], serialized=True)  # (no key: dropped, as a table does)
    driver.crash_at("after_read")
    driver.pipe("orders", "a", "o1", timestamp=BASE + 3)
    driver.pipe("orders", "b", "o2", timestamp=BASE + 4)
    assert len(driver.crashes) == 1
    assert _out(driver) == [("a", "o1", 1, BASE + 3), ("b", "o2", None, BASE + 4)]
    assert [d.topic for d in driver.dead_letters()] == ["prices"]


def test_a_versioned_table_restored_from_its_topic_keeps_its_history_rules():
    """Out-of-order updates go into the history and updates older than the history retention are dropped, in
    the replay as in processing (its observed stream time rebuilt from the topic)."""
    driver = TopologyTestDriver(priced(app_(), versioned=10 * MIN))
    driver.pipe_many("prices", [("a", 1, BASE), ("a", 3, BASE + 30 * MIN), ("a", 2, BASE + 10 * MIN),
                                ("a", 0, BASE - 5 * MIN)])
    driver.crash_at("after_read")
    driver.pipe_many("orders", [("a", "o1", BASE + 12 * MIN), ("a", "o2", BASE + 31 * MIN), ("a", "o3", BASE + MIN)])
    assert len(driver.crashes) == 1
    assert _out(driver) == [("a", "o1", None, BASE + 12 * MIN), ("a", "o2", 3, BASE + 31 * MIN),
                            ("a", "o3", None, BASE + MIN)]
    assert driver.dropped["priced"] == {"table update older than the history retention": 2}


def test_queries_read_the_table_up_to_the_committed_offset():
    driver = TopologyTestDriver(priced(app_()), partitions=2)
    driver.pipe_many("prices", [("a", 1, BASE), ("b", 2, BASE), ("a", None, BASE + 1), ("c", 3, BASE + 2)])
    snapshot = driver.store("priced-prices")
    assert sorted(snapshot.all()) == [("b", 2), ("c", 3)]
    assert sum(snapshot.position.values()) == 4
    driver.pipe_records([("prices", "d", 4, BASE + 3)], process=False)  # read by no batch yet
    assert sorted(driver.store("priced-prices").all()) == [("b", 2), ("c", 3)]


def test_a_table_topic_that_retention_would_empty_is_refused():
    cluster = MemoryCluster()
    admin = MemoryAdmin(cluster)
    spec = StoreSpec("priced-prices", None, None, source_topic="prices")  # type: ignore[arg-type]
    cluster.create_topic("prices", 1, {"cleanup.policy": "delete", "retention.ms": "604800000"})
    with pytest.raises(ChangelogConfigError, match=r"cleanup.policy=compact on prices .* topology_optimization='none'"):
        check_source_changelogs(admin, [spec])
    cluster.configs["prices"].update({"retention.ms": "-1"})
    check_source_changelogs(admin, [spec])  # kept forever: fine
    cluster.configs["prices"].update({"cleanup.policy": "compact,delete", "retention.ms": "1000"})
    check_source_changelogs(admin, [spec])


def test_a_wrong_setting_is_refused_with_the_valid_ones():
    with pytest.raises(ConfigError, match="topology_optimization must be one of 'none', 'all', "
                                          "'reuse_table_source_topics'"):
        app_("reuse.ktable.source.topics")


def test_a_standby_copy_replays_the_table_up_to_the_committed_offset(tmp_path):
    """A copy is refreshed up to the task's committed offset in the table's topic: a price update that no batch
    has processed yet is not in it (the task that moves there processes it next)."""
    driver = TopologyTestDriver(priced(app_()))
    driver.pipe_many("prices", [("a", 1, BASE), ("b", 2, BASE)])
    driver.pipe_records([("prices", "a", 3, BASE + 1)], process=False)
    job = copy.copy(driver.job)  # (the copy's stores in a directory of their own)
    job.config = driver.config.with_overrides(state_dir=str(tmp_path))
    plan = StandbyPlan(TaskId("priced", 0), 1, None, lag=3, budget=5.0)
    result = run_standby(plan, job, driver.worker.clients)
    assert (result.status, result.replayed, result.store_offsets) == ("refreshed", 2, {"priced-prices": 2})
    assert (tmp_path / "t" / "priced-0" / "priced-prices@prices").is_dir()
    driver.pipe("orders", "a", "o1", timestamp=BASE + 2)  # the batch processes the update, then the order
    result = run_standby(replace(plan, batch=2), job, driver.worker.clients)
    assert (result.replayed, result.store_offsets) == (1, {"priced-prices": 3})


def test_turning_it_off_again_is_refused_where_the_store_would_start_empty():
    """With the optimization off, the store needs a changelog of its own, which it never wrote: where a batch has
    committed offsets in the table's topic, starting would join every later order without the rows read before.
    Offsets a reset wrote (no batch's producer) mean to start afresh."""
    driver = TopologyTestDriver(priced(app_()), partitions=2)
    driver.pipe_many("prices", [("a", 1, BASE), ("b", 2, BASE)])
    off = priced(app_("none"))
    sub = off.subtopologies["priced"]
    groups = offset_groups(off.subtopologies, off.config.group_id)
    with pytest.raises(ConfigError, match=r"store 'priced-prices' keeps table prices but has no changelog "
                                          r"\(t-priced-prices-changelog\), while 'priced' has already read prices .*"
                                          r"run it so again"):
        check_table_stores(driver.admin, off.config, sub, groups)
    check_table_stores(driver.admin, app_().config, priced(app_()).subtopologies["priced"], groups)  # (on: fine)
    fresh = TopologyTestDriver(priced(app_()), partitions=2)  # nothing read yet: a new store is right
    check_table_stores(fresh.admin, off.config, sub, groups)
    driver.admin.create_topics([TopicSpec("t-priced-prices-changelog", 2)])  # a store with a changelog: fine
    check_table_stores(driver.admin, off.config, sub, groups)


@pytest.mark.parametrize("seed", range(6))
def test_a_plain_tables_replay_keeps_each_keys_last_good_record_as_processing_does(seed):
    """A plain table's chunk is replayed from its end, each key's records only until a good one: the store comes
    out as the records kept in offset order leave it, with bad records, keyless ones, a key written two ways
    (`"a"` and ` "a"`, one store key) and deletions among them."""
    rnd = random.Random(seed)
    raw_keys = [b'"a"', b' "a"', b'"b"', b'"c"', b"null", None, b"{bad"]
    records = [MemoryMessage("prices", 0, offset, rnd.choice(raw_keys),
                             rnd.choice([b"1", b"2", b'{"p": 3}', None, b"{bad"]), None, BASE + offset)
               for offset in range(rnd.randrange(1, 60))]
    spec = _store(priced(app_()), "priced-prices")
    reading = (serde_for("json"), serde_for("json"), RECORD_TIME)
    backend, reference = MemoryBackend(), MemoryBackend()
    backend.write(table_replay(spec, reading, backend)(records), None)
    view = view_of(spec)
    view.attach(WriteBuffer(reference))
    for _, record, _ in entries(records, *reading):  # (in offset order, each good record kept)
        if isinstance(record, Record) and record.key is not None:
            view.put(record.key, record.value, record.timestamp)
    assert dict(backend.iterate()) == {k: v for k, v in view._buf().changes().items() if v is not None}
