"""The processor graph and the fluent DSL, through the test driver: many processors in one task and one
transaction, cut into sub-topologies only at topics; fan-out, fan-in, shared stores, branches, automatic
repartitioning, and a record's processing atomic across the whole graph."""

from __future__ import annotations

import functools
import re
from decimal import Decimal

import pytest

from eos import Application, Processor, store
from eos.examples.wordcount import Milestones, WordCount
from eos.tables import JoinWindows
from eos.testing import TopologyTestDriver
from eos.windows import SessionWindows, TumblingWindows, Windowed

BASE = 1_800_000_000_000


def app_() -> Application:
    return Application("g", bootstrap_servers="unused:9092")


def test_a_chain_of_operators_is_one_subtopology_and_repartitions_only_after_a_key_change():
    app = app_()
    clicks = app.stream("clicks").filter(lambda k, v: v["ok"]).map_values(lambda v: {**v, "n": 1})
    clicks.group_by_key().window(TumblingWindows(60_000)).count(name="per_user").to_stream().to("per-user")
    clicks.group_by(lambda k, v: v["page"], name="by_page").count(name="per_page").to_stream().to("per-page")
    subs = app.subtopologies
    assert list(subs) == ["filter_1", "per_page"]  # the filter's task holds the filter, map, window count
    first = subs["filter_1"]
    assert first.inputs == ("clicks",) and set(first.output_topics) == {"per-user", "g-per_page-repartition"}
    assert [s.name for s in first.stores] == ["per_user-store"]
    assert subs["per_page"].inputs == ("g-per_page-repartition",)
    assert list(app.internal_topics) == ["g-per_page-repartition"]

    driver = TopologyTestDriver(app)
    driver.pipe_many("clicks", [("u1", {"ok": True, "page": "home"}, BASE), ("u1", {"ok": False, "page": "x"}, BASE),
                                ("u2", {"ok": True, "page": "home"}, BASE + 1), ("u1", {"ok": True, "page": "cart"},
                                                                                  BASE + 2)])
    assert [(r.key.key, r.value) for r in driver.read("per-user")] == [("u1", 1), ("u2", 1), ("u1", 2)]
    assert [(r.key, r.value) for r in driver.read("per-page")] == [("home", 1), ("home", 2), ("cart", 1)]
    assert isinstance(driver.records("per-user")[0].key, Windowed)


def test_stateless_operators_and_their_signatures():
    app = app_()
    s = app.stream("in")
    s.map(lambda k, v: (v["to"], k)).to("mapped")
    s.flat_map_values(lambda v: v["items"]).to("items")
    s.flat_map(lambda k, v: [(f"{k}{i}", i) for i in range(2)]).to("pairs")
    s.select_key(lambda k, v: k.upper()).filter_not(lambda k, v: v["to"] == "z").to("upper")
    seen = []
    s.peek(lambda k, v: seen.append(k)).to("peeked")
    driver = TopologyTestDriver(app)
    driver.pipe("in", "a", {"to": "b", "items": [1, 2]})
    driver.pipe("in", "c", {"to": "z", "items": []})
    assert [(r.key, r.value) for r in driver.read("mapped")] == [("b", "a"), ("z", "c")]
    assert [(r.key, r.value) for r in driver.read("items")] == [("a", 1), ("a", 2)]
    assert [(r.key, r.value) for r in driver.read("pairs")] == [("a0", 0), ("a1", 1), ("c0", 0), ("c1", 1)]
    assert [r.key for r in driver.read("upper")] == ["A"]
    assert seen == ["a", "c"] and len(app.subtopologies) == 1


def test_split_branches_and_merge():
    app = app_()
    branches = (app.stream("in").split(name="route-")
                .branch(lambda k, v: v > 100, name="big").branch(lambda k, v: v > 10, name="medium")
                .default_branch(name="small"))
    assert list(branches) == ["route-big", "route-medium", "route-small"]  # (Kafka Streams' keys: prefix, name)
    branches["route-big"].to("big")
    branches["route-medium"].merge(branches["route-small"], name="rest").map_values(lambda v: -v).to("rest")
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("a", 500), ("b", 50), ("c", 5)])
    assert [r.value for r in driver.read("big")] == [500]
    assert [r.value for r in driver.read("rest")] == [-50, -5]
    text = str(app.describe())
    assert "Processor: route- (split; stores: [])\n      --> route-big, route-medium, route-small" in text
    split = app_().stream("third").split()  # (another job: this one's driver has run)
    split.default_branch()
    with pytest.raises(ValueError, match="default branch must be the last"):
        split.branch(lambda k, v: True)


def test_split_names_its_branches_as_kafka_streams_and_a_chain_adds_steps_where_the_branch_is_declared():
    """Kafka Streams' `BranchedKStream` map: the split's name as a prefix, then the branch's name or position
    ("1", "2", ...; "0" the default branch); `chain=` (`Branched.withFunction`/`withConsumer`): the branch's entry
    is what the function returns, none for None."""
    app = app_()
    unnamed = app.stream("in").split().branch(lambda k, v: v > 100).branch(lambda k, v: v > 10).default_branch()
    assert list(unnamed) == ["1", "2", "0"]
    named = (app.stream("in2").split(name="size-")
             .branch(lambda k, v: v > 100, name="big", chain=lambda big: big.map_values(lambda v: v * 10))
             .branch(lambda k, v: v > 10, chain=lambda medium: medium.to("medium"))   # returns None: not in the map
             .default_branch(chain=lambda small: small.filter(lambda k, v: v > 0)))
    assert list(named) == ["size-big", "size-0"]
    unnamed["1"].merge(unnamed["2"]).to("over-ten")
    named["size-big"].to("big")
    named["size-0"].to("small")
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("in", [("a", 500), ("b", 50), ("c", 5)])
        driver.pipe_many("in2", [("a", 500), ("b", 50), ("c", 5), ("d", -5)])
        assert [r.value for r in driver.read("over-ten")] == [500, 50]
        assert [r.value for r in driver.read("big")] == [5000]
        assert [r.value for r in driver.read("medium")] == [50]
        assert [r.value for r in driver.read("small")] == [5]
    assert "Processor: size- (split; stores: [])\n      --> size-big, size-2, size-0" in str(app.describe())
    again = app_().stream("in").split(name="s-").branch(lambda k, v: v, name="x")
    with pytest.raises(ValueError, match="already has a branch 's-x'"):
        again.branch(lambda k, v: v, name="x")
    with pytest.raises(TypeError, match=r"chain is called as chain\(stream\)"):
        again.branch(lambda k, v: v, chain=lambda: None)
    with pytest.raises(TypeError, match="the chain of branch 's-0' returns a stream \\(or None\\), got dict"):
        again.default_branch(chain=lambda stream: {"s": stream})


def test_the_processor_api_word_count_with_a_store_and_punctuation():
    app = app_()
    app.add_source("sentences", "text", value_serde="string")
    app.add_processor("count", WordCount, "sentences")
    app.add_state_store(store("word-counts", key_serde="string", value_serde="long"), "count")
    app.add_sink("out", "word-counts", "count", value_serde="long")
    driver = TopologyTestDriver(app)
    driver.pipe_many("text", [(None, "a b a", BASE), (None, "b", BASE + 30_000), (None, "c", BASE + 61_000)])
    assert sorted((r.key, r.value) for r in driver.read("word-counts")) == [
        ("a", 2), ("a", 2), ("b", 1), ("b", 2), ("c", 1)]  # the first punctuation came with the first record
    assert driver.store("word-counts").get("a") == 2
    assert list(app.subtopologies) == ["count"]


def test_a_second_processor_reads_the_store_its_sibling_wrote_for_the_same_record():
    class EveryTwo(Milestones):
        every = 2

    app = app_()
    app.add_source("sentences", "text", value_serde="string")
    app.add_processor("count", WordCount, "sentences")
    app.add_state_store(store("word-counts", key_serde="string", value_serde="long"), "count")
    app.add_processor("milestones", EveryTwo, "sentences")
    app.connect_processor_and_state_stores("milestones", "word-counts")
    app.add_sink("reached", "reached", "milestones", value_serde="long")
    app.add_sink("out", "word-counts", "count", value_serde="long")
    driver = TopologyTestDriver(app)
    driver.pipe_many("text", [(None, "a b a a", BASE), (None, "b a", BASE + 1), (None, "a a a", BASE + 2)])
    assert [(r.key, r.value) for r in driver.read("reached")] == [("a", 2), ("b", 2), ("a", 4), ("a", 6)]
    assert list(app.subtopologies) == ["count"]


