"""Versioned tables (`app.table(topic, versioned=history retention)`), through the test driver: a stream
joined with the row as of each record's timestamp, out-of-order table updates kept in the history without
changing the current row (so table-table joins, foreign-key joins and table aggregations make nothing of
them), the history retention's bound, and the versioned store as queries see it."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from eos import Application
from eos.audit.joins import (
    _canon,
    _histories,
    _history_of,
    _versioned_states,
    check_table_table,
    explain_stream_table,
)
from eos.records import Record
from eos.testing import TopologyTestDriver

BASE = 1_800_000_000_000


def app_() -> Application:
    return Application("t", bootstrap_servers="unused:9092")


def _joined(driver, topic="out"):
    return [(r.key, r.value, r.timestamp) for r in driver.read(topic)]


def test_a_stream_joins_the_row_as_of_each_records_timestamp():
    app = app_()
    prices = app.table("prices", versioned=timedelta(minutes=10))
    app.stream("orders").left_join(prices, lambda o, p: {"order": o, "price": p}, name="priced").to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("prices", [("apple", 10, BASE + 1_000), ("apple", 12, BASE + 5_000),
                                ("apple", 11, BASE + 3_000)])  # out of order: valid 3 s to 5 s
    driver.pipe_many("orders", [("apple", "o1", BASE + 500),    # before the first price
                                ("apple", "o2", BASE + 2_000),
                                ("apple", "o3", BASE + 4_000),
                                ("apple", "o4", BASE + 6_000),
                                ("apple", "o5", BASE + 3_000)])  # an order arriving late
    assert [(v["order"], v["price"]) for _, v, _ in _joined(driver)] == [
        ("o1", None), ("o2", 10), ("o3", 11), ("o4", 12), ("o5", 11)]
    driver.pipe("prices", "apple", None, timestamp=BASE + 7_000)  # deleted from 7 s on
    driver.pipe_many("orders", [("apple", "o6", BASE + 8_000), ("apple", "o7", BASE + 6_500)])
    assert [(v["order"], v["price"]) for _, v, _ in _joined(driver)] == [("o6", None), ("o7", 12)]
    assert driver.dropped == {"priced": {"out-of-order table update": 1}}


def test_the_same_job_without_versioned_joins_the_latest_row_by_offset():
    app = app_()
    prices = app.table("prices")
    app.stream("orders").left_join(prices, lambda o, p: p, name="priced").to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("prices", [("apple", 10, BASE + 1_000), ("apple", 12, BASE + 5_000),
                                ("apple", 11, BASE + 3_000)])
    driver.pipe_many("orders", [("apple", "o1", BASE + 500), ("apple", "o3", BASE + 4_000)])
    assert [v for _, v, _ in _joined(driver)] == [11, 11]


def test_a_record_older_than_the_history_retention_finds_no_row():
    app = app_()
    prices = app.table("prices", versioned=1_000)
    orders = app.stream("orders")
    orders.left_join(prices, lambda o, p: p, name="left").to("left-out")
    orders.join(prices, lambda o, p: p, name="inner").to("inner-out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("prices", [("apple", 10, BASE), ("pear", 7, BASE + 5_000)])  # the table's time: 5 s
    driver.pipe_many("prices", [("apple", 9, BASE + 3_000)])  # older than 5 s - 1 s: not kept
    driver.pipe_many("orders", [("apple", "o1", BASE + 3_999), ("apple", "o2", BASE + 4_000)])
    assert [v for _, v, _ in _joined(driver, "left-out")] == [None, 10]
    assert [v for _, v, _ in _joined(driver, "inner-out")] == [10]
    # (each join keeps the table in a store of its own: both refused it; one task runs both)
    assert driver.dropped == {"left": {"table update older than the history retention": 2}}


def test_a_filtered_versioned_table_stays_versioned():
    app = app_()
    gold = app.table("customers", versioned=60_000).filter(lambda k, c: c["tier"] == "gold")
    app.stream("orders").join(gold, lambda o, c: o, name="vip").to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("customers", [("c1", {"tier": "gold"}, BASE + 1_000), ("c1", {"tier": "basic"}, BASE + 3_000)])
    driver.pipe_many("orders", [("c1", "late order", BASE + 2_000), ("c1", "now", BASE + 4_000)])
    assert [v for _, v, _ in _joined(driver)] == ["late order"]  # gold at 2 s, no longer at 4 s
    (sub,) = app.subtopologies.values()
    assert [(s.name, s.kind, s.retention_ms) for s in sub.stores] == [("vip-filter-0", "versioned", 60_000)]
    assert "stores: [vip-filter-0 (versioned, history 60000 ms)]" in str(app.describe())


def test_out_of_order_updates_make_no_table_join_result():
    app = app_()
    left = app.table("left", versioned=60_000)
    right = app.table("right")
    left.join(right, lambda a, b: f"{a}+{b}", name="both").to_stream().to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("right", [("k", "r1", BASE)])
    driver.pipe_many("left", [("k", "l2", BASE + 2_000), ("k", "l1", BASE + 1_000),  # out of order: no result
                              ("k", "l3", BASE + 2_000)])  # the same timestamp as the latest: replaces it
    assert _joined(driver) == [("k", "l2+r1", BASE + 2_000), ("k", "l3+r1", BASE + 2_000)]
    driver.pipe_many("right", [("k", "r2", BASE + 500)])  # (the right table is not versioned: by offset)
    assert _joined(driver) == [("k", "l3+r2", BASE + 2_000)]
    assert driver.dropped == {"both": {"out-of-order table update": 1}}


@pytest.mark.parametrize("cache", [0, 1 << 20])
def test_out_of_order_updates_leave_a_table_aggregation_alone(cache):
    app = Application("t", bootstrap_servers="unused:9092", cache_max_bytes=cache)
    customers = app.table("customers", versioned=60_000)
    customers.group_by(lambda k, c: (c["tier"], c)).count(name="tiers").to_stream().to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("customers", [("c1", {"tier": "gold"}, BASE + 2_000),
                                   ("c1", {"tier": "basic"}, BASE + 1_000),  # older than the latest: ignored
                                   ("c2", {"tier": "gold"}, BASE + 3_000)])
    assert [(r.key, r.value) for r in driver.read("out")][-1] == ("gold", 2)


def test_out_of_order_updates_make_no_foreign_key_join_result():
    app = app_()
    orders = app.table("order-rows", versioned=60_000)
    products = app.table("products", versioned=60_000)
    orders.join(products, lambda o, p: {**o, "name": p}, foreign_key=lambda o: o["product"],
                name="named").to_stream().to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("products", [("p1", "apple", BASE + 1_000), ("p2", "pear", BASE + 1_000)])
    driver.pipe_many("order-rows", [("o1", {"product": "p1"}, BASE + 2_000)])
    driver.pipe_many("order-rows", [("o1", {"product": "p2"}, BASE + 1_500)])  # out of order
    driver.pipe_many("products", [("p1", "old apple", BASE + 500)])  # out of order
    assert [(r.key, r.value) for r in driver.read("out")] == [("o1", {"product": "p1", "name": "apple"})]
    driver.pipe_many("products", [("p1", "new apple", BASE + 3_000)])  # o1 still names p1
    assert [(r.key, r.value) for r in driver.read("out")] == [("o1", {"product": "p1", "name": "new apple"})]
    (join,) = app.subtopologies["named"].joins  # the right table's store is in the right side's task
    assert _history_of(app.subtopologies[join.right_reader], join.right_store) == 60_000


@pytest.mark.parametrize("versioned", [-1, "5m", True])
def test_a_history_retention_that_is_no_duration_is_refused(versioned):
    app = app_()
    with pytest.raises(ValueError, match="versioned= is the history retention, a duration >= 0"):
        app.table("prices", versioned=versioned)
    with pytest.raises(ValueError, match="versioned= is the history retention"):
        app.stream("s").to_table(versioned=versioned)
    with pytest.raises(ValueError, match="global table 'g': versioned= is the history retention"):
        app.global_table("g", versioned=versioned)


def _rated(versioned=timedelta(minutes=10)):
    app = app_()
    rates = app.global_table("rates", versioned=versioned)
    app.stream("orders").left_join(rates, lambda o, r: [o["id"], r], key=lambda k, o: o["cur"],
                                   name="rated").to("out")
    return app


def test_a_versioned_global_table_joins_each_record_with_the_row_at_its_time():
    driver = TopologyTestDriver(_rated())
    driver.pipe_many("rates", [("eur", 1.1, BASE + 1_000), ("eur", 1.3, BASE + 5_000),
                               ("eur", 1.2, BASE + 3_000)])  # out of order: valid 3 s to 5 s
    driver.pipe_many("orders", [(f"o{i}", {"id": i, "cur": "eur"}, BASE + at)
                                for i, at in enumerate([500, 2_000, 4_000, 6_000, 3_500])])
    assert [r.value for r in driver.read("out")] == [[0, None], [1, 1.1], [2, 1.2], [3, 1.3], [4, 1.2]]
    driver.pipe("rates", "eur", None, timestamp=BASE + 7_000)  # deleted from 7 s on
    driver.pipe_many("orders", [("o5", {"id": 5, "cur": "eur"}, BASE + 8_000),
                                ("o6", {"id": 6, "cur": "eur"}, BASE + 6_500)])
    assert [r.value for r in driver.read("out")] == [[5, None], [6, 1.3]]
    rates = driver.store("rates")  # (as queries read it: its topic read into a copy of the same kind)
    assert rates.get("eur") is None and rates.get("eur", as_of=BASE + 4_000) == 1.2
    assert [(v.value, v.valid_from, v.valid_to) for v in rates.versions("eur")] == [  # (tombstones left out)
        (1.3, BASE + 5_000, BASE + 7_000), (1.2, BASE + 3_000, BASE + 5_000), (1.1, BASE + 1_000, BASE + 3_000)]
    assert "rates (global, versioned, history 600000 ms)" in str(driver.app.describe())


def test_a_plain_global_table_is_read_as_of_nothing():
    app = app_()
    app.stream("orders").join(app.global_table("rates"), lambda o, r: r, key=lambda k, o: o).to("out")
    driver = TopologyTestDriver(app)
    driver.pipe("rates", "eur", 1.1, timestamp=BASE)
    with pytest.raises(ValueError, match="not versioned: as_of= reads a versioned one"):
        driver.store("rates").get("eur", as_of=BASE)
    assert driver.store("rates").get("eur") == 1.1


def test_a_versioned_global_table_keeps_its_history_bound_across_its_partitions():
    """The copy's observed stream time is the largest timestamp of every partition it has read: an update
    older than that minus the history retention is not kept, and a lookup older than it finds nothing. (A copy
    reads its partitions one after another when a batch of the join runs: the order before it decides.)"""
    driver = TopologyTestDriver(_rated(versioned=2_000), partitions=2)
    driver.pipe_many("rates", [("eur", 1.0, BASE + 1_000, 0), ("usd", 2.0, BASE + 10_000, 1)])
    driver.pipe("orders", "o0", {"id": 0, "cur": "chf"}, timestamp=BASE)  # a batch: the copy reads both
    driver.pipe_many("rates", [("eur", 1.5, BASE + 7_000, 0)])  # before 10 s - 2 s: not kept
    driver.pipe_many("orders", [("o1", {"id": 1, "cur": "eur"}, BASE + 8_000),
                                ("o2", {"id": 2, "cur": "eur"}, BASE + 7_999),
                                ("o3", {"id": 3, "cur": "usd"}, BASE + 10_000)])
    assert sorted(r.value for r in driver.read("out")) == [[0, None], [1, 1.0], [2, None], [3, 2.0]]
    assert [r.verdict for r in driver.audit()] == ["PASS", "PASS"]


def test_the_join_audit_allows_an_update_a_global_copy_dropped_as_too_old_after_another_partition():
    """eur's 1.5 at 7 s was kept by its own partition's clock (1 s) but not by the copy, which had read usd
    at 10 s first (bound 8 s). An order at 8.5 s then finds 1.0, one at 9.6 s the 2.5 written after: the
    audit's history of eur holds 1.5, which it must take as perhaps dropped, or the two results contradict
    each other (a later record joined with an earlier version)."""
    driver = TopologyTestDriver(_rated(versioned=2_000), partitions={"rates": 2, "orders": 1, "out": 1})
    driver.pipe_many("rates", [("eur", 1.0, BASE + 1_000, 0), ("usd", 2.0, BASE + 10_000, 1)])
    driver.pipe("orders", "o0", {"id": 0, "cur": "chf"}, timestamp=BASE)  # a batch: the copy reads both
    driver.pipe_many("rates", [("eur", 1.5, BASE + 7_000, 0), ("eur", 2.5, BASE + 9_500, 0)])
    driver.pipe_many("orders", [("o1", {"id": 1, "cur": "eur"}, BASE + 9_600),
                                ("o2", {"id": 2, "cur": "eur"}, BASE + 8_500)])
    assert [r.value for r in driver.read("out")] == [[0, None], [1, 2.5], [2, 1.0]]
    (lineage, join) = driver.audit()
    assert (lineage.verdict, join.verdict, join.join.expected) == ("PASS", "PASS", 3), join.join


def test_killed_batches_join_a_versioned_global_table_the_same_way(tmp_path):
    driver = TopologyTestDriver(_rated(), state_dir=tmp_path)
    rnd = random.Random(4)
    inputs = []
    for i in range(70):
        at = BASE + i * 300 + rnd.randint(-2_000, 300)
        if rnd.random() < 0.4:
            inputs.append(("rates", rnd.choice(["eur", "usd"]), None if rnd.random() < 0.1 else i, at))
        else:
            inputs.append(("orders", f"o{i}", {"id": i, "cur": rnd.choice(["eur", "usd", "chf"])}, at))
    report = driver.check_exactly_once(inputs, crashes=8, seed=2)
    assert report.ok and len(report.crashes) >= 4


def test_the_join_audit_bounds_a_versioned_global_tables_history_by_every_partition():
    from eos.audit.joins import _global_versioned_states

    rows = [Record("a", 1, "rates", 0, 0, 1_000), Record("b", 2, "rates", 1, 0, 5_000),
            Record("a", 3, "rates", 0, 1, 4_000)]
    states = _global_versioned_states(rows, 2_000)
    # a's own partition says its bound was at most 2,000 after its second update; partition 1 may have been
    # read before it, making it 3,000: a lookup at 2,500 may have found 1 or nothing. And read first, partition
    # 1 makes a's first update (1,000) too old to keep: a lookup at 3,500 may find nothing too
    assert states["a"][2].values_at(2_500) == (1, None) and states["a"][2].values_at(3_500) == (1, None)
    assert states["a"][2].values_at(4_000) == (3,)  # (its second update is newer than any bound: kept)
    one = [Record(r.key, r.value, r.topic, 0, n, r.timestamp) for n, r in enumerate(rows)]
    assert _global_versioned_states(one, 2_000) == _versioned_states(one, 2_000)  # (one partition: exact)


def test_a_stream_made_a_versioned_table():
    app = app_()
    rates = app.stream("rate-updates").map_values(lambda r: r["rate"]).to_table(versioned=timedelta(hours=1))
    app.stream("payments").join(rates, lambda p, rate: p * rate, name="converted").to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("rate-updates", [("eur", {"rate": 2}, BASE + 1_000), ("eur", {"rate": 3}, BASE + 5_000)])
    driver.pipe_many("payments", [("eur", 10, BASE + 2_000), ("eur", 10, BASE + 6_000)])
    assert [v for _, v, _ in _joined(driver)] == [20, 30]


def test_the_versioned_store_as_queries_see_it():
    app = app_()
    prices = app.table("prices", versioned=60_000)
    app.stream("orders").join(prices, lambda o, p: p, name="priced").to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("prices", [("apple", 10, BASE + 1_000), ("apple", 12, BASE + 5_000), ("pear", 3, BASE)])
    store = driver.store("priced-prices")
    assert store.kind == "versioned"
    assert store.view.get("apple") == 12 and store.view.get("apple", as_of=BASE + 2_000) == 10
    assert [(v.value, v.valid_from, v.valid_to) for v in store.view.versions("apple")] == [
        (12, BASE + 5_000, None), (10, BASE + 1_000, BASE + 5_000)]
    from eos.queries import store_rows  # what `eos store dump` prints and `app.read_store` reads

    assert store_rows(store) == [
        {"key": "apple", "value": "12", "timestamp": BASE + 5_000, "valid_to": None},
        {"key": "apple", "value": "10", "timestamp": BASE + 1_000, "valid_to": BASE + 5_000},
        {"key": "pear", "value": "3", "timestamp": BASE, "valid_to": None}]


@pytest.mark.parametrize("rocksdb", [False, True])
def test_a_killed_batch_restores_the_history_and_commits_the_same_joins(rocksdb, tmp_path):
    app = app_()
    prices = app.table("prices", versioned=10_000)
    app.stream("orders").left_join(prices, lambda o, p: [o, p], name="priced").to("out")
    driver = TopologyTestDriver(app, state_dir=tmp_path if rocksdb else None)  # (RocksDB stores kept open)
    inputs = []
    for i in range(60):
        inputs.append(("prices", f"k{i % 3}", i, BASE + (i * 700) % 9_000 + i * 100))
        inputs.append(("orders", f"k{i % 4 % 3}", f"o{i}", BASE + (i * 1_300) % 11_000 + i * 100))
    report = driver.check_exactly_once(inputs, crashes=8, seed=3)
    assert report.ok and len(report.crashes) >= 4 and report.records >= 120


@pytest.mark.parametrize("seed", range(4))
def test_joins_of_a_versioned_table_match_a_reference_through_killed_batches(seed):
    """The table's updates (out of order, deletions, some older than the history retention) first, then
    orders at random times, with batches killed at random steps: each order joined with the reference's
    version at its timestamp (None before the history bound), each exactly once."""
    from tests.recovery.test_versioned import _Model

    rnd = random.Random(seed)
    app = Application("t", bootstrap_servers="unused:9092", max_records_per_batch=9)
    prices = app.table("prices", versioned=20_000)
    app.stream("orders").left_join(prices, lambda o, p: [o, p], name="priced").to("out")
    driver = TopologyTestDriver(app)
    model = _Model(20_000)
    updates = [(rnd.choice("abcd"), None if rnd.random() < 0.15 else rnd.randint(1, 99),
                BASE + rnd.randint(0, 60_000) + i * 400) for i in range(80)]
    for key, value, ts in updates:
        model.put(key, value, ts)
    orders = [(rnd.choice("abcde"), f"o{i}", BASE + rnd.randint(0, 100_000)) for i in range(80)]
    for step in ("after_read", "after_produce", "before_commit", "after_commit"):
        driver.crash_at(step, batch=rnd.randint(1, 12))
    driver.pipe_many("prices", updates)
    driver.pipe_many("orders", orders)
    got = sorted((r.key, *r.value, r.timestamp) for r in driver.read("out"))
    assert got == sorted((k, o, model.get(k, ts), ts) for k, o, ts in orders)


# ---------------------------------------------------------------- the join audit's replay of versioned tables


def _table_records(updates, topic="prices"):
    return [Record(k, v, topic, 0, n, ts) for n, (k, v, ts) in enumerate(updates)]


@pytest.mark.parametrize("seed", range(10))
def test_the_join_audit_explains_what_the_job_joined_and_nothing_else(seed):
    """Table updates (out of order, deletions, some too old to keep) and orders interleaved, in batches the
    task merges by timestamp; the audit's replay of the versioned table explains every committed result, and
    names a result joined with the latest row where the row at the order's time differs."""
    rnd = random.Random(seed)
    retention = rnd.choice([0, 2_000, 10_000])
    app = Application("t", bootstrap_servers="unused:9092", max_records_per_batch=rnd.choice([3, 8, 50]))
    prices = app.table("prices", versioned=retention)
    app.stream("orders").left_join(prices, lambda o, p: [o, p], name="priced").to("out")
    driver = TopologyTestDriver(app)
    inputs = []
    for i in range(120):
        if rnd.random() < 0.5:
            inputs.append(("prices", rnd.choice("abc"), None if rnd.random() < 0.15 else i,
                           BASE + i * 200 + rnd.randint(-4_000, 1_000)))
        else:
            inputs.append(("orders", rnd.choice("abcd"), f"o{i}", BASE + i * 200 + rnd.randint(-6_000, 500)))
    for n in range(0, len(inputs), 10):
        driver.pipe_records(inputs[n:n + 10])
    table = _table_records([(k, v, ts) for t, k, v, ts in inputs if t == "prices"])
    stream = [Record(k, v, "orders", 0, n, ts)
              for n, (k, v, ts) in enumerate((k, v, ts) for t, k, v, ts in inputs if t == "orders")]
    outputs = [r.value for r in driver.read("out")]
    assert [o for o, _ in outputs] == [r.value for r in stream]
    results = {r.offset: [value] for r, value in zip(stream, outputs, strict=True)}
    states = _versioned_states(table, retention)
    joiner = lambda o, p: [o, p]
    assert explain_stream_table(stream, results, states, joiner, "left") == []
    # a result joined with a value the key held, but at no time a replay could have looked it up at
    for r in stream:
        possible = {_canon(v) for state in states.get(r.key, []) for v in state.values_at(r.timestamp)}
        wrong = next((t.value for t in table if t.key == r.key and _canon(t.value) not in possible), "missing")
        if wrong != "missing":
            break
    assert wrong != "missing"
    forged = {**results, r.offset: [[r.value, wrong]]}
    assert [p for p, _, _ in explain_stream_table(stream, forged, states, joiner, "left")] == ["wrong_values"]


