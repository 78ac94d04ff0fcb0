"""The processing loop, run by the test driver: record scopes, dead letters, lineage indexes, early commit,
the order of co-partitioned inputs, vectorized bisection, what topics refuse."""

from __future__ import annotations

import json

import pytest

from eos import Application, Output, store
from eos.errors import BadRecordError
from eos.origin import decode_origin
from eos.processor import Processor
from eos.testing import TopologyTestDriver


def job(fn, **settings) -> Application:
    app = Application("app", **settings)
    app.process(input="in", output="out", key_serde="string", value_serde="json", name="t")(fn)
    return app


def run(fn, values: list[bytes], **driver_options) -> TopologyTestDriver:
    """`fn` as a step over records whose values are the raw `values`, in one batch."""
    driver = TopologyTestDriver(job(fn), wall_clock_ms=0, **driver_options)
    driver.pipe_many("in", [(b"k", v) for v in values], serialized=True)
    return driver


def origins(driver: TopologyTestDriver) -> list:
    return [decode_origin(r.headers["eos.origin"]) for r in driver.records("out")]


def filtered(driver: TopologyTestDriver) -> list[int]:
    return sorted(o for e in driver.ledger() for bm in e.filtered.values() for o in bm)


def test_one_to_n_outputs_are_indexed():
    driver = run(lambda r: [(r.key, i) for i in range(r.value["n"])], [b'{"n": 2}', b'{"n": 0}', b'{"n": 3}'])
    assert [(o.offset, o.index) for o in origins(driver)] == [(0, 0), (0, 1), (2, 0), (2, 1), (2, 2)]
    assert driver.results[-1].records_in == 3 and not driver.dead_letters()


def test_a_failing_record_leaves_no_partial_output_and_is_dead_lettered():
    def fn(r):
        yield r.key, 1
        if r.value["bad"]:
            raise ValueError("boom")
        yield r.key, 2

    driver = run(fn, [b'{"bad": false}', b'{"bad": true}', b"{not json"])
    assert [(o.offset, o.index) for o in origins(driver)] == [(0, 0), (0, 1)]  # nothing from offset 1
    letters = driver.dead_letters()
    assert [d.stage for d in letters] == ["process", "deserialize"]
    assert letters[0].value == b'{"bad": true}'  # original bytes


def test_output_serialization_errors_are_attributed_to_the_input_and_say_what_to_change():
    driver = run(lambda r: Output(key=123, value=1), [b"{}"])  # an int key with a string serde
    assert not driver.records("out") and driver.dead_letters()[0].stage == "serialize"
    assert driver.dead_letters()[0].error == (
        "OutputSerializationError: the key of an output to topic out cannot be serialized: StringSerde expects "
        "str, got int; give the step that writes out a key_serde that takes it (in the DSL: .to('out', "
        "key_serde=...)), or return a key its serde takes")
    driver = run(lambda r: Output(key="k", value={1, 2}), [b"{}"])  # a set, which JSON has not
    (letter,) = driver.dead_letters()
    assert "the value of an output to topic out cannot be serialized" in letter.error and "value_serde" in letter.error


def test_a_dsl_step_s_key_its_serde_refuses_is_dead_lettered_saying_which_topic_and_which_serde():
    app = Application("app", bootstrap_servers="unused:9092")
    views = app.stream("views", value_serde="json")
    views.group_by(lambda k, v: v["page"], name="per_page").count(name="counts").to_stream().to("counts")
    views.map_values(lambda v: v, name="copy").to("copies", value_serde="json")
    with TopologyTestDriver(app) as driver:
        driver.pipe_many("views", [("a", {"page": 1}), ("b", {"page": "p1"})])
        (letter,) = driver.dead_letters()  # (the whole record: nor is its copy written)
        assert (letter.key, letter.stage) == (b"a", "serialize") and [r.key for r in driver.records("copies")] == ["b"]
        assert letter.error.endswith(
            "the key of an output to topic app-counts-repartition cannot be serialized: StringSerde expects str, "
            "got int; a repartition topic after a key change takes the stream's serdes: give the new key's serde "
            "where the stream is grouped (group_by(..., key_serde=...)) or before the step that repartitions it "
            "(.repartition(key_serde=...))")


def test_a_key_of_another_kind_reaches_a_table_through_the_serde_its_repartition_is_given():
    """After a key change the repartition topic has the stream's serdes; the advice of the dead letter, a
    serde given to repartition(), keys the table by ints."""
    for given in (False, True):
        app = Application("app", bootstrap_servers="unused:9092")
        rekeyed = app.stream("orders", value_serde="json").map(lambda k, v: (v["id"], v), name="by_id")
        (rekeyed.repartition(key_serde="long", name="ids") if given else rekeyed).to_table(name="rows").to_stream().to(
            "rows", key_serde="long")
        with TopologyTestDriver(app) as driver:
            driver.pipe_many("orders", [("a", {"id": 1}), ("b", {"id": 2})])
            assert [r.key for r in driver.read("rows")] == ([1, 2] if given else [])
            assert len(driver.dead_letters()) == (0 if given else 2)