class Tally(Processor):
    """Adds to a shared store and forwards to the child named in the value."""

    def init(self, context):
        super().init(context)
        self.totals = context.store("totals")

    def process(self, record):
        self.totals.put(record.key, (self.totals.get(record.key) or 0) + record.value["n"])
        self.context.forward(record.key, self.totals.get(record.key), to=record.value["to"])


class Reader(Processor):
    def init(self, context):
        super().init(context)
        self.totals = context.store("totals")

    def process(self, record):
        self.context.forward(record.key, {"total": self.totals.get(record.key), "seen": record.value})


def test_two_processors_share_a_store_and_one_fans_out_to_two_sinks_by_name():
    app = app_()
    app.add_source("src", "in")
    app.add_source("queries", "questions")
    app.add_processor("tally", Tally, "src")
    app.add_processor("reader", Reader, "queries")
    app.add_state_store(store("totals", key_serde="string", value_serde="long"), "tally", "reader")
    app.add_sink("evens", "even-out", "tally", value_serde="long")
    app.add_sink("odds", "odd-out", "tally", value_serde="long")
    app.add_sink("answers", "answers", "reader")
    assert list(app.subtopologies) == ["tally"]  # the shared store puts both in one sub-topology
    assert app.subtopologies["tally"].inputs == ("in", "questions")
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("k", {"n": 2, "to": "evens"}, BASE), ("k", {"n": 1, "to": "odds"}, BASE + 1)])
    driver.pipe("questions", "k", "?", timestamp=BASE + 2)
    assert [r.value for r in driver.read("even-out")] == [2] and [r.value for r in driver.read("odd-out")] == [3]
    assert [r.value for r in driver.read("answers")] == [{"total": 3, "seen": "?"}]


def test_a_record_that_fails_anywhere_in_the_graph_leaves_nothing_and_is_dead_lettered_once():
    app = app_()
    s = app.stream("in")
    s.to("copy")  # written before the failing branch runs
    s.group_by_key().count(name="counts").to_stream().to("counts")
    s.map_values(lambda v: 1 / v["d"]).to("inverse")
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("a", {"d": 2}), ("a", {"d": 0}), ("a", {"d": 4})])
    assert [r.value for r in driver.read("copy")] == [{"d": 2}, {"d": 4}]
    assert [r.value for r in driver.read("counts")] == [1, 2]
    assert driver.store("counts-store").get("a") == 2
    (letter,) = driver.dead_letters()
    assert letter.error == "ZeroDivisionError: division by zero" and letter.value == b'{"d":0}'


def test_joins_in_the_dsl_stream_table_and_windowed_stream_stream():
    app = app_()
    customers = app.table("customers")
    orders = app.stream("orders").filter(lambda k, v: v["qty"] > 0)
    orders.left_join(customers, lambda o, c: {**o, "tier": c and c["tier"]}, name="with_tier").to("enriched")
    payments = app.stream("payments")
    orders.join(payments, lambda o, p: {"order": o["id"], "paid": p["amount"]}, windows=JoinWindows(60_000),
                name="paid").to("paid")
    assert len(app.subtopologies) == 1  # orders, customers and payments are co-partitioned inputs of one task
    driver = TopologyTestDriver(app)
    driver.pipe_records([("customers", "c1", {"tier": "gold"}, BASE), ("orders", "c1", {"id": 1, "qty": 1}, BASE + 1),
                         ("orders", "c2", {"id": 2, "qty": 1}, BASE + 2),
                         ("orders", "c1", {"id": 3, "qty": 0}, BASE + 3), ("payments", "c1", {"amount": 9}, BASE + 4)])
    assert [(r.key, r.value["tier"]) for r in driver.read("enriched")] == [("c1", "gold"), ("c2", None)]
    assert [r.value for r in driver.read("paid")] == [{"order": 1, "paid": 9}]


def test_a_join_after_a_key_change_repartitions_that_side():
    app = app_()
    customers = app.table("customers")
    app.stream("orders").select_key(lambda k, v: v["customer"]).join(
        customers, lambda o, c: c["name"], name="named").to("named")
    assert list(app.internal_topics) == ["g-named-left-repartition"]
    assert [s.inputs for s in app.subtopologies.values()] == [("orders",), ("g-named-left-repartition", "customers")]
    driver = TopologyTestDriver(app)
    driver.pipe("customers", "c1", {"name": "Ann"}, timestamp=BASE)
    driver.pipe("orders", "o1", {"customer": "c1"}, timestamp=BASE + 1)
    assert [(r.key, r.value) for r in driver.read("named")] == [("c1", "Ann")]


def test_fused_jobs_commit_the_same_results_when_batches_crash():
    app = app_()
    s = app.stream("in").filter(lambda k, v: v % 7).map_values(lambda v: v * 2)
    s.to("doubled")
    s.group_by(lambda k, v: v % 3, key_serde="long", name="mod").window(TumblingWindows(10_000)).count(name="w") \
        .to_stream().to("windows")
    s.group_by_key().reduce(lambda a, b: a + b, name="sums").to_stream().to("sums")
    inputs = [("in", f"k{i % 4}", i, BASE + i * 1_000) for i in range(60)]
    report = TopologyTestDriver(app, partitions=2).check_exactly_once(inputs, crashes=10, seed=4)
    assert report.crashes and report.records > 40


def test_names_pin_nodes_stores_and_topics_and_bad_graphs_are_refused():
    app = app_()
    with pytest.raises(ValueError, match="parent 'nowhere' does not exist"):
        app.add_processor("p", WordCount, "nowhere")
    app.add_source("s", "in")
    with pytest.raises(ValueError, match="a node named 's' already exists"):
        app.add_source("s", "other")
    with pytest.raises(ValueError, match="no state store named 'missing'"):
        app.add_processor("p", WordCount, "s")
        app.connect_processor_and_state_stores("p", "missing")
    app.add_sink("k", "out", "s")
    with pytest.raises(ValueError, match="parent 'k' is a sink"):
        app.add_processor("q", WordCount, "k")
    other = app_()
    other.stream("in").group_by(lambda k, v: v, name="g").count(name="c")
    assert list(other.internal_topics) == ["g-c-repartition"] and "c-store" in {
        s.name for sub in other.subtopologies.values() for s in sub.stores}


