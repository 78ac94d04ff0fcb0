"""The processing loop: record scopes, dead letters, lineage indexes, early commit, vectorized bisection."""

from __future__ import annotations

import json

import pytest

from eos import Output
from eos.errors import BadRecordError
from eos.origin import decode_origin
from eos.processor import FunctionProcessor, Processor
from eos.serde import JsonSerde, StringSerde
from eos.worker.context import TaskContext
from eos.worker.dead_letters import DeadLetterPolicy
from eos.worker.processing import run_processor
from eos.worker.topic_rules import TopicRule
from eos.worker.vectorized import run_batch_function
from tests.fakes import FakeMessage

DLQ = DeadLetterPolicy("app-dlq", 0, "t-0", fail=False)


def ctx(output: str | None = "out") -> TaskContext:
    return TaskContext(application_id="app", subtopology="t", partition=0, output_topic=output,
                            key_serde=StringSerde(), value_serde=JsonSerde(), lineage=True)


def msgs(values: list[bytes]) -> list[FakeMessage]:
    return [FakeMessage("in", 0, 10 + i, v, b"k") for i, v in enumerate(values)]


def run(fn, values, **kw):
    c = ctx()
    proc = FunctionProcessor(fn)
    proc.init(c)
    return run_processor(proc, c, msgs(values), key_serde=StringSerde(), value_serde=JsonSerde(), dlq=DLQ, **kw)


def origins(outcome):
    return [decode_origin(dict(h)["eos.origin"]) for _, _, _, _, h, _ in outcome.outputs]


def test_one_to_n_outputs_are_indexed():
    out = run(lambda r: [(r.key, i) for i in range(r.value["n"])], [b'{"n": 2}', b'{"n": 0}', b'{"n": 3}'])
    assert [(o.offset, o.index) for o in origins(out)] == [(10, 0), (10, 1), (12, 0), (12, 1), (12, 2)]
    assert out.records_in == 3 and not out.dead_letters


def test_a_failing_record_leaves_no_partial_output_and_is_dead_lettered():
    def fn(r):
        yield r.key, 1
        if r.value["bad"]:
            raise ValueError("boom")
        yield r.key, 2

    out = run(fn, [b'{"bad": false}', b'{"bad": true}', b"{not json"])
    assert [(o.offset, o.index) for o in origins(out)] == [(10, 0), (10, 1)]  # nothing from offset 11
    stages = [dict(h)["eos.dlq.stage"] for *_, h, _ in out.dead_letters]
    assert stages == [b"process", b"deserialize"]
    assert out.dead_letters[0][3] == b'{"bad": true}'  # original bytes


def test_output_serialization_errors_are_attributed_to_the_input():
    out = run(lambda r: Output(key=123, value=1), [b"{}"])  # int key with a string serde
    assert not out.outputs and dict(out.dead_letters[0][4])["eos.dlq.stage"] == b"serialize"


def test_fail_policy_raises_a_clear_error():
    c = ctx()
    proc = FunctionProcessor(lambda r: 1 / 0)
    proc.init(c)
    with pytest.raises(BadRecordError, match=r"in\[0\]@10 failed to process"):
        run_processor(proc, c, msgs([b"{}"]), key_serde=StringSerde(), value_serde=JsonSerde(),
                      dlq=DeadLetterPolicy("dlq", 0, "t-0", fail=True))


def test_invalid_return_types_are_errors_of_the_record():
    out = run(lambda r: "just a string", [b"{}"])
    assert b"TypeError" in dict(out.dead_letters[0][4])["eos.dlq.error"]


class Scope:
    def __init__(self):
        self.log = []

    def begin_record(self):
        self.log.append("begin")

    def commit_record(self):
        self.log.append("commit")

    def rollback_record(self):
        self.log.append("rollback")


def test_record_scopes_commit_or_roll_back():
    scope = Scope()
    run(lambda r: (r.key, 1 / r.value["d"]), [b'{"d": 1}', b'{"d": 0}'], scoped=[scope])
    assert scope.log == ["begin", "commit", "begin", "rollback",
                         "begin", "commit"]  # the last scope is the batch-end punctuation


class EarlyCommit(Processor):
    def process(self, record):
        self.context.forward(record.key, record.value)
        if record.offset == 11:
            self.context.commit()

    def punctuate(self, stream_time):
        self.context.forward("punctuation", stream_time)