def test_the_join_audit_knows_a_record_older_than_the_history_bound_found_nothing():
    table = _table_records([("a", 1, 1_000), ("b", 2, 5_000), ("a", 3, 6_000)])
    states = _versioned_states(table, 1_000)
    # after a's first update the bound is 0; after b's, 4,000; a's second update moves it to 5,000
    assert [(s.seen, s.bound_lo, s.bound_hi) for s in states["a"][1:]] == [(1, 0, 4_000), (2, 5_000, 5_000)]
    assert states["a"][1].values_at(3_000) == (1, None)  # before or after b's update raised the bound
    assert states["a"][1].values_at(4_000) == (1,)
    assert states["a"][2].values_at(4_999) == (None,) and states["a"][2].values_at(5_500) == (1,)
    stream = [Record("a", "o1", "orders", 0, 0, 3_000), Record("a", "o2", "orders", 0, 1, 4_500)]
    joiner = lambda o, p: [o, p]
    for first in (1, None):
        assert explain_stream_table(stream, {0: [["o1", first]], 1: [["o2", 1]]}, states, joiner, "left") == []
    # o2 at 4.5 s joined with None: only once a's second update raised the bound past it, but then o1 (before
    # it) ... is fine too; o2 joined with 3 (valid from 6 s) is wrong
    problems = explain_stream_table(stream, {0: [["o1", 1]], 1: [["o2", 3]]}, states, joiner, "left")
    assert [p for p, _, _ in problems] == ["wrong_values"]
    # two updates at one time: the later one replaced the earlier
    states = _versioned_states(_table_records([("a", 1, 1_000), ("a", 2, 1_000)]), 1_000)
    assert states["a"][2].values_at(1_000) == (2,)