_MISTAKES = {
    # what is not a function is refused where the step is added, not called on each record (which would send
    # every record to the dead-letter topic)
    "stream filter": (lambda a: a.stream("in").filter("x"), TypeError,
                      r"filter: predicate must be a function \(callable\), got 'x' of type str"),
    "stream map_values": (lambda a: a.stream("in").map_values(None), TypeError, "map_values: fn must be a function"),
    "group_by": (lambda a: a.stream("in").group_by({"k": 1}), TypeError, "group_by: key_selector must be a function"),
    "branch": (lambda a: a.stream("in").split().branch(True), TypeError,
               "split 'split-1': predicate must be a function"),
    "joiner": (lambda a: a.stream("in").join(a.table("t"), "joiner"), TypeError,
               "join 'join-[0-9]+': joiner must be a function"),
    "global table key": (lambda a: a.stream("in").join(a.global_table("g"), lambda o, p: o, key="id"), TypeError,
                         "join 'join-[0-9]+': key must be a function"),
    "sum": (lambda a: a.stream("in").group_by_key().sum(value=3), TypeError, "sum: value must be a function"),
    "reduce": (lambda a: a.stream("in").group_by_key().reduce(max(1, 2)), TypeError,
               "reduce: reducer must be a function"),
    "aggregate": (lambda a: a.stream("in").group_by_key().aggregate(dict, None, name="agg"), TypeError,
                  "agg: aggregator must be a function"),
    "table filter": (lambda a: a.table("t").filter(1), TypeError, "filter: predicate must be a function"),
    "table map_values": (lambda a: a.table("t").map_values("v"), TypeError, "map_values: fn must be a function"),
    "table reduce": (lambda a: a.table("t").group_by(lambda k, v: (v, k)).reduce(max, "sub"), TypeError,
                     "reduce: subtractor must be a function"),
    "table aggregate": (lambda a: a.table("t").group_by(lambda k, v: (v, k)).aggregate(int, max, None, name="agg"),
                        TypeError, "agg: subtractor must be a function"),
    "count_table": (lambda a: a.count_table(a.table("t"), "out", name="c", group_by="region"), TypeError,
                    "c: group_by must be a function"),
    "repartition": (lambda a: a.repartition("in", name="r", key="id"), TypeError,
                    "repartition 'r': key must be a function"),
    "one-step aggregate": (lambda a: a.aggregate("in", "out", name="agg", initializer=dict, aggregator=[]), TypeError,
                           "agg: aggregator must be a function"),
    "partitioner": (lambda a: a.stream("in").to("out", partitioner="murmur2"), TypeError,
                    "'out.sink': partitioner must be a function"),
    "processor": (lambda a: a.add_processor("p", "WordCount", a.add_source("s", "in")), TypeError,
                  "'p': factory must be a function"),
    "nameless step": (lambda a: a.process_batch(input="in", output="out")(lambda df: df), ValueError,
                      r"names its step after the function it decorates, and a lambda has no name: give one, "
                      r"app.process_batch\(..., name=\"clean\"\)"),
    "decorated non-function": (lambda a: a.process("in", "out", name="p")("x"), TypeError,
                               "app.process: function must be a function"),
    # functions that cannot take what their step gives them, refused where the step is added too
    "filter of the value": (lambda a: a.stream("in").filter(lambda v: v), TypeError,
                            r"filter: predicate is called as predicate\(key, value\), which <lambda>\(v\) cannot "
                            r"take \(too many positional arguments\); give it a function of 2 arguments"),
    "map_values of both": (lambda a: a.stream("in").map_values(lambda k, v: v), TypeError,
                           r"map_values: fn is called as fn\(value\), which <lambda>\(k, v\) cannot take \(missing "
                           r"a required argument: 'v'\); give it a function of 1 argument"),
    "flat_map of the value": (lambda a: a.stream("in").flat_map(lambda v: [v]), TypeError, r"fn\(key, value\)"),
    "select_key of the value": (lambda a: a.stream("in").select_key(lambda v: v), TypeError, r"fn\(key, value\)"),
    "group_by of the value": (lambda a: a.stream("in").group_by(lambda v: v), TypeError,
                              r"group_by: key_selector is called as key_selector\(key, value\)"),
    "aggregator of two": (lambda a: a.stream("in").group_by_key().aggregate(lambda: 0, lambda v, agg: agg, name="agg"),
                          TypeError, r"agg: aggregator is called as aggregator\(key, value, aggregate\)"),
    "initializer of one": (lambda a: a.stream("in").group_by_key().aggregate(lambda k: 0, lambda k, v, n: n,
                                                                             name="agg"),
                           TypeError, r"agg: initializer is called as initializer\(\), which <lambda>\(k\)"),
    "reducer of three": (lambda a: a.stream("in").group_by_key().reduce(lambda k, a, b: a), TypeError,
                         r"reduce: reducer is called as reducer\(aggregate, value\)"),
    "joiner of one": (lambda a: a.stream("in").join(a.table("t"), lambda pair: pair), TypeError,
                      r"joiner is called as joiner\(left value, right value\)"),
    "global table key of the value": (lambda a: a.stream("in").join(a.global_table("g"), lambda o, p: o,
                                                                    key=lambda v: v["id"]), TypeError,
                                      r"key is called as key\(key, value\)"),
    "table group_by of the value": (lambda a: a.table("t").group_by(lambda v: (v, 1)), TypeError,
                                    r"key_value_selector\(key, value\)"),
    "table adder of two": (lambda a: a.table("t").group_by(lambda k, v: (v, k)).aggregate(
        lambda: 0, lambda v, n: n, lambda g, v, n: n, name="agg"), TypeError, r"adder\(group key, value, aggregate\)"),
    "foreign key of both": (lambda a: a.table("t").join(a.table("u"), lambda x, y: x, foreign_key=lambda k, v: v),
                            TypeError, r"foreign_key is called as foreign_key\(left value\)"),
    "partitioner of two": (lambda a: a.stream("in").to("out", partitioner=lambda k, v: 0), TypeError,
                           r"partitioner is called as partitioner\(key, value, partitions\)"),
    "processor factory of one": (lambda a: a.add_processor("p", lambda ctx: None, a.add_source("s", "in")),
                                 TypeError, r"'p': factory is called as factory\(\)"),
    "decorated function of two": (lambda a: a.process("in", "out", name="p")(lambda k, v: v), TypeError,
                                  r"app.process: function is called as function\(record\)"),
    "timestamp of two": (lambda a: a.stream("in", timestamp=lambda k, v: 0).to("out"), TypeError,
                         r"timestamp is called as timestamp\(record\)"),
    # durations: milliseconds or a timedelta
    "window size as a string": (lambda a: TumblingWindows("1m"), TypeError,
                                r"a tumbling window's size is milliseconds \(an int\) or a datetime.timedelta, "
                                r"got '1m'"),
    "grace as a string": (lambda a: SessionWindows(1000, grace="5s"), TypeError, "its grace is milliseconds"),
    "join window as a string": (lambda a: JoinWindows("10s"), TypeError, "JoinWindows' before is milliseconds"),
    # what Kafka Streams calls otherwise, or has on another object
    "count of a stream": (lambda a: a.stream("in").count(), AttributeError,
                          r"'Stream' object has no attribute 'count': a stream is grouped before it is aggregated or "
                          r"windowed, as in Kafka Streams: stream.group_by_key\(\).count\(...\)"),
    "window of a stream": (lambda a: a.stream("in").window(TumblingWindows(1000)), AttributeError,
                           r"stream.group_by_key\(\).window\(...\)"),
    "camelCase": (lambda a: a.stream("in").groupByKey(), AttributeError,
                  "'Stream' object has no attribute 'groupByKey': it is group_by_key\\(\\) here"),
    "windowedBy": (lambda a: a.stream("in").group_by_key().windowedBy(TumblingWindows(1000)), AttributeError,
                   r"it is window\(...\) here"),
    "suppress": (lambda a: a.stream("in").group_by_key().window(TumblingWindows(1000)).count().suppress(),
                 TypeError, r"suppress\(time_limit\) holds each key's updates back for a time; .*"
                            r"window\(..., emit=\"final\"\)"),
    "count of a table": (lambda a: a.table("t").count(), AttributeError, r"table.group_by\(lambda k, v: \(group key, "
                         r"value\)\).count"),
    "to of a table": (lambda a: a.table("t").to("x"), AttributeError, r"table.to_stream\(\).to\(topic\)"),
    "print": (lambda a: a.stream("in").print(), AttributeError, r"peek\(lambda key, value: print\(key, value\)\)"),
    "transformValues": (lambda a: a.stream("in").transformValues(WordCount), AttributeError,
                        r"transform steps are process\(ProcessorClass\) here \(process_values for one that keeps keys"),
    "branch of a stream": (lambda a: a.stream("in").branch(lambda k, v: v), AttributeError,
                           r"split\(\).branch\(predicate, name=...\)...default_branch\(\)"),
    "queryableStoreName": (lambda a: a.table("t").queryableStoreName(), AttributeError,
                           r"table.store names the store a query reads"),
    "to of a grouped stream": (lambda a: a.stream("in").group_by_key().to("x"), AttributeError,
                               r"grouped.count\(\).to_stream\(\).to\(topic\)"),
    "avro by name": (lambda a: a.stream("in", value_serde="avro"), ValueError,
                     r"unknown serde 'avro'; .* avro in the Schema Registry's wire format is app.avro\(schema\)"),
    "persistent as a string": (lambda a: a.stream("in").group_by_key().count(name="c", persistent="false"), TypeError,
                               r"store 'c-store': persistent is True \(RocksDB\) or False \(in memory\), got 'false'"),
    "stores not a list": (lambda a: a.stream("in").process(WordCount, name="p", stores=store("s")), TypeError,
                          r"process: stores= takes a list of stores, stores=\[store\(...\)\]"),
    "a function for a processor": (lambda a: a.stream("in").process(lambda record: record, name="p"), TypeError,
                                   r"process: processor is called as processor\(\), which <lambda>\(record\) "
                                   r"cannot take .*\. process takes a Processor class \(or a function of no "
                                   r"arguments that makes one\); a function of each record is map_values"),
    "what no one has": (lambda a: a.table("t").group_by(lambda k, v: (k, v)).frobnicate, AttributeError,
                        r"^'GroupedTable' object has no attribute 'frobnicate'$"),
    # topics: Kafka's names
    "topic not a string": (lambda a: a.stream("in").to(123), TypeError,
                           r"^to\(\) takes a topic's name or a function of \(key, value\) choosing one, got 123$"),
    "a chosen topic not a name": (lambda a: a.stream("in").to(lambda k, v: "x", topics=["ok", "not ok"]), ValueError,
                                  "'not ok' is not a Kafka topic name"),
    "topic with a space": (lambda a: a.stream("in").to("orders enriched"), ValueError,
                           "'orders enriched' is not a Kafka topic name"),
    "empty topic": (lambda a: a.stream(""), ValueError, "'' is not a Kafka topic name"),
    "long topic": (lambda a: a.stream("in").to("x" * 250), ValueError, "is not a Kafka topic name"),
    "dots": (lambda a: a.stream("in").to(".."), ValueError, "'..' is not a Kafka topic name"),
    "no topic": (lambda a: a.stream([]), ValueError, r"stream\(\) has no input topic"),
    "topics not a list": (lambda a: a.stream(7), TypeError,
                          r"stream\(\) reads topics: a topic's name or a list of names, got 7"),
    "internal topic": (lambda a: a.stream("in").repartition(name="by page"), ValueError,
                       "'g-by page-repartition' is not a Kafka topic name"),
    # windows
    "no windows": (lambda a: a.stream("in").group_by_key().window(None), TypeError,
                   r"window\(\) takes TumblingWindows, HoppingWindows, SlidingWindows or SessionWindows"),
    "short retention": (lambda a: a.stream("in").group_by_key().window(TumblingWindows(60_000, grace=5_000),
                                                                          retention=60_000).count(name="c"),
                        ValueError, "c: retention must be at least 65000 ms"),
    "retention without windows": (lambda a: a.count("in", "out", name="c", retention=60_000), ValueError,
                                  "c: retention is how long windows are kept"),
    "table join with windows": (lambda a: a.stream("in").join(a.table("t"), lambda x, y: x, windows=JoinWindows(1000)),
                                ValueError, "windows= is for joins of two streams; a stream-table join"),
    "one-step table join with windows": (
        lambda a: a.join("in", a.table("t"), "out", name="j", joiner=lambda x, y: x, windows=JoinWindows(1000)),
        ValueError, "windows= is for joins of two streams; a stream-table join"),
}


