"""Aggregate audit: recompute a per-key aggregate (count, sum, min, max) from the committed input and compare
it with the committed output.

For each key, the committed output must be exactly the sequence of running aggregates over that key's
input records in offset order: the last committed value equals the recomputed value, and no step is
repeated (a batch applied twice) or skipped (a batch lost). Sequences are compared through a running hash
and a count, so memory grows with the number of keys, not records.

A job run with a record cache (`cache_max_bytes`, `eos.cache`) commits only some of the running values:
with `cached=True` each key's committed values must be values its aggregate had, in their order, none
twice, the last one the recomputed final value (`is_history`); this keeps every running value in memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from eos.audit.scan import scan_topic
from transactions import KafkaAdmin, admin_for

__all__ = ["AggregateResult", "audit_aggregate", "AggregateKind"]

AggregateKind = Literal["count", "sum", "min", "max"]


@dataclass
class _Seq:
    count: int = 0
    last: Any = None
    digest: bytes = b""

    def push(self, value: Any) -> None:
        self.count += 1
        self.last = value
        self.digest = hashlib.blake2b(self.digest + repr(value).encode(), digest_size=16).digest()


@dataclass
class AggregateResult:
    keys_expected: int = 0
    keys_observed: int = 0
    input_records: int = 0
    output_records: int = 0
    wrong_final: int = 0
    missing_keys: int = 0
    unexpected_keys: int = 0
    sequence_mismatches: int = 0
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return self.wrong_final + self.missing_keys + self.unexpected_keys + self.sequence_mismatches

    def sample(self, kind: str, limit: int, **detail: Any) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < limit:
            bucket.append(detail)


def _step(kind: AggregateKind) -> Callable[[Any, Any], Any]:
    if kind == "count":
        return lambda agg, v: (agg or 0) + 1
    if kind == "sum":
        return lambda agg, v: (agg or 0) + v
    if kind == "min":
        return lambda agg, v: v if agg is None else min(agg, v)
    if kind == "max":
        return lambda agg, v: v if agg is None else max(agg, v)
    raise ValueError(f"aggregate must be count, sum, min or max, got {kind!r}")


def audit_aggregate(bootstrap_servers: str, inputs: Iterable[str], outputs: Iterable[str], *, kind: AggregateKind,
                    input_value: Callable[[bytes | None], Any], output_value: Callable[[bytes | None], Any],
                    accept: Callable[[bytes | None], bool] | None = None, group: str | None = None,
                    admin: KafkaAdmin | None = None, max_samples: int = 10,
                    progress: Callable[[int], None] | None = None, cached: bool = False) -> AggregateResult:
    """`input_value(raw value)` gives the number to aggregate (ignored for count); `output_value(raw value)`
    extracts the aggregate from an output record; `accept(raw value)` selects the input records the job
    aggregates (e.g. not the ones it dead-letters). Keys are compared as raw bytes."""
    admin = admin or admin_for(bootstrap_servers, settle_once=True)
    step = _step(kind)
    result = AggregateResult()
    expected: dict[bytes | None, _Seq] = {}
    running: dict[bytes | None, Any] = {}
    histories: dict[bytes | None, list[Any]] = {}  # cached=True: every running value, and what was committed
    outputs_of: dict[bytes | None, list[Any]] = {}
    for topic in inputs:
        tps = admin.topic_partitions(topic)
        until = None
        if group is not None:
            committed = admin.group_offsets(group, tps, stable=True)
            until = {tp: committed.get(tp) or 0 for tp in tps}
        for batch in scan_topic(bootstrap_servers, topic, admin=admin, until=until, progress=progress):
            for msg in batch:
                if accept is not None and not accept(msg.value()):
                    continue
                key = msg.key()
                value = None if kind == "count" else input_value(msg.value())
                running[key] = step(running.get(key), value)
                expected.setdefault(key, _Seq()).push(running[key])
                if cached:
                    histories.setdefault(key, []).append(running[key])
                result.input_records += 1
    observed: dict[bytes | None, _Seq] = {}
    for topic in outputs:
        for batch in scan_topic(bootstrap_servers, topic, admin=admin, progress=progress):
            for msg in batch:
                value = output_value(msg.value())
                observed.setdefault(msg.key(), _Seq()).push(value)
                if cached:
                    outputs_of.setdefault(msg.key(), []).append(value)
                result.output_records += 1
    result.keys_expected, result.keys_observed = len(expected), len(observed)
    for key, want in expected.items():
        got = observed.get(key)
        if got is None:
            result.missing_keys += 1
            result.sample("missing_keys", max_samples, key=_show(key), expected_final=want.last)
            continue
        if got.last != want.last:
            result.wrong_final += 1
            result.sample("wrong_final", max_samples, key=_show(key), expected=want.last, observed=got.last)
        if cached:
            if not is_history(outputs_of[key], histories[key]):
                result.sequence_mismatches += 1
                result.sample("sequence_mismatches", max_samples, key=_show(key), expected_steps=want.count,
                              observed_steps=got.count, reason="not values the aggregate had, in order, once each")
        elif got.count != want.count or got.digest != want.digest:
            result.sequence_mismatches += 1
            result.sample("sequence_mismatches", max_samples, key=_show(key), expected_steps=want.count,
                          observed_steps=got.count,
                          reason="repeated steps" if got.count > want.count else
                          "skipped steps" if got.count < want.count else "different steps")
    for key in observed.keys() - expected.keys():
        result.unexpected_keys += 1
        result.sample("unexpected_keys", max_samples, key=_show(key), observed_final=observed[key].last)
    return result


def is_history(committed: list[Any], running: list[Any]) -> bool:
    """Whether `committed` is what a record cache lets through of the `running` values of one aggregate:
    some of them, in their order, none twice (`running` may hold a value twice, e.g. a sum adding 0), and
    the last one."""
    if not committed or committed[-1] != running[-1]:
        return False
    rest = iter(running)
    return all(any(value == step for step in rest) for value in committed)


def _show(key: bytes | None) -> str:
    if key is None:
        return "<null>"
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key.hex()
