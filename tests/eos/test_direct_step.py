"""A function between its source and its sink (`Application.process`) runs in `run_processor`'s direct loop
(`eos.worker.processing._run_direct`): a (key, value) it returns goes straight to the task, anything else is
forwarded through the graph as before. Everything committed must be what the graph's loop commits: outputs
with their keys, values, timestamps, partitions and headers (trace context too), dead letters with their
errors and stages, the lineage ledger and the committed offsets; whatever the function returns, whatever the
input's bad records, however the batch is sliced, and through crashes."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

import eos.worker.processing as processing
from eos import Application, Output
from eos.testing import TopologyTestDriver
from eos.worker.attempt import BatchAttempt
from eos.worker.progress import CommitMetadata
from tests.eos import loops
from tests.eos.loops import PARENT, MadeAtOnce, drains, event_time, raw_inputs


class Directs(MadeAtOnce):
    """Counts the batches and records the direct loop took (installed around `_run_direct`), and the outputs it
    made at once (`made`: a record without headers, whose one output is a (key, value))."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch)
        self.batches = self.records = 0
        real = processing._run_direct

        def spy(*args: Any, **kwargs: Any) -> int:
            records = real(*args, **kwargs)
            self.batches += 1
            self.records += records
            return records

        monkeypatch.setattr(processing, "_run_direct", spy)


def run_both(monkeypatch: pytest.MonkeyPatch, make_app: Callable[[], Application], feeds: list[list[tuple[Any, ...]]],
             **driver_options: Any) -> tuple[dict[str, list[tuple[Any, ...]]], Directs]:
    """`feeds` through the app with the direct loop and without (`tests.eos.loops.run_both`)."""
    return loops.run_both(monkeypatch, make_app, feeds, "direct_step", Directs, **driver_options)


def shapes(record: Any) -> Any:
    """Every shape a function may return, by the input's "n" (and a few by its index)."""
    v = record.value
    i = v.get("i", 0)
    if v["n"] == "x":
        raise ValueError(f"no number in record {i}")
    if i % 97 == 0:  # a (key, value) whose key is an Output, to a topic the step has no sink for: it raises
        return Output(record.key, {"as": "output-as-key"}, topic="elsewhere"), None
    if i % 101 == 0:
        return Output(record.key, {"as": "output-as-key"}, timestamp=record.timestamp + 3), None
    if i % 89 == 0:
        return Output(record.key, v, topic="out", partition=0)  # its own topic (the sink's) and partition
    if v["n"] == 4:
        return None  # nothing: filtered
    if v["n"] == 3:
        return [(record.key, v), (record.key + "!", {**v, "copy": True})]  # two (a key None raises on the second)
    if v["n"] == 2:
        return Output(record.key, {**v, "late": 1}, headers=[("own", b"h")], timestamp=record.timestamp + 5)
    if i % 13 == 0:
        return record.key, None  # a tombstone
    if i % 17 == 0:
        return record.key, {"bad": {1, 2}}  # not JSON: a dead letter at serialization
    return record.key, {**v, "total": v["n"] * 2}


def function_app(fn: Callable[[Any], Any] = shapes, **settings: Any) -> Callable[[], Application]:
    def make() -> Application:
        app = Application("direct", **settings)
        app.process(input="in", output="out", key_serde="string", value_serde="json")(fn)
        return app
    return make


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_direct_loop_commits_what_the_graphs_loop_commits(monkeypatch, seed):
    inputs = raw_inputs(600, seed)
    out, directs = run_both(monkeypatch, function_app(max_records_per_batch=170), [inputs[:250], inputs[250:]])
    assert directs.records == len(inputs) and directs.batches >= 4
    # the (key, value)s of records without headers were made at once (lineage headers and all, as compared), the
    # others went through the context
    with_headers = sum(1 for *_, headers in inputs if headers)
    assert len(inputs) // 10 < directs.made < len(inputs) - with_headers
    driver = TopologyTestDriver(function_app(max_records_per_batch=170)(), wall_clock_ms=1_000_000)
    driver.pipe_records(inputs, serialized=True)
    assert sum(r.records_direct for r in driver.results) == len(inputs)  # (as the run counts them)
    stages = {dict(h)["eos.dlq.stage"] for *_, h, _ in out["direct-dlq"]}
    assert stages == {b"deserialize", b"timestamp", b"process", b"serialize"}
    assert any(dict(h or []).get("own") == b"h" for *_, h, _ in out["out"])
    assert any(dict(h or []).get("traceparent") not in (None, PARENT) for *_, h, _ in out["out"])  # child spans
    assert any(v == b"" for *_, v, _, _ in out["out"])  # tombstones (`committed` shows a None value as b"")