@pytest.mark.parametrize("mistake", _MISTAKES)
def test_a_mistake_in_building_a_topology_fails_where_the_step_is_added_and_says_what_is_wrong(mistake):
    build, error, match = _MISTAKES[mistake]
    with pytest.raises(error, match=match):
        build(app_())


def test_forwarding_without_a_child_or_to_an_unknown_one_is_an_error_not_a_silent_loss():
    class Nowhere(Processor):
        def process(self, record):
            self.context.forward(record.key, record.value, to=record.value)

    app = app_()
    app.stream("in").process(Nowhere, name="p").to("out")
    driver = TopologyTestDriver(app)
    driver.pipe("in", "k", "elsewhere")
    (letter,) = driver.dead_letters()
    assert "processor 'p' has no child 'elsewhere'; its children: out.sink" in letter.error


def test_a_function_is_checked_as_it_is_called_a_wrapper_by_its_own_signature_and_a_builtin_not_at_all():
    def values_only(fn):  # (a decorator that adapts a function of the value to a predicate)
        @functools.wraps(fn)
        def predicate(key, value):
            return fn(value)
        return predicate

    app = app_()
    (app.stream("in", value_serde="string").filter(values_only(lambda v: v != "x"), name="not_x")
        .filter(max, name="some")  # (max has no signature Python can tell: it is called as it is)
        .map_values(str.upper, name="up").to("out", value_serde="string"))
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("k", "a"), ("k", "x"), ("k", "")])
    assert [r.value for r in driver.records("out")] == ["A", ""] and not driver.dead_letters()


def test_a_processor_that_returns_its_output_is_an_error_not_a_silent_loss_and_one_without_super_init_runs():
    class Returns(Processor):  # (a processing function returns its outputs; a Processor forwards them)
        def process(self, record):
            return record.key, record.value

    class OwnInit(Processor):  # (Processor.init not called: the context is there all the same)
        def init(self, context):
            self.n = 0

        def process(self, record):
            self.n += 1
            self.context.forward(record.key, self.n)

    app = app_()
    app.stream("in").process(Returns, name="p").to("out")
    app.stream("in2").process(OwnInit, name="q").to("out2")
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("k", "v")])
    driver.pipe_many("in2", [("k", "v"), ("k", "w")])
    (letter,) = driver.dead_letters()
    assert not driver.records("out") and letter.error == (
        "TypeError: Returns.process() returned a value, which goes nowhere: a processor forwards its outputs, "
        "self.context.forward(key, value), and returns None")
    assert [r.value for r in driver.records("out2")] == [1, 2]


def test_kafka_streams_names_of_the_context_and_a_store_refusing_a_key_or_value_say_what_to_change():
    class KafkaStreamsStyle(Processor):  # (what a user of Kafka Streams' ProcessorContext writes)
        def process(self, record):
            self.context.get_state_store("seen").put(record.key, 1)

    class Keeps(Processor):
        def process(self, record):
            kept = self.context.store("kept")
            kept.put(record.key if record.value != "int key" else 5, {1, 2} if record.value == "a set" else 1)
            self.context.forward(record.key, kept.get(record.key))

    app = app_()
    app.stream("in").process(KafkaStreamsStyle, name="p", stores=[store("seen", key_serde="string")])
    app.stream("in2").process(Keeps, name="q", stores=[store("kept", key_serde="string", value_serde="json")]
                              ).to("out", value_serde="json")
    driver = TopologyTestDriver(app)
    driver.pipe_many("in", [("k", "v")])
    driver.pipe_many("in2", [("k", "a set"), ("k", "int key"), ("k", "fine")])
    errors = [letter.error for letter in driver.dead_letters()]
    assert errors == [
        "AttributeError: 'ProcessorContext' object has no attribute 'get_state_store': it is store(name) here (a "
        "store given in the processor's stores=[...])",
        "SerdeError: store 'kept' cannot take the value {1, 2} (set): cannot serialize set as JSON: Object of type "
        "set is not JSON serializable; give value_serde= of store('kept') a serde that takes it",
        "SerdeError: store 'kept' cannot take the key 5 (int): StringSerde expects str, got int; give key_serde= of "
        "store('kept') a serde that takes it"]
    assert [r.value for r in driver.records("out")] == [1]  # (a refused record left nothing in the store)
    from eos.processor import ProcessorContext

    for name, says in (("currentStreamTimeMs", "it is the attribute stream_time here"),
                       ("topic", "record_metadata() gives the current record's topic"),
                       ("recordMetadata", "it is record_metadata() here"), ("taskId", "it is the attribute task_id")):
        with pytest.raises(AttributeError, match=re.escape(says)):
            getattr(ProcessorContext(), name)
    assert not hasattr(ProcessorContext(), "__wrapped__")  # (what inspect and pickle look for: no hint, no cost)


def test_a_renamed_store_is_warned_about_at_start_up_naming_its_orphaned_changelog():
    from structlog.testing import capture_logs

    from eos.driver.checks import warn_orphaned_state
    from transactions.memory import MemoryAdmin, MemoryCluster

    def job(count_name: str | None) -> Application:
        app = app_()
        app.stream("in").filter(lambda k, v: True).group_by_key().count(name=count_name).to_stream().to("out")
        return app

    cluster = MemoryCluster()
    for topic in ("g-count-2-store-changelog", "g-other-app-store-changelogs", "h-x-store-changelog"):
        cluster.create_topic(topic, 1)
    admin = MemoryAdmin(cluster)
    for count_name, orphans in ((None, []), ("counts", ["g-count-2-store-changelog"])):
        stores = {s.changelog_topic("g") for sub in job(count_name).subtopologies.values() for s in sub.stores}
        with capture_logs() as logs:
            assert warn_orphaned_state(admin, "g", stores) == orphans
        assert [e["topics"] for e in logs if e["log_level"] == "warning"] == ([orphans] if orphans else [])


