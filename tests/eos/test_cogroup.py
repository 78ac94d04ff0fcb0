"""Cogrouped streams (Kafka Streams' `cogroup`), through the test driver: several grouped streams folded into
one aggregate per key, each by its own aggregator, in one task and one store; against a reference fold of
the same records, with crashes, record caches, a stream keyed anew, every kind of window, and the mistakes a
user makes refused where they are made."""

from __future__ import annotations

import random
from typing import Any

import pytest

from eos import Application
from eos.serde import StringSerde
from eos.testing import TopologyTestDriver
from eos.windows import SessionWindows, SlidingWindows, TumblingWindows, Windowed

BASE = 1_800_000_000_000


def app_(**settings: Any) -> Application:
    return Application("t", bootstrap_servers="unused:9092", **settings)


def spend(key: str, order: dict, agg: dict) -> dict:
    return {**agg, "orders": agg["orders"] + 1, "spent": agg["spent"] + order["amount"]}


def refund(key: str, refund_: dict, agg: dict) -> dict:
    return {**agg, "refunded": agg["refunded"] + refund_["amount"]}


def visit(key: str, page: str, agg: dict) -> dict:
    return {**agg, "pages": [*agg["pages"], page][-3:]}


def start() -> dict:
    return {"orders": 0, "spent": 0, "refunded": 0, "pages": []}


FOLDS = {"orders": spend, "refunds": refund, "visits": visit}


def shop(app: Application, **aggregate: Any) -> Any:
    orders, refunds, visits = (app.stream(t) for t in ("orders", "refunds", "visits"))
    return (orders.group_by_key().cogroup(spend)
            .cogroup(refunds.group_by_key(), refund)
            .cogroup(visits.group_by_key(), visit))


def records(n: int, seed: int) -> list[tuple[str, str, Any, int]]:
    """(topic, key, value, timestamp) with timestamps rising: a task processes them in this order."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic = rng.choice(["orders", "orders", "refunds", "visits"])
        key = f"c{rng.randrange(7)}"
        value: Any = f"/p{i}" if topic == "visits" else {"amount": rng.randrange(1, 50)}
        out.append((topic, key, None if rng.random() < 0.03 else value, BASE + i * 10))
    return out


def reference(inputs: list[tuple[str, str, Any, int]]) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Each key's updates in order, and its final aggregate (tombstones ignored)."""
    updates: dict[str, list[dict]] = {}
    final: dict[str, dict] = {}
    for topic, key, value, _ in inputs:
        if value is None:
            continue
        final[key] = FOLDS[topic](key, value, final.get(key, start()))
        updates.setdefault(key, []).append(final[key])
    return updates, final


def per_key(driver: TopologyTestDriver, topic: str) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for r in driver.read(topic):
        out.setdefault(r.key, []).append(r.value)
    return out


@pytest.mark.parametrize("partitions", [1, 3])
def test_three_grouped_streams_fold_into_one_aggregate_per_key_each_by_its_own_aggregator(partitions):
    app = app_()
    totals = shop(app).aggregate(start, name="totals")
    totals.to_stream().to("totals-out")
    (sub,) = app.subtopologies.values()  # one task per partition reads all three topics: no topic in between
    assert sorted(sub.inputs) == ["orders", "refunds", "visits"] and [s.name for s in sub.stores] == ["totals-store"]
    described = str(app.describe())
    assert "totals-1-cogroup (cogroup" in described and "totals (cogrouped aggregation" in described
    inputs = records(400, seed=partitions)
    with TopologyTestDriver(app, partitions=partitions) as driver:
        driver.pipe_records(inputs)
        updates, final = reference(inputs)
        assert per_key(driver, "totals-out") == updates
        assert dict(driver.store("totals-store").all()) == final
        assert driver.dead_letters() == []
        report = driver.check_exactly_once(inputs, crashes=10, seed=partitions)
        assert report.crashes  # (the batches it killed)


def test_a_record_an_aggregator_fails_on_is_dead_lettered_with_its_own_topic_and_the_rest_go_on():
    app = app_()
    shop(app).aggregate(start, name="totals").to_stream().to("totals-out")
    with TopologyTestDriver(app) as driver:
        driver.pipe_records([("orders", "c1", {"amount": 5}, BASE), ("refunds", "c1", {"amount": "x"}, BASE + 1),
                             ("visits", "c1", "/home", BASE + 2), ("refunds", "c1", {"amount": 2}, BASE + 3)])
        (dead,) = driver.dead_letters()
        assert (dead.topic, dead.offset, dead.error_type) == ("refunds", 0, "TypeError")
        assert driver.read("totals-out")[-1].value == {"orders": 1, "spent": 5, "refunded": 2, "pages": ["/home"]}