def test_context_commit_ends_the_batch_after_the_current_record_and_punctuate_runs():
    c = ctx()
    proc = EarlyCommit()
    proc.init(c)
    out = run_processor(proc, c, msgs([b"1", b"2", b"3"]), key_serde=StringSerde(), value_serde=JsonSerde(), dlq=DLQ)
    assert out.stopped_at == {("in", 0): 12} and out.records_in == 2
    assert out.outputs[-1][2] == b"punctuation"  # punctuation output, no origin header
    assert "eos.origin" not in dict(out.outputs[-1][4])


def test_vectorized_bisection_isolates_failing_rows():
    values = [json.dumps({"n": i}).encode() for i in range(16)]

    def fn(df):
        if (df.value.map(lambda v: v["n"]) == 5).any() or (df.value.map(lambda v: v["n"]) == 11).any():
            raise ValueError("bad row")
        return df.assign(value=df.value.map(lambda v: {"sq": v["n"] ** 2}))

    out = run_batch_function(fn, "pandas", msgs(values), key_serde=StringSerde(), value_serde=JsonSerde(),
                             out_key_serde=StringSerde(), out_value_serde=JsonSerde(), output_topic="out",
                             lineage=True, dlq=DLQ)
    assert sorted(o.offset for o in origins(out)) == [10 + i for i in range(16) if i not in (5, 11)]
    assert sorted(int(dict(d[4])["eos.dlq.offset"]) for d in out.dead_letters) == [15, 21]


def test_vectorized_filters_need_the_offset_column():
    values = [json.dumps({"n": i}).encode() for i in range(4)]
    common = {"key_serde": StringSerde(), "value_serde": JsonSerde(), "out_key_serde": StringSerde(),
              "out_value_serde": JsonSerde(), "output_topic": "out", "lineage": True, "dlq": DLQ}
    kept = run_batch_function(lambda t: t.filter([True, False, True, False]), "arrow", msgs(values), **common)
    assert [o.offset for o in origins(kept)] == [10, 12]  # pyarrow filter keeps the offset column
    with pytest.raises(ValueError, match="offset"):
        run_batch_function(lambda df: df[["value"]].iloc[:2], "pandas", msgs(values), **common)


def test_return_shapes_a_user_writes():
    out = run(lambda r: ((r.key, 1), (r.key, 2)), [b"{}"])  # two records, not one with tuple key and value
    assert [(o.key, o.value) for o in out.outputs] == [(b"k", b"1"), (b"k", b"2")]
    out = run(lambda r: [("a", 1), Output("b", 2)], [b"{}"])
    assert [o.key for o in out.outputs] == [b"a", b"b"]
    out = run(lambda r: (r.key, 1, 2), [b"{}"])
    assert b"got a 3-tuple" in dict(out.dead_letters[0].headers)["eos.dlq.error"]
    out = run(lambda r: [(r.key, 1, 2)], [b"{}"])
    assert b"holds a 3-tuple" in dict(out.dead_letters[0].headers)["eos.dlq.error"]


def test_records_that_produce_nothing_are_recorded_as_filtered():
    out = run(lambda r: (r.key, 1) if r.value["keep"] else None, [b'{"keep": true}', b'{"keep": false}', b"{bad"])
    assert [m.offset() for m in out.filtered] == [11]  # not the output (10), not the dead letter (12)
    values = [json.dumps({"n": i}).encode() for i in range(4)]
    kept = run_batch_function(lambda t: t.filter([True, False, True, False]), "arrow", msgs(values),
                              key_serde=StringSerde(), value_serde=JsonSerde(), out_key_serde=StringSerde(),
                              out_value_serde=JsonSerde(), output_topic="out", lineage=True, dlq=DLQ)
    assert [m.offset() for m in kept.filtered] == [11, 13]


def test_an_output_larger_than_its_topic_accepts_is_a_bad_record_naming_size_and_limit():
    c = TaskContext(application_id="app", subtopology="t", partition=0, output_topic="out", key_serde=StringSerde(),
                    value_serde=JsonSerde(), lineage=True, topic_rules=lambda topic: TopicRule(topic, 1000))
    proc = FunctionProcessor(lambda r: (r.key, "x" * r.value["n"]))
    proc.init(c)
    out = run_processor(proc, c, msgs([b'{"n": 10}', b'{"n": 5000}', b'{"n": 20}']), key_serde=StringSerde(),
                        value_serde=JsonSerde(), dlq=DLQ)
    assert [o.offset for o in origins(out)] == [10, 12]  # the batch goes on
    error = dict(out.dead_letters[0].headers)["eos.dlq.error"].decode()
    assert "in[0]@11 to topic out is 5,1" in error and "limit of 1,000 bytes" in error  # 5,002 + overhead