def test_the_window_audit_replays_the_operators_before_a_fused_window_branch_included():
    from eos.audit.windows import replay_prefix
    from eos.records import Record

    app = app_()
    routes = (app.stream("in").filter(lambda k, v: v["n"] >= 0, name="valid").map_values(lambda v: v["n"], name="n")
              .split().branch(lambda k, v: v > 100, name="big").default_branch(name="small"))
    routes["small"].group_by_key().window(TumblingWindows(60_000)).count(name="small_counts").to_stream().to("out")
    (sub,) = app.subtopologies.values()
    (windowing,) = sub.windowings
    assert windowing.topic == "out"
    replay = replay_prefix(windowing.prefix)

    def seen(value):
        return [(r.key, r.value, r.timestamp) for r in replay(Record("k", value, "in", 0, 7, 5, None))]

    assert seen({"n": 3}) == [("k", 3, 5)]
    assert seen({"n": 500}) == [("k", None, 5)]  # routed to the other branch: moves stream time, counts nothing
    assert seen({"n": -1}) == [("k", None, 5)]  # filtered out
    other = app_()
    other.stream("a").merge(other.stream("b")).group_by_key().window(TumblingWindows(60_000)).count(name="c") \
        .to_stream().to("out")
    (merged,) = other.subtopologies.values()
    mapped = app_()
    mapped.stream("in").group_by_key().window(TumblingWindows(60_000)).count(name="m").to_stream().map_values(
        str).to("out")
    (after,) = mapped.subtopologies.values()
    (changed,) = after.windowings  # results changed on the way: the audit changes each expected one alike
    assert after.unreplayed_windows == () and changed.topic == "out" and len(changed.suffix) == 1
    assert merged.windowings == ()  # two inputs: the window audit cannot replay it (lineage still audits it)
    assert [name for name, _ in merged.unreplayed_windows] == ["c"]  # and `audit_application` says so
    assert "lineage audit alone" in merged.unreplayed_windows[0][1] and sub.unreplayed_windows == ()
    # both branches of one source cogrouped: the paths through both marking steps are replayed, in the task's order
    both = app_()
    kinds = both.stream("in").split().branch(lambda k, v: v > 100, name="big").default_branch(name="small")
    (kinds["big"].group_by_key().cogroup(lambda k, v, agg: [*agg, ("big", v)])
     .cogroup(kinds["small"].filter(lambda k, v: v >= 0).group_by_key(), lambda k, v, agg: [*agg, ("small", v)])
     .window(TumblingWindows(60_000)).aggregate(list, name="kinds").to_stream().to("out"))
    (sub,) = both.subtopologies.values()
    (windowing,) = sub.windowings
    replay = replay_prefix(windowing.prefix)
    assert [r.value for r in replay(Record("k", 500, "in", 0, 7, 5, None))] == [(0, 500)]
    assert [r.value for r in replay(Record("k", 3, "in", 0, 8, 5, None))] == [(1, 3)]
    assert [r.value for r in replay(Record("k", -3, "in", 0, 9, 5, None))] == [None]  # filtered: time moves only


def test_the_join_audit_replays_each_side_through_the_stateless_operators_before_the_join():
    from eos.audit.windows import replay_prefix
    from eos.records import Record

    def reaching(prefix, key, value, topic="in"):
        return [(r.key, r.value) for r in replay_prefix(prefix, stand_in=False)(Record(key, value, topic, 0, 7, 5))]

    # a windowed join of a filtered and mapped stream with a branch of a flat-mapped one
    app = app_()
    left = app.stream("l").filter(lambda k, v: v > 0).map_values(lambda v: v * 10)
    right = app.stream("r").flat_map_values(lambda v: [v, v + 1]).split().branch(
        lambda k, v: v % 2 == 0, name="even").default_branch(name="odd")
    right["odd"].to("odd")
    left.join(right["even"], lambda a, b: [a, b], windows=JoinWindows(1000), name="j").to("out")
    (sub,) = app.subtopologies.values()
    (join,) = sub.joins
    assert (join.left, join.right, join.output) == ("l", "r", "out")
    assert reaching(join.left_prefix, "k", 3) == [("k", 30)] and reaching(join.left_prefix, "k", -3) == []
    assert reaching(join.right_prefix, "k", 3) == [("k", 4)]  # the odd branch goes elsewhere: not followed
    # a stream made a table and joined with a table; the right table of a foreign-key join, filtered
    tables = app_()
    tables.stream("s").filter(lambda k, v: v is not None and v.get("ok")).to_table().join(
        tables.table("t"), lambda a, b: [a, b], name="tt").to_stream().to("out")
    accounts = tables.table("accounts")
    accounts.join(tables.table("customers").filter(lambda k, c: c["active"]), lambda a, c: [a, c],
                  foreign_key=lambda a: a["customer"], name="fk").to_stream().to("fk-out")
    joins = {j.kind: j for s in tables.subtopologies.values() for j in s.joins}
    assert sorted(joins) == ["foreign-key", "table-table"]
    assert reaching(joins["table-table"].left_prefix, "k", {"ok": 1}, "s") == [("k", {"ok": 1})]
    assert reaching(joins["table-table"].left_prefix, "k", {"ok": 0}, "s") == []  # filtered before the table
    assert joins["table-table"].right_prefix == () and joins["foreign-key"].left_prefix == ()
    assert reaching(joins["foreign-key"].right_prefix, "c", {"active": False}, "customers") == [("c", None)]
    assert joins["foreign-key"].right_reader in tables.subtopologies
    # a stream join's results through stateless steps to its topic (and to a count, not followed)
    after = app_()
    joined = after.stream("in").join(after.table("t"), lambda a, b: [a, b], name="j")
    joined.filter(lambda k, v: v[1] is not None).map_values(lambda v: v[0]).to("out")
    joined.group_by_key().count(name="counted")
    (sub,) = after.subtopologies.values()
    (join,) = sub.joins
    assert join.output == "out" and join.left_prefix == join.right_prefix == ()
    assert reaching(join.suffix, "k", [1, "row"]) == [("k", 1)] and reaching(join.suffix, "k", [1, None]) == []
    # what it cannot replay, listed for `audit_application` to report as not checked
    cannot = app_()
    cannot.stream("a").merge(cannot.stream("b")).join(cannot.table("t"), lambda a, b: b, name="merged").to("o1")
    cannot.stream(["g", "h"]).join(cannot.table("x"), lambda a, b: b, name="two_topics").to("o5")  # one source
    c = cannot.stream("c")
    c.join(cannot.table("u"), lambda a, b: b, name="shared").to("o2")
    c.filter(lambda k, v: v).to("o2")  # (another sink of its task writes the join's topic)
    cannot.stream("d").join(cannot.table("w"), lambda a, b: b, name="elsewhere").to("o4")
    cannot.stream("f").to("o4")  # (another task writes it)
    rows = cannot.stream("e").group_by_key().count(name="counted")
    cannot.table("v").join(rows, lambda a, b: [a, b], foreign_key=lambda a: a["k"], name="fk").to_stream().to("o3")
    routed = cannot.stream("i").join(cannot.table("y"), lambda a, b: b, name="two_sinks").split().branch(
        lambda k, v: v, name="yes").default_branch(name="no")
    routed["yes"].to("o6")  # (its results reach two topics)
    routed["no"].to("o7")
    cannot.stream("m").join(cannot.table("z"), lambda a, b: b, name="mixed").merge(cannot.stream("n")).to("o8")
    tables = cannot.table("p").join(cannot.table("q"), lambda a, b: [a, b], name="tables_after")
    tables.to_stream().map_values(lambda v: v[0]).to("o9")  # (a table join's results, changed on their way)
    unreplayed = {name for s in cannot.subtopologies.values() for name, _, _ in s.unreplayed_joins}
    assert unreplayed == {"merged", "two_topics", "shared", "elsewhere", "fk", "two_sinks", "mixed", "tables_after"}
    assert not any(s.joins for s in cannot.subtopologies.values())


def test_user_mistakes_in_operators_dead_letter_the_record_with_what_went_wrong():
    app = app_()
    app.stream("in").map(lambda k, v: v).to("mapped")  # returns the value, not a (key, value) pair
    driver = TopologyTestDriver(app)
    driver.pipe("in", "a", {"group": "g", "items": [1]}, timestamp=BASE)
    driver.pipe("in", "b", {"items": 5}, timestamp=BASE + 1)
    errors = [d.error for d in driver.dead_letters()]
    assert errors == ["TypeError: map must return a (key, value) tuple, got dict"] * 2, errors
    app2 = app_()
    s2 = app2.stream("in")
    s2.group_by(lambda k, v: v.get("group"), name="by").count(name="groups").to_stream().to("groups")
    s2.flat_map_values(lambda v: v["items"]).to("items")
    driver2 = TopologyTestDriver(app2)
    driver2.pipe("in", "a", {"items": [1]}, timestamp=BASE)
    driver2.pipe("in", "b", {"group": "g", "items": 5}, timestamp=BASE + 1)
    assert [d.error for d in driver2.dead_letters()] == [
        "ValueError: group_by returned None: a record without a key cannot be grouped",
        "TypeError: flat_map_values must return an iterable (a list, a generator), got int"]
    assert driver2.read("groups") == [] and driver2.read("items") == []  # nothing of either record stayed