def test_the_audit_keeps_what_a_versioned_store_kept():
    records = _table_records([("a", None, 10_000), ("b", 1, 5_000), ("b", 2, 4_000), ("b", 3, 5_000)])
    # put as a tombstone version, a's deletion moved the store's time on: b's updates came too late
    assert _histories(records, 1_000) == {"a": [None, None]}
    # a foreign-key join's left side puts no tombstone of a key without a row: b's updates were kept, the
    # second out of order (not current), the third at the latest's time (current: it replaced it)
    assert _histories(records, 1_000, absent_tombstones=False) == {"b": [None, 1, 3]}


def test_the_table_join_audit_takes_a_versioned_tables_latest_row_by_timestamp():
    app = app_()
    left, right = app.table("left", versioned=60_000), app.table("right")
    left.join(right, lambda a, b: f"{a}+{b}", name="both").to_stream().to("out")
    driver = TopologyTestDriver(app)
    updates = [("k", "l2", BASE + 2_000), ("k", "l1", BASE + 1_000), ("k", "l3", BASE + 2_000), ("k", "l0", BASE)]
    driver.pipe_many("right", [("k", "r1", BASE)])
    driver.pipe_many("left", updates)
    outputs = {"k": [r.value for r in driver.read("out")]}
    assert outputs == {"k": ["l2+r1", "l3+r1"]}
    joiner = lambda a, b: f"{a}+{b}"
    lefts = _table_records(updates, "left")
    rights = _histories(_table_records([("k", "r1", BASE)], "right"))
    assert check_table_table(_histories(lefts, 60_000), rights, outputs, joiner, "inner") == []
    # the audit finds which side is versioned, and its history, in the store that keeps it
    (sub,) = app.subtopologies.values()
    (join,) = sub.joins
    assert (_history_of(sub, join.left_store), _history_of(sub, join.right_store)) == (60_000, None)
    # read as a table by offset, its last row would be l0: the audit would expect l0+r1
    assert [p for p, _, _ in check_table_table(_histories(lefts), rights, outputs, joiner, "inner")] == ["missing"]


