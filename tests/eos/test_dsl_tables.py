"""Tables in the fluent DSL, through the test driver: filter, map_values and to_stream with deletions;
table-table and foreign-key joins; re-grouped table aggregations; streams joined with filtered, joined
and aggregated tables in one task; every join the audit can replay listed with its output topic."""

from __future__ import annotations

import random

import pytest
from rich.console import Console

from eos import Application
from eos.audit import audit_joins
from eos.audit.auditor import _unreplayed_joins
from eos.audit.report import render
from eos.audit.windows import replay_prefix
from eos.records import Record
from eos.testing import TopologyTestDriver
from eos.windows import TumblingWindows

BASE = 1_800_000_000_000


def app_() -> Application:
    return Application("t", bootstrap_servers="unused:9092")


def test_a_table_filtered_and_mapped_forwards_deletions_for_rows_that_leave_it():
    app = app_()
    customers = app.table("customers")
    gold = customers.filter(lambda k, c: c["tier"] == "gold", name="gold").map_values(lambda c: c["name"])
    gold.to_stream().to("gold-names")
    customers.filter_not(lambda k, c: c["tier"] == "gold").to_stream().to("others")
    assert list(app.subtopologies) == ["gold"]
    driver = TopologyTestDriver(app)
    driver.pipe_many("customers", [("c1", {"tier": "gold", "name": "Ann"}, BASE),
                                   ("c2", {"tier": "basic", "name": "Bob"}, BASE + 1),
                                   ("c1", {"tier": "basic", "name": "Ann"}, BASE + 2),  # leaves the gold table
                                   ("c2", None, BASE + 3)])                            # deleted
    assert [(r.key, r.value) for r in driver.read("gold-names")] == [
        ("c1", "Ann"), ("c2", None), ("c1", None), ("c2", None)]
    assert [(r.key, r.value) for r in driver.read("others")] == [
        ("c1", None), ("c2", {"tier": "basic", "name": "Bob"}), ("c1", {"tier": "basic", "name": "Ann"}), ("c2", None)]


def test_a_stream_joins_a_filtered_table_and_an_aggregated_table_in_one_task():
    app = app_()
    gold = app.table("customers").filter(lambda k, c: c["tier"] == "gold")
    spent = app.stream("payments").group_by_key().sum(lambda p: p["amount"], name="spent")
    orders = app.stream("orders")
    orders.join(gold, lambda o, c: {**o, "vip": True}, name="vip").to("vip-orders")
    orders.left_join(spent, lambda o, total: {**o, "spent": total}, name="with_spent").to("orders-spent")
    assert len(app.subtopologies) == 1  # customers, payments and orders are inputs of one task
    (sub,) = app.subtopologies.values()
    # the filtered table is replayed through its filter by the join audit; the aggregated one cannot be
    (vip,) = sub.joins
    assert (vip.kind, vip.left, vip.right, vip.left_prefix, vip.output) == ("stream-table", "orders", "customers", (),
                                                                            "vip-orders")
    replay = replay_prefix(vip.right_prefix, stand_in=False)
    assert [(r.key, r.value) for r in replay(Record("c1", {"tier": "gold"}, "customers", 0, 0, BASE))] == [
        ("c1", {"tier": "gold"})]
    assert [(r.key, r.value) for r in replay(Record("c1", {"tier": "basic"}, "customers", 0, 1, BASE))] == [
        ("c1", None)]  # the row leaves the filtered table
    assert [(name, j.kind, j.how) for name, j, _ in sub.unreplayed_joins] == [
        ("with_spent", "stream-table", "left")]  # and `audit_application` says so
    assert "lineage audit alone" in sub.unreplayed_joins[0][2]
    only_spent = app_()
    only_spent.stream("orders").left_join(only_spent.stream("payments").group_by_key().sum(
        lambda p: p["amount"], name="spent"), lambda o, total: {**o, "spent": total}, name="with_spent").to("out")
    with pytest.raises(ValueError, match=r"has no join the audit can replay: 'with_spent' \(sub-topology '\w+'\): "
                                         r"the join audit replays a join"):
        audit_joins(only_spent)
    # what `eos audit app` prints for it: the flow and why, no table of zeros and no verdict of a check not run
    console = Console(record=True, width=200)
    for report in _unreplayed_joins(app, "unused:9092", app.subtopologies):
        assert report.verdict == "PASS" and report.violations == 0
        render(report, console)
    shown = console.export_text()
    assert shown.count("not checked: ") == 1 and "not checked: with_spent: the join audit replays" in shown
    assert "exactly-once audit (join): customers, payments, orders ->" in shown
    assert "input records" not in shown and "violation(s)" not in shown
    driver = TopologyTestDriver(app)
    driver.pipe_records([("customers", "c1", {"tier": "gold"}, BASE), ("customers", "c2", {"tier": "basic"}, BASE),
                         ("payments", "c1", {"amount": 5}, BASE + 1), ("payments", "c1", {"amount": 7}, BASE + 2),
                         ("orders", "c1", {"id": 1}, BASE + 3), ("orders", "c2", {"id": 2}, BASE + 4),
                         ("customers", "c1", {"tier": "basic"}, BASE + 5), ("orders", "c1", {"id": 3}, BASE + 6)])
    assert [r.value["id"] for r in driver.read("vip-orders")] == [1]  # c1 left the gold table before order 3
    assert [(r.value["id"], r.value["spent"]) for r in driver.read("orders-spent")] == [(1, 12), (2, None), (3, 12)]