def test_a_sink_partitioner_chooses_each_records_partition_and_a_wrong_answer_is_a_dead_letter():
    app = app_()
    regions = {"eu": 0, "us": 1, "apac": 2}
    orders = app.stream("orders")
    orders.to("by-region", partitioner=lambda key, order, partitions: regions.get(order["region"]))
    orders.filter(lambda k, o: o["region"] == "mars").to(
        "nowhere", partitioner=lambda key, order, partitions: partitions)  # one past the last partition
    driver = TopologyTestDriver(app, partitions={"by-region": 3, "nowhere": 3})
    driver.pipe_many("orders", [("o1", {"region": "us"}, BASE), ("o2", {"region": "apac"}, BASE + 1),
                                ("o3", {"region": "eu"}, BASE + 2), ("o4", {"region": "moon"}, BASE + 3),
                                ("o5", {"region": "mars"}, BASE + 4)])
    placed = {r.key: r.partition for r in driver.read("by-region")}
    assert {k: placed[k] for k in ("o1", "o2", "o3")} == {"o1": 1, "o2": 2, "o3": 0}
    assert "o4" in placed  # None: murmur2 of the key, as without a partitioner
    assert "o5" not in placed and driver.read("nowhere") == []  # nothing of a failed record stays
    (dead,) = driver.dead_letters()
    assert "returned 3: topic nowhere has partitions 0 to 2" in dead.error


def test_a_stream_stream_join_keeps_every_record_a_flat_map_or_a_merge_makes_of_one_offset():
    """Buffered records are told apart by input offset, topic and place: two items of one order (same key,
    same time, same offset), and records of two merged topics at the same offset, each join once."""
    app = app_()
    items = app.stream("orders").flat_map_values(lambda order: order["items"])
    both = items.merge(app.stream("returns"))
    both.join(app.stream("prices"), lambda item, price: [item, price], windows=JoinWindows(60_000), name="priced") \
        .to("priced")
    driver = TopologyTestDriver(app)
    driver.pipe_records([("orders", "k", {"items": ["a", "b"]}, BASE), ("returns", "k", "c", BASE),
                         ("prices", "k", 5, BASE + 1)])
    assert sorted(r.value[0] for r in driver.read("priced")) == ["a", "b", "c"]


class Numbered(Processor):
    """Numbers each key's records in a store (`seen`) and forwards the value with its number; a value with
    "to" forwards under that key instead (a mistake under process_values); punctuation forwards each key's
    count under its own key."""

    def init(self, context):
        super().init(context)
        self.seen = context.store("seen")
        context.schedule(60_000, self.report)

    def process(self, record):
        n = (self.seen.get(record.key) or 0) + 1
        self.seen.put(record.key, n)
        self.context.forward(record.value.get("to", record.key), {**record.value, "n": n})

    def report(self, timestamp):
        for key, n in self.seen.all():
            self.context.forward(key, {"report": n})


def test_process_values_keeps_keys_so_an_aggregation_after_it_needs_no_repartition_topic():
    def build(values_only: bool) -> Application:
        app = app_()
        orders = app.stream("orders")
        step = orders.process_values if values_only else orders.process
        numbered = step(Numbered, name="numbered", stores=[store("seen", key_serde="string", value_serde="long")])
        numbered.to("numbered")
        numbered.filter(lambda k, v: "n" in v).group_by_key().sum(lambda v: v["n"], name="total").to_stream() \
            .to("totals")
        return app

    assert len(build(False).subtopologies) == 2 and len(build(False).internal_topics) == 1
    app = build(True)
    assert list(app.subtopologies) == ["numbered"] and not app.internal_topics  # one task, no topic between
    assert "numbered (Processor API (Numbered, values)" in str(app.describe())
    inputs = [("orders", f"c{i % 3}", {"i": i}, BASE + i * 1_000) for i in range(30)]
    with TopologyTestDriver(app, partitions=2) as driver:
        driver.pipe_records(inputs)
        totals = {r.key: r.value for r in driver.read("totals")}
        assert totals == {f"c{c}": sum(range(1, 11)) for c in range(3)}
        assert [r.value for r in driver.read("numbered") if "report" in r.value]  # punctuation forwards too
        driver.check_exactly_once(inputs, crashes=8, seed=4)
        # a key changed under process_values: that record is a dead letter, saying why; the others go on
        driver.pipe_records([("orders", "c0", {"i": 99, "to": "elsewhere"}, BASE + 99_000),
                             ("orders", "c0", {"i": 100}, BASE + 100_000)])
        (dead,) = driver.dead_letters()
        assert "forwarded the key 'elsewhere' for a record keyed 'c0'" in dead.error and "process()" in dead.error
        assert [r.value for r in driver.read("totals") if r.key == "c0"] == [sum(range(1, 12))]  # (its 11th)


@pytest.mark.parametrize("cache_max_bytes", [0, 1 << 20])
def test_sums_of_decimals_are_exact_in_every_api_with_the_decimal_serde(cache_max_bytes):
    """`aggregate_serde="decimal"` keeps money exact where JSON's floats drift (0.1 + 0.2); the sums are the
    reference computation's through killed batches, with the record cache on and off."""
    from eos.windows import TumblingWindows

    app = Application("g", bootstrap_servers="unused:9092", cache_max_bytes=cache_max_bytes)
    amount = lambda v: Decimal(v["amount"])
    pays = app.stream("pays", value_serde="json")
    pays.group_by_key().sum(amount, name="total", aggregate_serde="decimal").to_stream().to("totals")
    pays.group_by_key().window(TumblingWindows(60_000)).sum(amount, name="per_minute",
                                                            aggregate_serde="decimal").to_stream().to("minute-totals")
    app.table("accounts", value_serde="json", name="accounts").group_by(lambda k, v: (v["tier"], v)).sum(
        amount, name="per_tier", aggregate_serde="decimal").to_stream().to("tier-totals")
    app.sum("pays", "classic-totals", name="classic", value=amount, value_serde="json", aggregate_serde="decimal")
    cents = [f"{i % 7}.{i % 10}{i % 3}" for i in range(60)]
    inputs = [("pays", f"c{i % 3}", {"amount": c}, BASE + i * 5_000) for i, c in enumerate(cents)]
    inputs += [("accounts", f"a{i % 4}", {"tier": "gold" if i % 3 else "basic", "amount": c}, BASE + i)
               for i, c in enumerate(cents[:20])]
    report = TopologyTestDriver(app).check_exactly_once(inputs, crashes=6)
    assert report.crashes
    with TopologyTestDriver(app) as driver:
        driver.pipe_records(inputs)
        expected = {f"c{k}": sum((Decimal(c) for i, c in enumerate(cents) if i % 3 == k), Decimal(0)) for k in range(3)}
        for topic in ("totals", "classic-totals"):
            latest = {r.key: r.value for r in driver.read(topic)}
            assert latest == expected and all(type(v) is Decimal for v in latest.values())
        as_floats = sum(float(c) for i, c in enumerate(cents) if i % 3 == 0)
        assert driver.store("total-store").get("c0") == expected["c0"] and str(as_floats) != str(expected["c0"])
        tiers: dict[str, Decimal] = {"gold": Decimal(0), "basic": Decimal(0)}
        for i in range(16, 20):  # each account's last update counts: a0-a3 were last written at 16-19
            tiers["gold" if i % 3 else "basic"] += Decimal(cents[i])
        assert {r.key: r.value for r in driver.read("tier-totals")} == tiers
        per_window = {r.key: r.value for r in driver.read("minute-totals")}  # the latest per key and window
        assert len(per_window) == 15 and sum(per_window.values()) == sum(expected.values())


