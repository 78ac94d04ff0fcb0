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