def test_a_query_answers_each_key_with_the_history_bound_of_the_task_that_holds_it():
    app = app_()
    prices = app.table("prices", versioned=1_000)
    app.stream("orders").join(prices, lambda o, p: p, name="priced").to("out")
    driver = TopologyTestDriver(app, partitions=2)
    driver.pipe_many("prices", [("a", 1, BASE, 0), ("a", 2, BASE + 500, 0),             # task 0's time: 0.5 s
                                ("b", 3, BASE, 1), ("c", 4, BASE + 9_000, 1)])          # task 1's: 9 s
    store = driver.store("priced-prices")
    assert store.get("a", as_of=BASE) == 1  # task 0's bound is -0.5 s
    assert store.get("b", as_of=BASE) is None and store.get("b") == 3  # task 1's is 8 s
    assert [v.value for v in store.versions("a")] == [2, 1] and store.versions("zzz") == []
    assert sorted(store.all()) == [("a", 2), ("b", 3), ("c", 4)]
    assert store.get_with_timestamp("c") == (4, BASE + 9_000) and store.get("zzz", "none") == "none"


def test_a_processor_keeps_a_versioned_store_of_its_own():
    from eos import Processor, store

    class Convert(Processor):  # rates by time; a payment converted at the rate of its own time
        def init(self, context):
            super().init(context)
            self.rates = context.store("rates")

        def process(self, record):
            if record.topic == "rates":
                self.rates.put(record.key, record.value, record.timestamp)
            else:
                rate = self.rates.get(record.key, as_of=record.timestamp)
                self.context.forward(record.key, None if rate is None else record.value * rate)

    app = app_()
    app.add_source("in", ["rates", "payments"])
    app.add_processor("convert", Convert, "in")
    app.add_state_store(store("rates", key_serde="string", versioned=timedelta(days=1)), "convert")
    app.add_sink("out", "out", "convert")
    driver = TopologyTestDriver(app)
    driver.pipe_records([("rates", "eur", 2, BASE + 1_000), ("rates", "eur", 3, BASE + 5_000),
                         ("payments", "eur", 10, BASE + 3_000), ("payments", "eur", 10, BASE + 500)])
    assert [r.value for r in driver.read("out")] == [20, None]
    with pytest.raises(ValueError, match="store 'x': versioned= is the history retention"):
        store("x", versioned="1h")


