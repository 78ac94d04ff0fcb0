"""Comparing one of `run_processor`'s special loops (the fold, the direct loop) with its record-at-a-time loop
through the test driver: the same inputs, everything committed compared (the tests of eos.worker.folding and
of the direct loop use these)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

import eos.worker.processing as processing
from eos import Application
from eos.testing import TopologyTestDriver
from eos.worker.attempt import BatchAttempt
from eos.worker.context import TaskContext

TOPIC_ID = re.compile(rb'"topic_id":"[0-9a-f]+"')
TRACEPARENT = "traceparent"
PARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
Spy = TypeVar("Spy")


def raw_inputs(n: int, seed: int, keys: int = 40, bad: bool = True) -> list[tuple[Any, ...]]:
    """(topic, key bytes, value bytes, timestamp, partition, headers): hot and cold keys, a few of every
    kind of bad record, tombstones, out-of-order timestamps, and headers (trace context among them)."""
    rng = random.Random(seed)
    out: list[tuple[Any, ...]] = []
    for i in range(n):
        key: bytes | None = f"k{int(rng.paretovariate(1.1)) % keys}".encode()
        value: bytes | None = json.dumps({"n": rng.randrange(1, 5), "i": i}).encode()
        ts = 10_000 + i * 10 - rng.randrange(0, 300)
        r = rng.random() if bad else 1.0
        if r < 0.03:
            key = None  # no key: a dead letter (unless a tombstone)
        elif r < 0.05:
            key = b"\xff\xfek"  # not UTF-8: a dead letter
        elif r < 0.08:
            value = None  # a tombstone: ignored
        elif r < 0.10:
            value = b"{not json"  # a dead letter where values are JSON; counted where they are bytes
        elif r < 0.12:
            ts = -7  # an invalid timestamp: a dead letter
        elif r < 0.14:
            value = json.dumps({"n": "x", "i": i}).encode()  # a sum's aggregator raises on it
        headers = None
        if rng.random() < 0.15:
            headers = [("app", b"h%d" % i)] + ([(TRACEPARENT, PARENT)] if rng.random() < 0.5 else [])
        out.append(("in", key, value, ts, None, headers))
    return out


def event_time(record: Any) -> Any:
    """A timestamp extractor for `raw_inputs`' records, of any value type (by offset): most records a little
    later than their own timestamp (out of order among themselves; by their deserialized key and value too),
    some as a float, and some it refuses or fails on: a negative time, a time that is not a number, an error of
    its own."""
    offset, key, value = record.offset, record.key, record.value
    if offset % 17 == 3:
        raise KeyError("no event time")
    if offset % 19 == 4:
        return -5
    if offset % 23 == 6:
        return "soon"
    if offset % 11 == 2:
        return record.timestamp + 0.5
    by_key = ord(key[-1]) % 3 if type(key) is str and key else 0
    by_value = value.get("n", 0) if type(value) is dict else 0
    return record.timestamp + offset % 7 * 40 + by_key * 5 + (by_value if type(by_value) is int else 0)


def refused_by_the_extractor(letters: list[tuple[Any, ...]]) -> bool:
    """Whether dead letters (as `committed` gives them) hold records `event_time` refused and failed on, stage
    "timestamp"."""
    errors = {dict(h)["eos.dlq.error"] for *_, h, _ in letters if dict(h)["eos.dlq.stage"] == b"timestamp"}
    return (any(b"the timestamp extractor failed: KeyError" in e for e in errors)
            and any(b"is not a number of milliseconds: 'soon'" in e for e in errors))


class MadeAtOnce:
    """Counts the outputs made in one call (`TaskContext.direct_output`, wrapped): `made`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        make = TaskContext.direct_output

        def direct_output(ctx: TaskContext, target: str, tp: tuple[str, int]) -> Any:
            output = make(ctx, target, tp)
            if output is None:
                return None

            def counted(*args: Any) -> Any:
                made = output(*args)
                self.made += 1
                return made
            return counted

        monkeypatch.setattr(TaskContext, "direct_output", direct_output)


def committed(driver: TopologyTestDriver) -> dict[str, list[tuple[Any, ...]]]:
    """Every committed record of every topic, as it is on the (in-memory) broker (the ledger's topic ids,
    new for every driver, left out), and under "(results)" each task batch's counts and committed offsets."""
    topics = {topic: [(m.partition(), m.offset(), m.key(), TOPIC_ID.sub(b"", m.value() or b""), m.headers(),
                       m.timestamp()) for m in driver.cluster.records(topic)] for topic in sorted(driver.cluster.logs)}
    return {**topics, "(results)": [(str(r.task), r.batch, r.records_in, r.bytes_in, r.records_out, r.dead_letters,
                                     r.committed_offsets) for r in driver.results]}


def run_both(monkeypatch: pytest.MonkeyPatch, make_app: Callable[[], Application], feeds: list[list[tuple[Any, ...]]],
             off: str, spy: Callable[[pytest.MonkeyPatch], Spy],
             **driver_options: Any) -> tuple[dict[str, list[tuple[Any, ...]]], Spy]:
    """`feeds` (each piped, then processed) through the app without the loop (`processing.<off>` answering
    None) and with it (`spy` installed); asserts both committed the same and returns what was committed and
    the spy."""
    results = []
    spied = None
    for on in (False, True):
        with monkeypatch.context() as m:
            if on:
                spied = spy(m)
            else:
                m.setattr(processing, off, lambda processor: None)
            driver = TopologyTestDriver(make_app(), wall_clock_ms=1_000_000, **driver_options)
            for feed in feeds:
                driver.pipe_records(feed, serialized=True)
            results.append(committed(driver))
            driver.close()
    without, with_loop = results
    assert spied is not None
    for topic in without:
        assert with_loop[topic] == without[topic], f"topic {topic} differs"
    return with_loop, spied


def drains(monkeypatch: pytest.MonkeyPatch, app: Application, inputs: list[tuple[Any, ...]],
           off: str | None = None) -> list[int]:
    """What each drain of a streamed run found gathered (outputs and dead letters, drained ones included),
    with `processing.<off>` answering None (that loop turned off) if given."""
    seen: list[int] = []
    real = BatchAttempt._drain

    def counted(self: BatchAttempt, outcome: Any) -> bool:
        seen.append(outcome.output_count + outcome.dead_letter_count)
        return real(self, outcome)

    with monkeypatch.context() as m:
        m.setattr(BatchAttempt, "_drain", counted)
        if off is not None:
            m.setattr(processing, off, lambda processor: None)
        driver = TopologyTestDriver(app, wall_clock_ms=1_000_000)
        driver.pipe_records(inputs, serialized=True)
    return seen