def test_a_dead_letter_too_large_for_its_topic_keeps_its_headers_and_drops_its_payload():
    dlq = DeadLetterPolicy("app-dlq", 0, "t-0", fail=False, topic_rules=lambda topic: TopicRule(topic, 500))
    c = ctx()
    proc = FunctionProcessor(lambda r: 1 / 0)
    proc.init(c)
    big = json.dumps({"pad": "y" * 2000}).encode()
    out = run_processor(proc, c, msgs([b"{}", big]), key_serde=StringSerde(), value_serde=JsonSerde(), dlq=dlq)
    small, large = out.dead_letters
    assert small.value == b"{}"
    headers = dict(large.headers)
    assert large.value is None and large.key is None and b"key and value omitted" in headers["eos.dlq.payload"]
    assert headers["eos.dlq.offset"] == b"11" and decode_origin(headers["eos.origin"]).offset == 11


def test_aggregations_skip_tombstones_and_count_does_not_read_values():
    from eos import Application

    app = Application("agg", "b:1")
    sub = app.count("words", "counts", name="counts")
    assert sub.value_serde.name == "bytes"  # any value counts, JSON or not
    from eos.operators.aggregate import AggregateProcessor, counter
    from recovery import KeyValueStore, MemoryBackend, WriteBuffer

    store = KeyValueStore(sub.stores[0])
    store.attach(WriteBuffer(MemoryBackend()))
    c = TaskContext(application_id="agg", subtopology="counts", partition=0, output_topic="counts",
                    key_serde=StringSerde(), value_serde=sub.output_value_serde, lineage=True,
                    stores={store.name: store})
    init, agg, _ = counter()
    proc = AggregateProcessor(store.name, init, agg)
    proc.init(c)
    records = [FakeMessage("words", 0, 10, b"not json", b"w"), FakeMessage("words", 0, 11, None, b"w"),
               FakeMessage("words", 0, 12, b"\xff\x00", b"w")]
    out = run_processor(proc, c, records, key_serde=StringSerde(), value_serde=sub.value_serde, dlq=DLQ)
    assert [o.value for o in out.outputs] == [b"\x00" * 7 + b"\x01", b"\x00" * 7 + b"\x02"]
    assert not out.dead_letters and [m.offset() for m in out.filtered] == [11]  # the tombstone


def test_dead_letters_name_their_task_and_sub_topology():
    out = run(lambda r: 1 / 0, [b"{}"])
    headers = dict(out.dead_letters[0].headers)
    assert headers["eos.dlq.task"] == b"t-0" and headers["eos.dlq.subtopology"] == b"t"


def test_outputs_are_partitioned_by_the_producer_unless_a_partition_is_given():
    out = run(lambda r: [Output("a", 1), Output("b", 2, partition=3)], [b"{}"])
    assert [o.partition for o in out.outputs] == [None, 3]


def test_co_partitioned_inputs_stay_in_time_order_within_and_across_batches():
    """Each partition in offset order even when its timestamps are not; when an input with more records beyond
    the batch runs out, the batch stops: the other input's later records wait for it."""
    def message(topic, offset, ts):
        return FakeMessage(topic, 0, offset, json.dumps(offset).encode(), b"k", timestamp=ts)

    seen = []
    proc = FunctionProcessor(lambda r: seen.append((r.topic, r.offset)))
    c = ctx()
    proc.init(c)
    batch = [message("a", 0, 10), message("a", 1, 5), message("a", 2, 30),  # a: out of order within
             message("b", 0, 1), message("b", 1, 20), message("b", 2, 40), message("b", 3, 50)]
    out = run_processor(proc, c, batch, key_serde=StringSerde(), value_serde=JsonSerde(), dlq=DLQ,
                        behind=frozenset({("a", 0)}))
    assert seen == [("b", 0), ("a", 0), ("a", 1), ("b", 1), ("a", 2)]  # a ran out: b@40 and b@50 wait
    assert out.stopped_at == {("a", 0): 3, ("b", 0): 2} and out.finished == {("a", 0)}
    seen.clear()
    whole = run_processor(proc, ctx(), batch, key_serde=StringSerde(), value_serde=JsonSerde(), dlq=DLQ)
    assert len(seen) == 7 and whole.stopped_at is None  # nothing behind: the whole batch