def _table_join_reference(left: dict, right: dict, how: str) -> dict:
    keys = set(left) | set(right) if how == "outer" else set(left)
    out = {}
    for k in keys:
        lv, rv = left.get(k), right.get(k)
        if how == "inner" and (lv is None or rv is None):
            continue
        out[k] = [lv, rv]
    return out


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_random_table_table_joins_in_the_dsl_end_at_the_join_of_the_final_tables(how):
    rng = random.Random(7)
    app = app_()
    left, right = app.table("left"), app.table("right")
    left.join(right, lambda a, b: [a, b], how=how, name="both").to_stream().to("joined")
    (sub,) = app.subtopologies.values()
    assert [(j.kind, j.output) for j in sub.joins] == [("table-table", "joined")]
    driver = TopologyTestDriver(app)
    tables: dict[str, dict] = {"left": {}, "right": {}}
    for i in range(300):
        topic, key = rng.choice(["left", "right"]), f"k{rng.randrange(8)}"
        value = None if rng.random() < 0.2 else rng.randrange(100)
        driver.pipe(topic, key, value, timestamp=BASE + i)
        if value is None:
            tables[topic].pop(key, None)
        else:
            tables[topic][key] = value
    last: dict = {}
    for r in driver.read("joined"):
        last[r.key] = r.value
    assert {k: v for k, v in last.items() if v is not None} == _table_join_reference(tables["left"], tables["right"],
                                                                                      how)


def test_a_foreign_key_join_of_a_filtered_table_in_the_dsl():
    app = app_()
    accounts = app.table("accounts").filter(lambda k, a: a.get("open", True), name="open_accounts")
    customers = app.table("customers")
    accounts.left_join(customers, lambda a, c: {"account": a["id"], "name": c and c["name"]},
                       foreign_key=lambda a: a["customer"], name="owner").to_stream().to("owners")
    subs = app.subtopologies
    assert list(subs) == ["open_accounts", "owner.right"]
    assert set(app.internal_topics) == {"t-owner-subscription", "t-owner-response"}
    driver = TopologyTestDriver(app)
    driver.pipe_records([("customers", "c1", {"name": "Ann"}, BASE), ("customers", "c2", {"name": "Bob"}, BASE),
                         ("accounts", "a1", {"id": 1, "customer": "c1"}, BASE + 1),
                         ("accounts", "a2", {"id": 2, "customer": "c9"}, BASE + 2),
                         ("customers", "c1", {"name": "Anna"}, BASE + 3),
                         ("accounts", "a2", {"id": 2, "customer": "c2"}, BASE + 4),
                         ("accounts", "a1", {"id": 1, "customer": "c1", "open": False}, BASE + 5)])
    last = {}
    for r in driver.read("owners"):
        last[r.key] = r.value
    assert last == {"a1": None, "a2": {"account": 2, "name": "Bob"}}  # a1 closed: gone from the joined table


