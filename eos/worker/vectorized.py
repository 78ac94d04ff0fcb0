"""Vectorized processing: a function gets all records of a task's batch as one table and returns a table.

Input columns: `key`, `value` (deserialized), `topic`, `partition`, `offset`, `timestamp`.
Output columns: `value` (required), `key`, `output_topic`, `output_partition`, `timestamp`, and the
origin columns `topic`/`partition`/`offset` (kept automatically when the function transforms the input
frame). Without an `offset` column the output must have one row per input row, in input order.

A row written to a topic whose records carry their writers' clocks (eos.streamtime) carries the task's clock
as it stood after the row's origin record: Kafka Streams' stream time, the largest timestamp read so far, as
a record-at-a-time step reading the same records would stamp its outputs.

If the function raises, the batch is bisected to find the rows that make it fail; those go to the
dead-letter topic and the rest is processed (batch functions must therefore be free of side effects).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

from eos.errors import SerdeError
from eos.origin import ORIGIN_HEADER, encode_origin, lineage_origin
from eos.records import Record
from eos.serde import Serde
from eos.streamtime import STAMP_HEADER
from eos.time import RECORD_TIME
from eos.topology import BatchFormat
from eos.worker.dead_letters import DeadLetterPolicy, Stage
from eos.worker.processing import NOT_A_BAD_RECORD, BatchOutcome, entries
from eos.worker.topic_rules import OutputRejectedError, TopicRule
from transactions import Message, ProducerRecord

__all__ = ["run_batch_function"]

_INPUT_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")


def run_batch_function(fn: Callable[[Any], Any], fmt: BatchFormat, messages: list[Message], *, key_serde: Serde,
                       value_serde: Serde, out_key_serde: Serde, out_value_serde: Serde, output_topic: str | None,
                       lineage: bool, dlq: DeadLetterPolicy, topic_rules: Callable[[str], TopicRule] | None = None,
                       timestamp: Callable[[Record], int] = RECORD_TIME, stream_time: int = -1,
                       stamp: Callable[[str, int], bytes | None] | None = None) -> BatchOutcome:
    """`stream_time`: the task's when the batch starts; `stamp(topic, clock)`: the stamp a row written to
    `topic` carries, given the task's clock after its origin record (None: the topic carries no clocks)."""
    outcome = BatchOutcome(stream_time=stream_time)
    good: list[Message] = []
    times: list[int] = []  # each good record's timestamp
    columns: dict[str, list[Any]] = {c: [] for c in _INPUT_COLUMNS}
    for msg, record, ts in entries(messages, key_serde, value_serde, timestamp):
        outcome.records_in += 1
        raw = msg.value()
        outcome.bytes_in += len(raw) if raw else 0
        if not isinstance(record, Record):
            stage = Stage.DESERIALIZE if isinstance(record, SerdeError) else Stage.TIMESTAMP
            outcome.dead_letters.append(dlq.route(msg, record, stage))
            continue
        good.append(msg)
        times.append(ts)
        for name, v in zip(_INPUT_COLUMNS, (record.key, record.value, msg.topic(), msg.partition(), msg.offset(), ts),
                           strict=True):
            columns[name].append(v)
    if not good:
        return outcome
    frame = _make_frame(columns, fmt)
    results: list[tuple[int, int, Any]] = []  # (first input row, end row of the slice, function output)
    isolated: list[int] = []  # rows on which the function alone fails
    _call_isolating(fn, frame, 0, len(good), fmt, good, results, dlq, outcome, isolated)
    rows: list[_Row] = []
    failed: dict[int, tuple[Message, Exception]] = {}  # records one of whose rows could not be written
    for start, stop, out in results:
        _collect(out, start, stop, good, fmt, out_key_serde, out_value_serde, output_topic, lineage, dlq, rows,
                 failed)
    dead = {id(good[i]) for i in isolated}  # rows dead-lettered by the bisection
    outcome.stream_time = _check_and_stamp(good, times, rows, dead, failed, stream_time, topic_rules, stamp)
    outcome.outputs.extend(ProducerRecord(r.topic, r.partition, r.key, r.value, r.headers, r.timestamp)
                           for r in rows if id(r.origin) not in failed)
    outcome.dead_letters.extend(dlq.route(msg, error, Stage.SERIALIZE) for msg, error in failed.values())
    accounted = {id(r.origin) for r in rows} | set(failed) | dead
    outcome.filtered.extend(m for m in good if id(m) not in accounted)
    return outcome


class _Row(NamedTuple):
    """An output row, serialized, from the input record `origin`."""

    origin: Message
    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int | None


def _check_and_stamp(good: list[Message], times: list[int], rows: list[_Row], dead: set[int],
                     failed: dict[int, tuple[Message, Exception]], stream_time: int,
                     topic_rules: Callable[[str], TopicRule] | None,
                     stamp: Callable[[str, int], bytes | None] | None) -> int:
    """Each good record's rows in input order, stamped with the task's clock after the record (Kafka Streams'
    stream time) and checked against their topics' rules; a record one of whose rows a rule rejects goes into
    `failed`. A record that fails (in the function: `dead`; at serializing or here: `failed`) never moves the
    clock, as in the record-at-a-time loop. Returns the clock after the batch."""
    rows_of: dict[int, list[_Row]] = {}
    for row in rows:
        rows_of.setdefault(id(row.origin), []).append(row)
    clock = stream_time
    for msg, ts in zip(good, times, strict=True):
        if id(msg) in dead or id(msg) in failed:
            continue
        after = max(clock, ts)
        for row in rows_of.get(id(msg), ()):
            if stamp is not None and (stamped := stamp(row.topic, after)) is not None:
                row.headers.append((STAMP_HEADER, stamped))
            if topic_rules is not None and (why := topic_rules(row.topic).violation(
                    row.key, row.value, row.headers,
                    msg.timestamp()[1] if row.timestamp is None else row.timestamp)) is not None:
                failed[id(msg)] = (msg, OutputRejectedError(
                    f"the output of {msg.topic()}[{msg.partition()}]@{msg.offset()} to topic {row.topic} {why}"))
                break
        else:
            clock = after
    return clock