@pytest.mark.parametrize("seed", [1, 2])
def test_records_stamped_by_an_extractor_commit_what_the_graphs_loop_commits(monkeypatch, seed):
    """Event time from the record (`loops.event_time`: shifted, a float, refused as negative or not a number,
    its extractor failing): the same outputs' timestamps, dead letters and stream time."""
    inputs = raw_inputs(600, seed)
    out, directs = run_both(monkeypatch, function_app(max_records_per_batch=170, timestamp=event_time),
                            [inputs[:250], inputs[250:]])
    assert directs.records == len(inputs)
    letters = [dict(h) for *_, h, _ in out["direct-dlq"] if dict(h)["eos.dlq.stage"] == b"timestamp"]
    errors = {h["eos.dlq.error"].split(b":")[1] for h in letters}
    assert {b" the timestamp extractor failed", b" the timestamp is not a number of milliseconds"} <= errors
    own = {fields[3] for fields in inputs}  # (topic, key, value, timestamp, partition, headers)
    assert {ts for *_, (_, ts) in out["out"]} - own  # outputs at the extracted times, not their records' own


def test_a_record_the_function_fails_on_never_moves_stream_time(monkeypatch):
    inputs = [("in", b"k%d" % i, json.dumps({"n": 1, "i": i + 1}).encode(), 1_000 + i, None, None) for i in range(50)]
    inputs += [("in", b"late", json.dumps({"n": "x", "i": 99}).encode(), 90_000, None, None),  # raises
               ("in", b"late", json.dumps({"n": 1, "i": 98}).encode(), 1_060, None, None),
               ("in", b"late", json.dumps({"bad": "json"}).encode()[:-1], 95_000, None, None)]  # not JSON
    times = []
    for direct in (False, True):
        with monkeypatch.context() as m:
            directs = Directs(m)
            if not direct:
                m.setattr(processing, "direct_step", lambda processor: None)
            driver = TopologyTestDriver(function_app()(), wall_clock_ms=1_000_000)
            driver.pipe_records(inputs, serialized=True)
            times.append([CommitMetadata.decode(meta).stream_time
                          for group in driver.cluster.groups.values() for _, meta in group.values()])
            assert (directs.records > 0) is direct
    assert times[0] == times[1] == [1_060]


def test_several_input_partitions_each_take_the_direct_loop(monkeypatch):
    rng = random.Random(5)
    inputs = [("in", b"k%d" % rng.randrange(50), json.dumps({"n": rng.randrange(1, 5), "i": i}).encode(), 1_000 + i,
               rng.randrange(4), None) for i in range(400)]
    out, directs = run_both(monkeypatch, function_app(), [inputs], partitions=4)
    assert directs.records == len(inputs) and directs.batches == 4
    assert {p for p, *_ in out["out"]} == {0, 1, 2, 3}


def test_streamed_batches_drain_where_the_graphs_loop_drains(monkeypatch):
    inputs = raw_inputs(500, 7)
    _, directs = run_both(monkeypatch, function_app(batch_slice_records=16), [inputs])
    assert directs.records == len(inputs)

    direct = drains(monkeypatch, function_app(batch_slice_records=16)(), inputs)
    off = drains(monkeypatch, function_app(batch_slice_records=16)(), inputs, "direct_step")
    assert direct == off and len(direct) > 10