def test_fail_policy_raises_a_clear_error():
    driver = TopologyTestDriver(job(lambda r: 1 / 0, on_bad_record="fail"), wall_clock_ms=0)
    with pytest.raises(BadRecordError, match=r"in\[0\]@0 failed to process"):
        driver.pipe("in", "k", {})


def test_invalid_return_types_are_errors_of_the_record():
    assert "TypeError" in run(lambda r: "just a string", [b"{}"]).dead_letters()[0].error


class Remember(Processor):
    """Writes every record to its store, then fails on d == 0: the write of a failed record must not stay."""

    def init(self, context):
        super().init(context)
        self.seen = context.store("seen")

    def process(self, record):
        self.seen.put(f"{record.key}-{record.offset}", record.value["d"])
        self.context.forward(record.key, 1 / record.value["d"])


def test_record_scopes_commit_or_roll_back():
    app = Application("app")
    app.stream("in").process(Remember, name="t", stores=[store("seen", key_serde="string", value_serde="json")]) \
        .to("out")
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    driver.pipe_many("in", [("k", {"d": 1}), ("k", {"d": 0}), ("k", {"d": 2})])
    assert dict(driver.store("seen").all()) == {"k-0": 1, "k-2": 2}  # k-1's write was rolled back
    assert [r.value for r in driver.read("out")] == [1.0, 0.5] and len(driver.dead_letters()) == 1


class EarlyCommit(Processor):
    def process(self, record):
        self.context.forward(record.key, record.value)
        if record.offset == 1:
            self.context.commit()

    def punctuate(self, stream_time):
        self.context.forward("punctuation", stream_time)


def test_context_commit_ends_the_batch_after_the_current_record_and_punctuate_runs():
    app = Application("app")
    app.stream("in").process(EarlyCommit, name="t").to("out")
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    driver.pipe_many("in", [("k", 1, 10), ("k", 2, 20), ("k", 3, 30)])
    out = driver.records("out")
    assert [(r.key, r.value) for r in out] == [("k", 1), ("k", 2), ("punctuation", 20), ("k", 3),
                                               ("punctuation", 30)]  # the batch ended after offset 1
    assert "eos.origin" not in out[2].headers and "eos.derived" in out[2].headers
    assert [(i.start, i.end) for e in driver.ledger() for i in e.inputs] == [(0, 2), (2, 3)]


def vectorized(fn, fmt: str = "pandas") -> Application:
    app = Application("app")
    app.process_batch(input="in", output="out", key_serde="string", value_serde="json", format=fmt, name="t")(fn)
    return app


def test_vectorized_bisection_isolates_failing_rows():
    def fn(df):
        if (df.value.map(lambda v: v["n"]) == 5).any() or (df.value.map(lambda v: v["n"]) == 11).any():
            raise ValueError("bad row")
        return df.assign(value=df.value.map(lambda v: {"sq": v["n"] ** 2}))

    driver = TopologyTestDriver(vectorized(fn), wall_clock_ms=0)
    driver.pipe_many("in", [("k", {"n": i}) for i in range(16)])
    assert sorted(o.offset for o in origins(driver)) == [i for i in range(16) if i not in (5, 11)]
    assert sorted(d.offset for d in driver.dead_letters()) == [5, 11]


def test_vectorized_filters_need_the_offset_column():
    kept = TopologyTestDriver(vectorized(lambda t: t.filter([True, False, True, False]), "arrow"), wall_clock_ms=0)
    kept.pipe_many("in", [("k", {"n": i}) for i in range(4)])
    assert [o.offset for o in origins(kept)] == [0, 2]  # pyarrow filter keeps the offset column
    assert filtered(kept) == [1, 3]
    lost = TopologyTestDriver(vectorized(lambda df: df[["value"]].iloc[:2]), wall_clock_ms=0)
    with pytest.raises(Exception, match="offset"):
        lost.pipe_many("in", [("k", {"n": i}) for i in range(4)])
    for nothing in (lambda df: None, lambda df: df[["value"]].iloc[:0]):  # every row dropped: nothing to attribute
        none = TopologyTestDriver(vectorized(nothing), wall_clock_ms=0)
        none.pipe_many("in", [("k", {"n": i}) for i in range(4)])
        assert none.records("out") == [] and filtered(none) == [0, 1, 2, 3] and none.dead_letters() == []