def _make_frame(columns: dict[str, list[Any]], fmt: BatchFormat) -> Any:
    if fmt == "pandas":
        import pandas as pd

        return pd.DataFrame(columns)
    import pyarrow as pa

    try:
        return pa.table(columns)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TypeError(f"the deserialized keys/values cannot form an Arrow column ({exc}); use format='pandas' "
                        "for values of mixed types") from exc


def _slice(frame: Any, start: int, stop: int, fmt: BatchFormat) -> Any:
    return frame.iloc[start:stop].reset_index(drop=True) if fmt == "pandas" else frame.slice(start, stop - start)


def _call_isolating(fn: Callable[[Any], Any], frame: Any, start: int, stop: int, fmt: BatchFormat,
                    good: list[Message], results: list[tuple[int, int, Any]], dlq: DeadLetterPolicy,
                    outcome: BatchOutcome, isolated: list[int]) -> None:
    """Call `fn` on rows [start, stop); on failure bisect until the failing rows are single records."""
    part = frame if (start, stop) == (0, len(good)) else _slice(frame, start, stop, fmt)
    try:
        results.append((start, stop, fn(part)))
        return
    except NOT_A_BAD_RECORD:
        raise
    except Exception as exc:
        if stop - start == 1:
            outcome.dead_letters.append(dlq.route(good[start], exc, Stage.PROCESS))
            isolated.append(start)
            return
    mid = (start + stop) // 2
    _call_isolating(fn, frame, start, mid, fmt, good, results, dlq, outcome, isolated)
    _call_isolating(fn, frame, mid, stop, fmt, good, results, dlq, outcome, isolated)


def _to_columns(out: Any, fmt: BatchFormat) -> dict[str, list[Any]]:
    if out is None:
        return {"value": []}
    if hasattr(out, "to_pydict"):  # pyarrow Table / RecordBatch
        return out.to_pydict()
    if hasattr(out, "to_dict") and hasattr(out, "columns"):  # pandas DataFrame
        return {str(c): out[c].tolist() for c in out.columns}
    raise TypeError(f"a batch function must return a pyarrow Table or a pandas DataFrame, got {type(out).__name__}")


def _collect(out: Any, start: int, stop: int, good: list[Message], fmt: BatchFormat, key_serde: Serde,
             value_serde: Serde, output_topic: str | None, lineage: bool, dlq: DeadLetterPolicy, rows: list[_Row],
             failed: dict[int, tuple[Message, Exception]]) -> None:
    """Serialize one slice's output rows into `rows`; a record one of whose rows cannot be serialized goes into
    `failed` (its rows are dropped when the batch's outputs are gathered)."""
    cols = _to_columns(out, fmt)
    if "value" not in cols:
        raise TypeError(f"the batch function's output has no 'value' column (columns: {sorted(cols)})")
    n = len(cols["value"])
    by_offset = {(m.topic(), m.partition(), m.offset()): m for m in good}
    origins = _origins(cols, n, start, stop, good)
    counters: Counter[tuple[str, int, int]] = Counter()
    get = lambda name, i: cols[name][i] if name in cols else None
    for i in range(n):
        origin = origins[i]
        msg = by_offset.get(origin)
        if msg is None:
            raise ValueError(f"output row {i} names origin {origin}, which is not a record of this batch")
        if id(msg) in failed:
            continue
        topic = get("output_topic", i) or output_topic
        if topic is None:
            raise ValueError("the sub-topology has no output topic and the output has no 'output_topic' column")
        try:
            k, v = key_serde.serialize(get("key", i)), value_serde.serialize(cols["value"][i])
        except SerdeError as exc:
            failed[id(msg)] = (msg, exc)
            continue
        headers: list[tuple[str, bytes]] = []
        if lineage:
            headers.append((ORIGIN_HEADER, encode_origin(*lineage_origin(msg, dlq.transitive), counters[origin])))
        counters[origin] += 1
        ts, part = get("timestamp", i), get("output_partition", i)
        rows.append(_Row(msg, topic, None if part is None else int(part), k, v, headers,
                         None if ts is None else int(ts)))


def _origins(cols: dict[str, list[Any]], n: int, start: int, stop: int,
             good: list[Message]) -> list[tuple[str, int, int]]:
    if "offset" in cols:
        topics = cols.get("topic") or [None] * n
        parts = cols.get("partition") or [None] * n
        single = {(m.topic(), m.partition()) for m in good}
        default: tuple[Any, Any] = next(iter(single)) if len(single) == 1 else (None, None)
        return [(t if t is not None else default[0], int(p) if p is not None else default[1], int(o))
                for t, p, o in zip(topics, parts, cols["offset"], strict=True)]
    if n == 0:  # every row dropped: nothing to name an origin for
        return []
    if n != stop - start:
        raise ValueError(f"the batch function returned {n} rows for {stop - start} input rows and no 'offset' column: "
                         "keep the input's offset column so each output row names its origin")
    return [(m.topic(), m.partition(), m.offset()) for m in good[start:stop]]