def test_a_streamed_batch_that_stops_early_commits_where_the_graphs_loop_stops(monkeypatch):
    monkeypatch.setattr(BatchAttempt, "_open_budget", lambda self: 0.0)  # every drain stops its batch
    inputs = raw_inputs(300, 11)
    out, directs = run_both(monkeypatch, function_app(batch_slice_records=16), [inputs])
    assert directs.batches > 10  # a batch each 16 outputs or dead letters
    assert len(out["(results)"]) == directs.batches


def test_an_output_its_topic_refuses_is_a_dead_letter_at_serialization(monkeypatch):
    rng = random.Random(9)
    inputs = [("in", b"k%d" % rng.randrange(12), json.dumps({"n": 1, "i": i + 1}).encode(),
               rng.choice([1_000, 2_000, 20_000 + i]), None, None) for i in range(300)]
    configs = {"out": {"message.timestamp.before.max.ms": "990000"}}  # (the clock is at 1,000,000 ms)
    def copy(record):
        return record.key, record.value

    out, directs = run_both(monkeypatch, function_app(copy), [inputs], topic_configs=configs)
    assert directs.records == len(inputs)
    refused = [dict(h) for *_, h, _ in out["direct-dlq"]]
    assert refused and all(h["eos.dlq.stage"] == b"serialize" for h in refused)
    assert all(m[5][1] >= 10_000 for m in out["out"])  # (partition, offset, key, value, headers, timestamp)


def test_only_a_function_alone_between_source_and_sink_takes_the_direct_loop(monkeypatch):
    def enrich(record):
        return record.key, {**record.value, "seen": True}

    def taken(build: Callable[[Application], None], **settings: Any) -> bool:
        with monkeypatch.context() as m:
            directs = Directs(m)
            app = Application("shapes", **settings)
            build(app)
            driver = TopologyTestDriver(app, wall_clock_ms=1_000_000)
            driver.pipe_many("in", [(b"a", b'{"n": 1}'), (b"b", b'{"n": 2}')], serialized=True)
            driver.close()
            return directs.batches > 0

    assert taken(lambda app: app.process(input="in", output="out", value_serde="json")(enrich))
    assert taken(lambda app: app.process(input="in", output="out", value_serde="json")(enrich), cache_max_bytes=1 << 20)
    # an extra output (a named sink beside the plain one)
    assert not taken(lambda app: app.process(input="in", output="out", value_serde="json",
                                             extra_outputs=["audit"])(enrich))
    # with a timestamp extractor too
    assert taken(lambda app: app.process(input="in", output="out", value_serde="json",
                                         timestamp=lambda r: 5_000)(enrich))
    # the DSL's operators (a graph of steps, not one function)
    assert not taken(lambda app: app.stream("in", value_serde="json").map_values(lambda v: v).to("out"))
    # a repartition (its sink needs a key)
    assert not taken(lambda app: app.count(app.repartition("in", name="by"), "out", name="counts"))


@pytest.mark.parametrize("stamps", [{}, {"timestamp": event_time}], ids=["record-time", "extracted"])
def test_the_direct_loop_stays_exactly_once_when_batches_crash(monkeypatch, stamps):
    directs = Directs(monkeypatch)
    rng = random.Random(8)
    inputs: list[tuple[Any, ...]] = []
    for i in range(500):
        key = None if rng.random() < 0.03 else f"k{rng.randrange(30)}"
        value = None if rng.random() < 0.03 else {"n": "x" if rng.random() < 0.03 else rng.randrange(1, 5), "i": i}
        inputs.append(("in", key, value, 2_000 + i * 7))
    driver = TopologyTestDriver(function_app(max_records_per_batch=60, **stamps)(), wall_clock_ms=1_000_000)
    report = driver.check_exactly_once(inputs, crashes=12, seed=3, chunk=40)
    assert report.ok and len(report.crashes) >= 8
    assert directs.records >= len(inputs)  # (crashed batches run again)