def test_re_grouped_table_aggregations_follow_rows_between_groups():
    app = app_()
    customers = app.table("customers")
    by_tier = customers.group_by(lambda k, c: (c["tier"], c))
    by_tier.count(name="per_tier").to_stream().to("per-tier")
    by_tier.sum(lambda c: c["credit"], name="credit").to_stream().to("credit")
    by_tier.aggregate(list, lambda g, c, names: sorted([*names, c["name"]]),
                      lambda g, c, names: [n for n in names if n != c["name"]], name="names") \
        .to_stream().to("names")
    assert sorted(app.internal_topics) == ["t-credit-repartition", "t-names-repartition", "t-per_tier-repartition"]
    driver = TopologyTestDriver(app)
    driver.pipe_many("customers", [("c1", {"tier": "gold", "credit": 5, "name": "Ann"}, BASE),
                                   ("c2", {"tier": "gold", "credit": 3, "name": "Bob"}, BASE + 1),
                                   ("c1", {"tier": "basic", "credit": 4, "name": "Ann"}, BASE + 2),
                                   ("c2", None, BASE + 3)])

    def final(topic: str) -> dict:
        return {r.key: r.value for r in driver.read(topic)}
    assert final("per-tier") == {"gold": 0, "basic": 1}
    assert final("credit") == {"gold": 0, "basic": 4}
    assert final("names") == {"gold": [], "basic": ["Ann"]}
    assert driver.store("per_tier-store").get("basic") == 1


def test_a_stream_made_a_table_is_joined_counted_and_filtered_by_each_keys_latest_row():
    app = app_()
    places = app.stream("moves").to_table(name="places")  # each record the new row of its key, None a deletion
    app.stream("orders").left_join(places, lambda o, p: {"id": o["id"], "city": p and p["city"]},
                                   name="ship").to("shipping")
    places.group_by(lambda k, p: (p["city"], p)).count(name="residents").to_stream().to("residents")
    places.filter(lambda k, p: p["city"] != "x").to_stream().to("kept")
    assert "Processor: places (to_table; stores: [])" in str(app.describe())
    driver = TopologyTestDriver(app)
    driver.pipe_records([("moves", "c1", {"city": "a"}, BASE), ("moves", "c2", {"city": "a"}, BASE + 1),
                         ("orders", "c1", {"id": 1}, BASE + 2), ("moves", "c1", {"city": "x"}, BASE + 3),
                         ("orders", "c1", {"id": 2}, BASE + 4), ("moves", "c2", None, BASE + 5),
                         ("orders", "c2", {"id": 3}, BASE + 6)])
    assert [(r.key, r.value) for r in driver.read("shipping")] == [
        ("c1", {"id": 1, "city": "a"}), ("c1", {"id": 2, "city": "x"}), ("c2", {"id": 3, "city": None})]
    assert [(r.key, r.value) for r in driver.read("residents")] == [("a", 1), ("a", 2), ("a", 1), ("x", 1), ("a", 0)]
    assert [(r.key, r.value) for r in driver.read("kept")] == [
        ("c1", {"city": "a"}), ("c2", {"city": "a"}), ("c1", None), ("c2", None)]  # moved out, deleted


def test_a_rekeyed_stream_made_a_table_goes_through_a_repartition_topic_first():
    app = app_()
    latest = app.stream("logins").map(lambda user, login: (login["device"], user)).to_table(name="device_owner")
    app.stream("alerts").join(latest, lambda alert, user: {**alert, "user": user}, name="owned").to("owned-alerts")
    assert list(app.internal_topics) == ["t-device_owner-repartition"]
    driver = TopologyTestDriver(app, partitions=2)
    driver.pipe_records([("logins", "ann", {"device": "d1"}, BASE), ("logins", "bob", {"device": "d2"}, BASE + 1),
                         ("logins", "bob", {"device": "d1"}, BASE + 2)])  # through the topic, into the table
    driver.pipe_records([("alerts", "d1", {"n": 1}, BASE + 3), ("alerts", "d2", {"n": 2}, BASE + 4),
                         ("alerts", "d3", {"n": 3}, BASE + 5)])
    assert sorted((r.key, r.value["user"]) for r in driver.read("owned-alerts")) == [("d1", "bob"), ("d2", "bob")]


def test_a_table_re_grouped_after_a_repartitioned_aggregation_gets_its_partitions_from_that_topic():
    app = app_()  # the second repartition topic is like the first, which start-up creates in the same call
    views = app.stream("views").group_by(lambda page, view: view["user"], name="by_user").count(name="per_user")
    views.group_by(lambda user, n: (str(n), user)).count(name="users_per_count").to_stream().to("histogram")
    driver = TopologyTestDriver(app, partitions=3)
    assert driver.cluster.partitions("t-users_per_count-repartition") == 3
    driver.pipe_many("views", [("home", {"user": "u1"}), ("cart", {"user": "u1"}), ("home", {"user": "u2"})])
    assert {r.key: r.value for r in driver.read("histogram")} == {"1": 1, "2": 1}


