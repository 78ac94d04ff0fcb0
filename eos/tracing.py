"""W3C trace context (`traceparent`) through a job.

An input record that carries a `traceparent` header (`00-<trace id>-<parent span id>-<flags>`, as
OpenTelemetry's Kafka instrumentations and most tracing clients write it) passes its trace on: each output
derived from it, straight or through state (an aggregate's update carries the context of the input that
caused it, a repartition topic carries it to the next step), gets a child context: the same trace id and
flags, and a span id of its own, made of the task, the input record and the output's index, so that a
retried batch writes the same ids. Outputs of punctuations (a window's final result, a scheduled emit)
have no single input and carry no context. A malformed `traceparent` is passed on unchanged.

With `tracing=True` (an application setting; OpenTelemetry's API installed), each task attempt of a batch
is a span `eos.batch` (task, batch, attempt, records in and out) of the tracer `eos`, linked to the traces
of its input records (the first `MAX_LINKS` distinct ones); where the tasks run, an OpenTelemetry SDK
configured as usual (OTEL_* variables, `opentelemetry-instrument`) exports them. Off, nothing is imported
and nothing is done.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["TRACEPARENT", "MAX_LINKS", "child_traceparent", "parse_traceparent", "batch_span", "link_inputs"]

MAX_LINKS = 128

TRACEPARENT = "traceparent"
_FORMAT = re.compile(rb"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def parse_traceparent(value: bytes | None) -> tuple[str, str, str] | None:
    """(trace id, parent span id, flags) of a valid version-00 `traceparent`, else None."""
    found = _FORMAT.match(value.strip()) if value else None
    if found is None or found.group(1) != b"00" or found.group(2) == b"0" * 32 or found.group(3) == b"0" * 16:
        return None
    return found.group(2).decode(), found.group(3).decode(), found.group(4).decode()


def child_traceparent(value: bytes, seed: bytes) -> bytes:
    """The `traceparent` of an output derived from a record carrying `value`: the same trace and flags, a
    span id made of `seed` (never all zeros)."""
    parsed = parse_traceparent(value)
    if parsed is None:
        return value
    trace, _, flags = parsed
    span = hashlib.blake2b(seed, digest_size=8).hexdigest()
    if span == "0" * 16:
        span = "0" * 15 + "1"
    return f"00-{trace}-{span}-{flags}".encode()


@contextlib.contextmanager
def batch_span(enabled: bool, task: str, batch: int, attempt: int) -> Iterator[Any]:
    """The span of one task attempt of a batch (None when tracing is off); an exception ends it in error."""
    if not enabled:
        yield None
        return
    from opentelemetry import trace

    tracer = trace.get_tracer("eos")
    with tracer.start_as_current_span("eos.batch", kind=trace.SpanKind.CONSUMER, attributes={
            "messaging.system": "kafka", "eos.task": task, "eos.batch": batch, "eos.attempt": attempt}) as span:
        yield span


def link_inputs(span: Any, headers: Iterable[Any], seen: set[bytes] | None = None) -> int:
    """Link `span` to the traces of the input records whose headers are given (distinct contexts, at most
    `MAX_LINKS`); returns how many links were added. `seen`: the contexts linked by earlier calls for the
    same span (a batch read in slices), updated."""
    if span is None:
        return 0
    from opentelemetry.trace import SpanContext, TraceFlags

    seen = set() if seen is None else seen
    before = len(seen)
    for found in headers:
        for name, value in found or ():
            if name != TRACEPARENT or value in seen or len(seen) >= MAX_LINKS:
                continue
            parsed = parse_traceparent(value)
            if parsed is None:
                continue
            seen.add(value)
            trace_id, span_id, flags = parsed
            span.add_link(SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                                      trace_flags=TraceFlags(int(flags, 16))))
    return len(seen) - before