def test_return_shapes_a_user_writes():
    two = run(lambda r: ((r.key, 1), (r.key, 2)), [b"{}"])  # two records, not one with tuple key and value
    assert [(r.key, r.value) for r in two.records("out")] == [("k", 1), ("k", 2)]
    mixed = run(lambda r: [("a", 1), Output("b", 2)], [b"{}"])
    assert [r.key for r in mixed.records("out")] == ["a", "b"]
    assert "got a 3-tuple" in run(lambda r: (r.key, 1, 2), [b"{}"]).dead_letters()[0].error
    assert "holds a 3-tuple" in run(lambda r: [(r.key, 1, 2)], [b"{}"]).dead_letters()[0].error


def test_records_that_produce_nothing_are_recorded_as_filtered():
    driver = run(lambda r: (r.key, 1) if r.value["keep"] else None, [b'{"keep": true}', b'{"keep": false}', b"{bad"])
    assert filtered(driver) == [1]  # not the output (0), not the dead letter (2)


def test_an_output_larger_than_its_topic_accepts_is_a_bad_record_naming_size_and_limit():
    driver = run(lambda r: (r.key, "x" * r.value["n"]), [b'{"n": 10}', b'{"n": 5000}', b'{"n": 20}'],
                 topic_configs={"out": {"max.message.bytes": "1000"}})
    assert [o.offset for o in origins(driver)] == [0, 2]  # the batch goes on
    error = driver.dead_letters()[0].error
    assert "in[0]@1 to topic out is 5,1" in error and "limit of 1,000 bytes" in error  # 5,002 + overhead


def test_a_dead_letter_too_large_for_its_topic_keeps_its_headers_and_drops_its_payload():
    big = json.dumps({"pad": "y" * 2000}).encode()
    driver = run(lambda r: 1 / 0, [b"{}", big], topic_configs={"app-dlq": {"max.message.bytes": "500"}})
    small, large = driver.dead_letters()
    assert small.value == b"{}"
    (raw,) = [m for m in driver.cluster.records("app-dlq") if m.value() is None]
    headers = dict(raw.headers())
    assert raw.key() is None and b"key and value omitted" in headers["eos.dlq.payload"]
    assert large.offset == 1 and decode_origin(headers["eos.origin"]).offset == 1


def test_aggregations_skip_tombstones_and_count_does_not_read_values():
    app = Application("agg")
    sub = app.count("words", "counts", name="counts")
    assert sub.value_serde.name == "bytes"  # any value counts, JSON or not
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    driver.pipe_many("words", [(b"w", b"not json"), (b"w", None), (b"w", b"\xff\x00")], serialized=True)
    assert [r.value for r in driver.records("counts")] == [1, 2]
    assert not driver.dead_letters() and filtered(driver) == [1]  # the tombstone


def test_dead_letters_name_their_task_and_sub_topology():
    driver = run(lambda r: 1 / 0, [b"{}"])
    headers = dict(driver.cluster.records("app-dlq")[0].headers())
    assert headers["eos.dlq.task"] == b"t-0" and headers["eos.dlq.subtopology"] == b"t"


def test_outputs_are_partitioned_by_the_producer_unless_a_partition_is_given():
    from transactions.memory import partition_for

    driver = run(lambda r: [Output("a", 1), Output("b", 2, partition=3)], [b"{}"], partitions={"out": 4})
    assert sorted((r.key, r.partition) for r in driver.records("out")) == [("a", partition_for(b"a", 4)), ("b", 3)]


def test_co_partitioned_inputs_stay_in_time_order_within_and_across_batches():
    """Each partition in offset order even when its timestamps are not; when an input with more records beyond
    the batch runs out, the batch stops: the other input's later records wait for it."""
    app = Application("app", max_records_per_batch=3, first_batch_max_records=3)
    app.process(input=["a", "b"], output="out", key_serde="string", value_serde="json", name="t")(
        lambda r: (r.key, f"{r.topic}{r.offset}"))
    driver = TopologyTestDriver(app, wall_clock_ms=0)
    driver.pipe_records([("a", "k", 0, 10), ("a", "k", 1, 5), ("a", "k", 2, 30), ("a", "k", 3, 60),
                         ("a", "k", 4, 70), ("b", "k", 0, 1), ("b", "k", 1, 20), ("b", "k", 2, 40)])
    assert [r.value for r in driver.records("out")] == ["b0", "a0", "a1", "b1", "a2", "b2", "a3", "a4"]
    first = driver.ledger()[0]  # a ran out with more beyond the batch: b@40 waited for the next batch
    assert sorted((i.topic, i.start, i.end) for i in first.inputs) == [("a", 0, 3), ("b", 0, 2)]
