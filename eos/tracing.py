"""W3C trace context (`traceparent`) through a job.

An input record that carries a `traceparent` header (`00-<trace id>-<parent span id>-<flags>`, as
OpenTelemetry's Kafka instrumentations and most tracing clients write it) passes its trace on: each output
derived from it, straight or through state (an aggregate's update carries the context of the input that
caused it, a repartition topic carries it to the next step), gets a child context: the same trace id and
flags, and a span id of its own, made of the task, the input record and the output's index, so that a
retried batch writes the same ids. Outputs of punctuations (a window's final result, a scheduled emit)
have no single input and carry no context. A malformed `traceparent` is passed on unchanged.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["TRACEPARENT", "child_traceparent", "parse_traceparent"]

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