def test_foreach_calls_its_function_per_record_and_ends_the_stream():
    app, seen = app_(), []
    app.stream("orders").foreach(lambda key, order: seen.append((key, order["id"])), name="log")
    assert "Processor: log (foreach; stores: [])\n      --> none" in str(app.describe())
    TopologyTestDriver(app).pipe_many("orders", [("c1", {"id": 1}), ("c2", {"id": 2})])
    assert seen == [("c1", 1), ("c2", 2)]


def test_table_dsl_jobs_commit_the_same_results_when_batches_crash():
    app = app_()
    customers = app.table("customers")
    addresses = app.table("addresses")
    profiles = customers.outer_join(addresses, lambda c, a: {"c": c, "a": a}, name="profiles")
    profiles.to_stream().to("profiles")
    orders = app.stream("orders")
    orders.left_join(profiles, lambda o, p: {**o, "p": p}, name="with_profile").to("orders-with-profile")
    customers.group_by(lambda k, c: (c["tier"], c)).count(name="tiers").to_stream().to("tiers")
    app.table("subscriptions").join(customers, lambda s, c: {**s, "tier": c["tier"]},
                                    foreign_key=lambda s: s["customer"], name="sub").to_stream().to("subs")
    places = app.stream("moves").map(lambda k, m: (m["who"], m["city"])).to_table(name="places")
    orders.join(places, lambda o, city: {**o, "city": city}, name="shipping").to("shipping")
    places.group_by(lambda who, city: (city, who)).count(name="residents").to_stream().to("residents")
    inputs = []
    for i in range(40):
        t = BASE + i * 1_000
        inputs += [("customers", f"c{i % 6}", {"tier": "gold" if i % 3 else "basic"}, t),
                   ("addresses", f"c{i % 7}", None if i % 5 == 0 else {"city": f"x{i}"}, t + 1),
                   ("orders", f"c{i % 8}", {"order": i}, t + 2),
                   ("subscriptions", f"s{i % 9}", {"customer": f"c{i % 8}"}, t + 3),
                   ("moves", f"m{i}", {"who": f"c{i % 8}", "city": f"x{i % 4}"}, t + 4)]
    report = TopologyTestDriver(app, partitions=2).check_exactly_once(inputs, crashes=10, seed=5)
    assert report.crashes and report.records > 100


def test_table_dsl_mistakes_are_refused_with_what_to_do():
    app = app_()
    customers = app.table("customers")
    with pytest.raises(ValueError, match="a table cannot be joined with itself"):
        customers.join(customers.filter(lambda k, v: True), lambda a, b: a)
    with pytest.raises(TypeError, match=r"stream\.join\(table"):
        customers.join(app.stream("orders"), lambda a, b: a)  # type: ignore[arg-type]
    windowed = app.stream("clicks").group_by_key().window(TumblingWindows(60_000)).count()
    with pytest.raises(ValueError, match="is windowed"):
        app.stream("views").join(windowed, lambda a, b: a)
    with pytest.raises(ValueError, match="is windowed"):
        windowed.group_by(lambda k, v: (k.key, v))
    with pytest.raises(TypeError, match="made by the DSL"):
        app.join("orders", customers.filter(lambda k, v: True), "out", name="j", joiner=lambda a, b: a)
    with pytest.raises(ValueError, match="foreign-key join is inner or left"):
        app.table("a").join(customers, lambda a, b: a, how="outer", foreign_key=lambda a: a["c"])


def test_a_foreign_key_join_beside_event_time_steps_carries_no_clocks_around_its_cycle():
    """The right side of a foreign-key join in a task with a windowed join: the subscription and response
    topics form a cycle of sub-topologies, where clock markers would bounce for ever."""
    from eos.tables import JoinWindows
    from eos.topology import clocked_topics

    app = app_()
    customers = app.table("customers")
    orders = app.stream("orders")
    orders.join(app.stream("payments"), lambda o, p: [o, p], windows=JoinWindows(60_000), name="paid").to("paid")
    orders.join(customers, lambda o, c: [o, c], name="enriched").to("enriched")
    app.table("accounts").join(customers, lambda a, c: [a, c], foreign_key=lambda a: a["c"], name="owner") \
        .to_stream().to("owners")
    assert [s.name for s in app.subtopologies.values()] == ["paid", "owner"]  # owner.right runs in paid's task
    assert clocked_topics(app.subtopologies) == frozenset()
    driver = TopologyTestDriver(app)
    driver.pipe_records([("customers", "c1", {"n": 1}, BASE), ("accounts", "a1", {"c": "c1"}, BASE + 1),
                         ("orders", "c1", {"o": 1}, BASE + 2)])
    assert [r.value for r in driver.read("owners")] == [[{"c": "c1"}, {"n": 1}]]