def test_a_stream_keyed_anew_goes_through_its_own_repartition_topic_with_the_partitions_of_the_others():
    app = app_()
    orders = app.stream("orders")
    clicks = app.stream("clicks").select_key(lambda session, click: click["customer"])  # keyed anew
    (orders.group_by_key().cogroup(lambda k, o, n: n + o["amount"])
     .cogroup(clicks.group_by_key(), lambda k, c, n: n + 1000)
     .aggregate(lambda: 0, name="score", aggregate_serde="long")).to_stream().to("scores")
    assert "t-score-2-repartition" in app.internal_topics and "t-score-1-repartition" not in app.internal_topics
    rng = random.Random(5)
    inputs = [("orders", f"c{i % 5}", {"amount": rng.randrange(1, 9)}, BASE + i) if i % 3 else
              ("clicks", f"s{i}", {"customer": f"c{rng.randrange(5)}"}, BASE + i) for i in range(300)]
    with TopologyTestDriver(app, partitions={"orders": 4, "clicks": 2}) as driver:
        assert driver.cluster.partitions("t-score-2-repartition") == 4  # as many as orders, not clicks
        driver.pipe_records(inputs)
        expected: dict[str, int] = {}
        for topic, key, value, _ in inputs:
            customer = key if topic == "orders" else value["customer"]
            expected[customer] = expected.get(customer, 0) + (value["amount"] if topic == "orders" else 1000)
        assert {k: v[-1] for k, v in per_key(driver, "scores").items()} == expected
        assert dict(driver.store("score-store").all()) == expected
        driver.check_exactly_once(inputs, crashes=8, seed=5)


@pytest.mark.parametrize("cache", [0, 1 << 20])
def test_a_cogroup_of_one_stream_equals_its_grouped_aggregation_with_or_without_a_record_cache(cache):
    """One stream's cogroup is the batch fold's case (numbers, one line of stateless steps): the same
    results as the grouped stream's aggregate, per record or per key and commit."""
    def build(cogrouped: bool) -> Application:
        app = app_(cache_max_bytes=cache)
        grouped = app.stream("payments").filter(lambda k, p: p["amount"] > 0).group_by_key()
        add = lambda k, p, total: total + p["amount"]
        table = (grouped.cogroup(add).aggregate(lambda: 0, name="paid", aggregate_serde="long") if cogrouped else
                 grouped.aggregate(lambda: 0, add, name="paid", aggregate_serde="long"))
        table.to_stream().to("paid-out")
        return app

    rng = random.Random(cache)
    inputs = [("payments", f"c{rng.randrange(20)}", {"amount": rng.randrange(-2, 30)}, BASE + i) for i in range(500)]
    got = []
    for cogrouped in (True, False):
        with TopologyTestDriver(build(cogrouped), partitions=2) as driver:
            driver.pipe_records(inputs)
            got.append(([(r.key, r.value, r.timestamp) for r in driver.read("paid-out")],
                        dict(driver.store("paid-store").all())))
    assert got[0] == got[1] and got[0][0]


def windowed_reference(inputs: list[tuple[str, str, Any, int]], size: int) -> dict[Windowed, dict]:
    out: dict[Windowed, dict] = {}
    for topic, key, value, ts in inputs:
        if value is None:
            continue
        start_ = ts - ts % size
        w = Windowed(key, start_, start_ + size)
        out[w] = FOLDS[topic](key, value, out.get(w, start()))
    return out


def test_windowed_cogroups_tumbling_sliding_and_session_match_the_grouped_aggregation_of_one_merged_topic():
    """The same records as three topics cogrouped, and as one topic aggregated with one function that folds
    each by its kind: every window kind's results are the same, record for record."""
    inputs = records(300, seed=9)

    def merged(key: str, value: dict, agg: dict) -> dict:
        return FOLDS[value["from"]](key, value["value"], agg)

    def session_merge(key: str, a: dict, b: dict) -> dict:
        return {"orders": a["orders"] + b["orders"], "spent": a["spent"] + b["spent"],
                "refunded": a["refunded"] + b["refunded"], "pages": (a["pages"] + b["pages"])[-3:]}

    for windows, merger, emit in [(TumblingWindows(200, grace=0), None, "update"),
                                  (TumblingWindows(200, grace=0), None, "final"),
                                  (SlidingWindows(150, grace=20), None, "update"),
                                  (SessionWindows(25, grace=0), session_merge, "update")]:
        results = []
        for cogrouped in (True, False):
            app = app_()
            if cogrouped:
                table = shop(app).window(windows, emit=emit).aggregate(start, merger=merger, name="w")
            else:
                table = app.stream("all").group_by_key().window(windows, emit=emit).aggregate(
                    start, merged, merger=merger, name="w")
            table.to_stream().to("out")
            with TopologyTestDriver(app) as driver:
                driver.pipe_records(
                    inputs if cogrouped else
                    [("all", k, None if v is None else {"from": t, "value": v}, ts) for t, k, v, ts in inputs])
                results.append([(r.key, r.value, r.timestamp) for r in driver.read("out")])
        assert results[0] == results[1] and results[0], windows
        if isinstance(windows, TumblingWindows) and emit == "update":
            assert {k: v for k, v, _ in results[0]} == windowed_reference(inputs, 200)