def test_the_readme_versioned_table_example():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"### Versioned tables\n.*?```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {"__name__": "readme_versioned"}
    exec(compile(block, "README:Versioned tables", "exec"), namespace)
    driver = TopologyTestDriver(namespace["app"])
    driver.pipe_many("prices", [("apple", {"amount": 3}, BASE + 10_000), ("apple", {"amount": 4}, BASE + 20_000)])
    driver.pipe_many("orders", [("apple", {"order": 1}, BASE + 25_000), ("apple", {"order": 2}, BASE + 15_000)])
    assert [r.value for r in driver.read("orders-priced")] == [{"order": 1, "price": 4}, {"order": 2, "price": 3}]
    assert driver.read("orders-priced-late") == []  # held for 15 minutes of the orders' time
    driver.pipe("prices", "apple", {"amount": 5}, timestamp=BASE + 12_000)  # written late
    driver.pipe("orders", "apple", {"order": 3}, timestamp=BASE + 20 * 60_000)  # lets go of orders 2 and 1
    assert [r.value for r in driver.read("orders-priced-late")] == [{"order": 2, "price": 5}, {"order": 1, "price": 4}]


def test_the_one_step_api_keeps_a_versioned_table_the_same_way():
    app = app_()
    prices = app.table("prices", versioned=60_000)
    app.join("orders", prices, "out", name="priced", joiner=lambda o, p: p, how="left")
    app.count_table(prices, "bands", name="bands", group_by=lambda k, p: str(p // 10))
    driver = TopologyTestDriver(app)
    driver.pipe_many("prices", [("apple", 12, BASE + 5_000), ("apple", 23, BASE + 1_000)])  # the second: older
    driver.pipe_many("orders", [("apple", "o1", BASE + 2_000), ("apple", "o2", BASE + 6_000)])
    assert [r.value for r in driver.read("out")] == [23, 12]
    assert {r.key: r.value for r in driver.read("bands")} == {"1": 1}  # the out-of-order 23 changed no band
    kinds = {s.name: s.kind for sub in app.subtopologies.values() for s in sub.stores}
    assert kinds["priced-prices"] == kinds["bands-source"] == "versioned"


def test_a_dead_lettered_update_leaves_the_history_and_its_stream_time_as_they_were():
    def joiner(a, b):
        if a == "poison":
            raise ValueError("bad row")
        return f"{a}+{b}"

    app = app_()
    app.table("left", versioned=1_000).join(app.table("right"), joiner, name="both").to_stream().to("out")
    driver = TopologyTestDriver(app)
    driver.pipe_many("right", [("k", "r", BASE)])
    # the poison row, an hour ahead, is dead-lettered after the store took it: its version and the store's
    # time go back with it, so the next row, an hour behind it, is not too old
    driver.pipe_many("left", [("k", "poison", BASE + 3_600_000), ("k", "l1", BASE + 10)])
    assert [(d.error, d.offset) for d in driver.dead_letters()] == [("ValueError: bad row", 0)]
    assert [r.value for r in driver.read("out")] == ["l1+r"]
    assert driver.store("both-left").get("k") == "l1" and driver.dropped == {}


@pytest.mark.parametrize("versioned", [None, timedelta(minutes=10)])
def test_an_unreadable_row_of_a_global_table_dead_letters_the_records_that_find_it(versioned):
    """A global table's copy keeps its rows as the topic holds them: a row that cannot be deserialized fails
    the lookups that find it (their records go to the dead-letter topic, saying why), and the job goes on,
    plain or versioned; the row's key joins again once a readable row replaces it."""
    driver = TopologyTestDriver(_rated(versioned))
    driver.pipe("rates", "eur", 1.1, timestamp=BASE)
    driver.pipe("rates", "usd", 0.9, timestamp=BASE)
    driver.pipe("rates", b"eur", b"\xff{", timestamp=BASE + 1_000, serialized=True)
    driver.pipe_many("orders", [("o1", {"id": 1, "cur": "eur"}, BASE + 2_000),
                                ("o2", {"id": 2, "cur": "usd"}, BASE + 2_000)])
    assert [r.value for r in driver.read("out")] == [[2, 0.9]]
    (letter,) = driver.dead_letters()
    assert letter.key == b"o1" and letter.error.startswith(
        "SerdeError: global table 'rates': the row of key 'eur' cannot be read: cannot deserialize 2 bytes")
    from eos.errors import SerdeError

    with pytest.raises(SerdeError, match="global table 'rates': the row of key 'eur' cannot be read"):
        list(driver.store("rates").all())  # (a query of every row says which one it could not read)
    driver.pipe("rates", "eur", 1.2, timestamp=BASE + 3_000)
    driver.pipe("orders", "o3", {"id": 3, "cur": "eur"}, timestamp=BASE + 4_000)
    assert [r.value for r in driver.read("out")] == [[3, 1.2]]
    if versioned is not None:  # (a lookup at a time before the unreadable row finds the row before it)
        driver.pipe("orders", "o4", {"id": 4, "cur": "eur"}, timestamp=BASE + 500)
        assert [r.value for r in driver.read("out")] == [[4, 1.1]]