def test_an_aggregation_s_store_refusing_its_aggregate_or_key_names_the_parameter_that_sets_its_serde():
    """The store of a DSL aggregation is the framework's, not declared by the job: its serde error names the
    parameter of the DSL call to change, in either API. (A key reaches such a store through its repartition
    topic's serde or its input's, whose own errors name the step.)"""
    from eos.windows import TumblingWindows

    as_set = lambda k, v, agg: sorted({*agg, v["n"]}) if v["n"] else {v["n"]}  # (a set for n = 0)
    app = app_()
    stream = lambda topic: app.stream(topic, value_serde="json")  # (one input each: none fused)
    stream("i1").group_by(lambda k, v: v["g"], name="by").aggregate(list, as_set, name="sets")
    stream("i2").group_by_key().window(TumblingWindows(60_000)).aggregate(list, as_set, name="windowed")
    stream("i4").group_by_key().reduce(lambda agg, v: {1}, name="reduced")
    stream("i5").group_by_key().cogroup(lambda k, v, agg: {0}).aggregate(dict, name="cog")
    app.table("t1", value_serde="json", name="rows").group_by(lambda k, v: (v["g"], v)).aggregate(
        list, lambda g, v, agg: {0}, lambda g, v, agg: agg, name="regrouped")
    app.table("t2", value_serde="json", name="rows2").group_by(lambda k, v: (v["g"], v)).reduce(
        lambda agg, v: {0}, lambda agg, v: agg, name="tr")
    app.aggregate("i6", "o", name="classic", initializer=list, aggregator=as_set, value_serde="json")
    as_decimal = lambda v: Decimal(v["n"])
    stream("i7").group_by_key().sum(as_decimal, name="summed")
    stream("i8").group_by_key().window(TumblingWindows(60_000)).sum(as_decimal, name="wsummed")
    app.table("t3", value_serde="json", name="rows3").group_by(lambda k, v: (v["g"], v)).sum(as_decimal, name="ts")
    app.sum("i9", "o", name="classic_sum", value=as_decimal, value_serde="json")
    with TopologyTestDriver(app) as driver:
        for topic in ("i1", "i2", "i4", "i5", "t1", "i6", "i7", "i8", "t3", "i9"):
            driver.pipe_many(topic, [("k", {"g": "x", "n": 0}), ("k", {"g": "x", "n": 0})])
        driver.pipe_many("t2", [("r1", {"g": "x"}), ("r2", {"g": "x"})])  # (the first starts the group)
        said = {e.split("'")[1]: e.split(": ", 1)[1] for e in {letter.error for letter in driver.dead_letters()}}
    value = "store {!r} cannot take the value {} (set): cannot serialize set as JSON: Object of type set is not " \
            "JSON serializable; give {} a serde that takes it"
    decimal = "store {!r} cannot take the value Decimal('0') (Decimal): cannot serialize Decimal as JSON: Object of " \
              "type Decimal is not JSON serializable; give {} a serde that takes it"
    assert said == {
        "sets-store": value.format("sets-store", "{0}", "aggregate_serde= of 'sets'"),
        "windowed-store": value.format("windowed-store", "{0}", "aggregate_serde= of 'windowed'"),
        "reduced-store": value.format("reduced-store", "{1}", "aggregate_serde= of 'reduced'"),
        "cog-store": value.format("cog-store", "{0}", "aggregate_serde= of 'cog'"),
        "regrouped-store": value.format("regrouped-store", "{0}", "aggregate_serde= of 'regrouped'"),
        "tr-store": value.format("tr-store", "{0}", "aggregate_serde= of 'tr'"),
        "classic-store": value.format("classic-store", "{0}", "aggregate_serde= of 'classic'"),
        **{f"{name}-store": decimal.format(f"{name}-store", f"aggregate_serde= of {name!r}")
           for name in ("summed", "wsummed", "ts", "classic_sum")},
    }


def test_to_a_topic_each_record_chooses_routes_it_and_dead_letters_a_topic_not_named():
    """`to(fn, topics=[...])`, Kafka Streams' TopicNameExtractor: each record to the topic `fn(key, value)`
    names, one of `topics` (checked at start-up, read by the audit); any other is the record's error. One
    processor and a sink per topic in the step's graph; exactly once through killed batches."""
    app = app_()
    (app.stream("events", value_serde="json").filter(lambda k, v: v["n"] >= 0, name="valid")
        .to(lambda k, v: f"events-{v['region']}", topics=["events-eu", "events-us"], name="by_region"))
    assert "Processor: by_region (route; stores: [])\n      --> events-eu.sink, events-us.sink" in str(app.describe())
    events = [("events", f"k{i}", {"region": ("eu", "us", "mars")[i % 3] if i % 7 else "eu", "n": i - 2}, BASE + i)
              for i in range(40)]
    with TopologyTestDriver(app, partitions=2) as driver:
        driver.pipe_records(events)
        got = {t: sorted(r.value["n"] for r in driver.read(t)) for t in ("events-eu", "events-us")}
        letters = driver.dead_letters()
    valid = [v for _, _, v, _ in events if v["n"] >= 0]
    assert got == {f"events-{r}": sorted(v["n"] for v in valid if v["region"] == r) for r in ("eu", "us")}
    assert sorted(int(letter.value.split(b'"n":')[1].rstrip(b"}")) for letter in letters) == sorted(
        v["n"] for v in valid if v["region"] == "mars")
    assert letters[0].error == ("ValueError: to(): the topic chosen for this record, 'events-mars', is not one of "
                                "topics=['events-eu', 'events-us']")
    assert TopologyTestDriver(app, partitions=2).check_exactly_once(events, crashes=6).crashes


def test_to_with_a_function_names_its_topics_and_is_refused_otherwise_saying_how():
    stream = app_().stream("events", value_serde="json")
    with pytest.raises(TypeError, match=r"to\(fn\) chooses each record's topic among topics=\[...\]: name them"):
        stream.to(lambda k, v: "a")
    with pytest.raises(TypeError, match=r"topics= goes with a function choosing each record's topic"):
        stream.to("a", topics=["a", "b"])
    with pytest.raises(ValueError, match=r"takes distinct topic names, at least one; got \['a', 'a'\]"):
        stream.to(lambda k, v: "a", topics=["a", "a"])
    with pytest.raises(ValueError, match=r"at least one; got \[\]"):
        stream.to(lambda k, v: "a", topics=[])
    with pytest.raises(TypeError, match=r"topic_of is called as topic_of\(key, value\)"):
        stream.to(lambda v: "a", topics=["a"])
    with pytest.raises(TypeError, match=r"to\(\) takes a topic's name or a function of \(key, value\)"):
        stream.to(3)
    app = app_()  # a function that returns no name at all: the record's error says what it chose
    app.stream("events", value_serde="json").to(lambda k, v: v["to"], topics=["a"])
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("events", [("k", {"to": ["a"]}), ("k", {"to": "a"})])
        assert len(driver.read("a")) == 1
        assert [letter.error for letter in driver.dead_letters()] == [
            "ValueError: to(): the topic chosen for this record, ['a'], is not one of topics=['a']"]


def test_a_grouping_s_serdes_write_and_read_its_repartition_topic():
    """`group_by(fn, key_serde=, value_serde=)` (Kafka Streams' `Grouped`): the repartition topic after the key
    change is written and read with them, so a key of another kind than the stream's (an int here, the
    stream's keys being strings) is grouped, not refused; so in a cogroup."""
    app = app_()
    orders = app.stream("orders", value_serde="json")
    (orders.group_by(lambda k, v: v["n"] % 3, key_serde="long", name="by_rest").count(name="per_rest")
        .to_stream().to("rests"))
    (orders.group_by(lambda k, v: v["n"] % 2, key_serde="long", value_serde="json", name="by_parity")
        .cogroup(lambda key, v, agg: agg + v["n"]).aggregate(int, name="sums", aggregate_serde="long")
        .to_stream().to("sums"))
    with TopologyTestDriver(app, partitions=2) as driver:
        driver.pipe_many("orders", [(f"k{n}", {"n": n}) for n in range(10)])
        rests = {r.key: r.value for r in driver.read("rests")}
        sums = {r.key: r.value for r in driver.read("sums")}
        assert not driver.dead_letters()
        assert {r.key for r in driver.records("g-per_rest-repartition")} <= {0, 1, 2}  # (ints, read as longs)
    assert rests == {0: 4, 1: 3, 2: 3} and sums == {0: 20, 1: 25}