def test_a_windowed_cogroup_survives_crashes_and_keeps_its_sliding_windows_records_in_their_own_serdes():
    app = app_()
    orders = app.stream("orders")
    visits = app.stream("visits", value_serde="string")
    (orders.group_by_key().cogroup(lambda k, o, agg: [*agg, o["amount"]])
     .cogroup(visits.group_by_key(), lambda k, page, agg: [*agg, page])
     .window(SlidingWindows(100, grace=10))
     .aggregate(list, name="recent")).to_stream().to("recent-out")
    rng = random.Random(3)
    inputs = [("orders", f"c{i % 3}", {"amount": i}, BASE + i * 7) if rng.random() < 0.5 else
              ("visits", f"c{i % 3}", f"/p{i}", BASE + i * 7) for i in range(200)]
    with TopologyTestDriver(app, partitions=2) as driver:
        driver.pipe_records(inputs)
        out = driver.read("recent-out")
        assert out and {type(x) for r in out for x in r.value} == {int, str}
        driver.check_exactly_once(inputs, crashes=10, seed=3)


def test_cogroup_mistakes_are_refused_where_they_are_made():
    app = app_()
    orders, refunds = app.stream("orders"), app.stream("refunds")
    with pytest.raises(TypeError, match="aggregator must be a function"):
        orders.group_by_key().cogroup("sum")
    cogrouped = orders.group_by_key().cogroup(spend)
    with pytest.raises(TypeError, match="cogroup takes a grouped stream"):
        cogrouped.cogroup(refunds, refund)
    with pytest.raises(TypeError, match="cogroup takes a grouped stream"):
        cogrouped.cogroup(refunds.group_by_key().window(TumblingWindows(10)), refund)
    grouped = refunds.group_by_key()
    with pytest.raises(ValueError, match="already in this cogroup"):
        cogrouped.cogroup(grouped, refund).cogroup(grouped, refund)
    with pytest.raises(ValueError, match="keys alike"):
        cogrouped.cogroup(app.stream("visits", key_serde="long").group_by_key(), visit)
    with pytest.raises(ValueError, match="same Application"):
        cogrouped.cogroup(app_().stream("x").group_by_key(), visit)
    with pytest.raises(ValueError, match="session windows need merger"):
        cogrouped.window(SessionWindows(10)).aggregate(start, name="s")
    with pytest.raises(TypeError, match="initializer must be a function"):
        cogrouped.aggregate({}, name="a")
    # keyed alike by two instances of one serde: accepted
    app.stream("visits2", key_serde=StringSerde()).group_by_key().cogroup(visit).cogroup(
        app.stream("orders2").group_by_key(), spend).aggregate(start, name="ok")


def test_the_ledger_names_what_was_filtered_behind_a_repartition_topic_apart():
    """A tombstone of the stream keyed anew is filtered by the cogroup's task, behind the repartition topic:
    the ledger says so (`through`), so that the audit does not take it for an input that produced nothing on
    every path; a tombstone read by the cogroup's task itself is filtered where it was read."""
    app = app_()
    a = app.stream("a").group_by_key()
    b = app.stream("b").select_key(lambda key, value: key.upper()).group_by_key()
    (a.cogroup(lambda k, v, n: n + 1).cogroup(b, lambda k, v, n: n + 10).aggregate(lambda: 0, name="n")
     .to_stream().to("out"))
    with TopologyTestDriver(app) as driver:
        driver.pipe_records([("a", "K", 1, BASE), ("b", "k", None, BASE + 1), ("a", "K", None, BASE + 2),
                             ("b", "k", 2, BASE + 3)])
        assert [r.value for r in driver.read("out")] == [1, 11]
        entries = driver.ledger()
        filtered = {tp: list(bm) for e in entries for tp, bm in e.filtered.items() if bm}
        through = {tp: list(bm) for e in entries for tp, bm in e.through.items() if bm}
        assert filtered == {("b", 0): [0], ("a", 0): [1]} and through == {("b", 0): [0]}