def test_a_step_that_changes_a_count_or_a_window_s_key_writes_them_with_the_default_serdes_not_the_results():
    """A serde the framework chose for an aggregation's results (a count's long, a window's key) holds while the
    steps keep that part, as in Kafka Streams: `map_values` of a count writes JSON, a window's key mapped to its
    key is written with the grouping's key serde, on streams and tables, through a repartition and a regrouping.
    A serde the job gave is kept. Exactly-once with crashes, and the job's own audit passes."""
    app = app_()
    views = app.stream("views")
    counts = views.group_by_key().count(name="per_user")
    counts.to_stream().to("counts")                                              # long, as before
    counts.to_stream().filter(lambda k, n: n > 0).repartition(name="again").map_values(
        lambda n: {"views": n}).to("as-json")
    counts.map_values(lambda n: f"{n} views").to_stream().to("as-text")         # (a table's map_values)
    counts.group_by(lambda user, n: (user[0], {"n": n})).aggregate(
        lambda: 0, lambda k, v, total: total + v["n"], lambda k, v, total: total - v["n"],
        name="per_initial").to_stream().to("per-initial")
    windowed = views.group_by_key().window(TumblingWindows(60_000)).count(name="per_minute").to_stream()
    windowed.to("windows")                                                       # Windowed keys, long counts
    windowed.map(lambda window, n: (window.key, {"start": window.start, "n": n})).to("minutes")
    windowed.select_key(lambda window, n: f"{window.key}@{window.start}").to("minute-keys")
    views.group_by_key().window(TumblingWindows(60_000)).count(name="again_per_minute").to_stream(
        lambda window, n: window.key).to("by-user")                             # (Kafka Streams' toStream(mapper))
    windowed.group_by(lambda window, n: window.key, name="regroup").count(name="windows_seen").to_stream().to(
        "windows-seen")
    app.stream("words", value_serde="string").group_by_key().reduce(
        lambda a, b: a + b, name="joined").to_stream().map_values(len).to("lengths")  # the job's serde: kept
    app.stream("notes", value_serde="string").merge(views).map_values(lambda v: {"seen": v}).to("seen")  # (mixed)
    inputs = [("views", f"u{i % 3}", {"page": i}, BASE + i * 10_000) for i in range(9)] + [
        ("words", "w", "ab"), ("notes", "n", "hello")]
    with TopologyTestDriver(app) as driver:
        driver.pipe_records(inputs)
        assert [r.value for r in driver.read("counts")][:3] == [1, 1, 1]
        assert [r.value for r in driver.read("as-json")][-3:] == [{"views": 3}] * 3
        assert driver.records("as-json")[0].value == {"views": 1}
        assert [r.value for r in driver.read("as-text")][-1] == "3 views"
        assert {r.key: r.value for r in driver.read("per-initial")} == {"u": 9}
        assert [r.key for r in driver.read("windows")][:1] == [Windowed("u0", BASE, BASE + 60_000)]
        assert [r.value for r in driver.read("minutes")][:4] == [
            {"start": BASE, "n": 1}, {"start": BASE, "n": 1}, {"start": BASE, "n": 1}, {"start": BASE, "n": 2}]
        assert [r.key for r in driver.read("minute-keys")][:2] == [f"u0@{BASE}", f"u1@{BASE}"]
        assert [(r.key, r.value) for r in driver.read("by-user")][:4] == [("u0", 1), ("u1", 1), ("u2", 1), ("u0", 2)]
        assert {r.key: r.value for r in driver.read("windows-seen")} == {"u0": 3, "u1": 3, "u2": 3}
        seen = [r.value["seen"] for r in driver.read("seen")]
        assert "hello" in seen and sorted(v["page"] for v in seen if v != "hello") == list(range(9))
        (letter,) = driver.dead_letters()                                       # len(...) is an int, "string"
        assert letter.error.startswith("OutputSerializationError: the value of an output to topic lengths") and (
            ".to('lengths', value_serde=...)" in letter.error)
        assert all(report.verdict == "PASS" for report in driver.audit())
    assert TopologyTestDriver(app).check_exactly_once(inputs, crashes=8).crashes


def test_a_windowed_key_a_key_change_kept_is_refused_saying_how_to_write_it():
    app = app_()
    app.stream("views").group_by_key().window(TumblingWindows(60_000)).count(name="n").to_stream().map(
        lambda window, n: (window, n + 1)).to("plus-one")
    with TopologyTestDriver(app) as driver:
        driver.pipe("views", "u", {}, timestamp=BASE)
        (letter,) = driver.dead_letters()
    assert "StringSerde expects str, got Windowed" in letter.error
    assert "Windowed key it keeps needs key_serde=WindowedSerde(that serde)" in letter.error


def test_a_processor_forwards_a_record_or_a_copy_of_it_as_in_kafka_streams():
    """`context.forward(record)` and `forward(record.with_value(v))` (Kafka Streams' `forward(record.withValue(v))`):
    the record's key, value, timestamp and headers, in `process` and `process_values`; a copy with another key is
    still refused by `process_values`."""
    class Doubled(Processor):
        def process(self, record):
            self.context.forward(record)
            self.context.forward(record.with_value(record.value * 2).with_timestamp(record.timestamp + 1))

    class Rekeyed(Processor):
        def process(self, record):
            self.context.forward(record.with_key(record.key + "!").with_headers([("h", b"1")]))

    app = app_()
    app.stream("in", value_serde="long").process(Doubled, name="doubled").to("out", value_serde="long")
    app.stream("in", value_serde="long", name="values").process_values(Doubled, name="kept").to(
        "kept", value_serde="long")
    app.stream("in2", value_serde="long").process(Rekeyed, name="rekeyed").to("rekeyed", value_serde="long")
    app.stream("in2", value_serde="long", name="in2-values").process_values(Rekeyed, name="not_kept").to(
        "not-kept", value_serde="long")
    with TopologyTestDriver(app) as driver:
        driver.pipe("in", "a", 5, timestamp=BASE)
        driver.pipe("in2", "b", 7, timestamp=BASE)
        assert [(r.key, r.value, r.timestamp) for r in driver.read("out")] == [("a", 5, BASE), ("a", 10, BASE + 1)]
        assert [(r.key, r.value) for r in driver.read("kept")] == [("a", 5), ("a", 10)]
        (rekeyed,) = driver.read("rekeyed")
        assert (rekeyed.key, rekeyed.value, rekeyed.headers.get("h")) == ("b!", 7, b"1")
        (letter,) = driver.dead_letters()
        assert "(process_values) forwarded the key 'b!' for a record keyed 'b'" in letter.error


def test_a_processor_asking_for_a_store_it_is_not_connected_to_stops_the_job_rather_than_dead_letter_each_record():
    """Every record would fail alike: the task fails and the job stops, naming the store and how to connect it, as
    Kafka Streams fails the task; no record is dead-lettered, nothing of the batch is committed."""
    from eos.errors import TaskFailedError, TopologyError

    class Counts(Processor):
        def process(self, record):
            self.context.store("mine").put(record.key, 1)
            self.context.forward(record.key, 1)

    class Peeks(Processor):
        def process(self, record):
            self.context.forward(record.key, self.context.store("mine").get(record.key))

    app = app_()
    app.stream("in").process(Counts, name="counts", stores=[store("mine", key_serde="string", value_serde="long")]
                             ).to("a", value_serde="long")
    app.stream("in2").process(Peeks, name="peeks").to("b", value_serde="long")
    with TopologyTestDriver(app) as driver:
        driver.pipe("in", "k", {})
        with pytest.raises(TaskFailedError, match=re.escape(
                "processor 'peeks' is not connected to a store 'mine'; its stores: none (connect one with "
                "add_state_store(spec, 'peeks'), connect_processor_and_state_stores, or process(..., "
                "connect=['mine']))")):
            driver.pipe("in2", "k", {})
        assert not driver.dead_letters() and not driver.records("b") and [r.value for r in driver.read("a")] == [1]
    assert issubclass(TopologyError, TaskFailedError)


def test_a_session_aggregation_takes_its_merger_third_as_in_kafka_streams():
    app = app_()
    views = app.stream("views")
    (views.group_by_key().window(SessionWindows(10_000, grace=10_000))
        .aggregate(list, lambda k, v, pages: [*pages, v["page"]], lambda k, a, b: a + b, name="visits")
        .to_stream().to("visits"))
    (views.group_by_key().cogroup(lambda k, v, n: n + 1).window(SessionWindows(10_000, grace=10_000))
        .aggregate(int, lambda k, a, b: a + b, name="visit_sizes").to_stream().to("sizes"))
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("views", [("u", {"page": "a"}, BASE), ("u", {"page": "b"}, BASE + 15_000),
                                   ("u", {"page": "c"}, BASE + 8_000)])  # the last one joins both sessions
        visits = {r.key: r.value for r in driver.read("visits")}
        sizes = {r.key: r.value for r in driver.read("sizes")}
    assert sorted(visits[Windowed("u", BASE, BASE + 15_000)]) == ["a", "b", "c"]
    assert sizes[Windowed("u", BASE, BASE + 15_000)] == 3
