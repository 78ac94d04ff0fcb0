"""The peers benchmark's jobs on this framework, defined on an application: run by `eos run` (eos_job.py) and
counted through the test driver (benchmarks.instructions)."""

from __future__ import annotations

from eos import Application
from eos.windows import SessionWindows, SlidingWindows, TumblingWindows

__all__ = ["GRACE_MS", "JOBS", "SESSION_GAP_MS", "SLIDING_MS", "WINDOW_MS", "define"]

JOBS = ("stateless", "count", "pipeline", "window", "window-field", "session", "sliding")
#: the window job's tumbling windows of event time (each peer's own: the same size and grace on every one)
WINDOW_MS, GRACE_MS = 60_000, 10_000
#: the session job's inactivity gap (the same grace): a key's records come ~6 s apart on average (10k keys, 1M
#: records over 10 minutes of event time), so a little over half of them extend a session, the rest start one
SESSION_GAP_MS = 5_000
#: the sliding job's time difference (the same grace): with a key's records ~6 s apart, a record falls in its own
#: window and in the windows after the key's records of the 5 s before it (~2 updates a record)
SLIDING_MS = 5_000


def define(app: Application, job: str, source: str, sink: str) -> None:
    """Add `job` (one of JOBS) reading `source` and writing `sink` to `app`."""
    if job == "stateless":
        @app.process(input=source, output=sink, key_serde="string", value_serde="json")
        def enrich(record):  # type: ignore[no-untyped-def]
            order = record.value
            return record.key, {**order, "total": order["qty"] * order["price"]}
    elif job == "pipeline":
        # four operators fused in one sub-topology: one task and one transaction per partition, no topic between
        (app.stream(source, key_serde="string", value_serde="json")
            .filter(lambda key, order: order["qty"] >= 2, name="big")
            .map_values(lambda order: {**order, "total": order["qty"] * order["price"]}, name="priced")
            .group_by_key()
            .sum(lambda order: order["total"], name="revenue")
            .to_stream().to(sink))
    elif job == "count":
        app.count(source, sink, name="counts")
    elif job == "window":
        # records per key and tumbling window, one output per input; the key written as Kafka Streams' windowed
        # keys are (the key's bytes, then the window's times), so that no peer pays for JSON keys
        app.count(source, sink, name="counts", windows=TumblingWindows(WINDOW_MS, grace=GRACE_MS),
                  windowed_key="binary")
    elif job == "window-field":
        # the window job with event time read from each value (Kafka Streams' TimestampExtractor): its "id", taken
        # as milliseconds (the values stay the other jobs'), so the count reads its values as JSON
        app.count(source, sink, name="counts", windows=TumblingWindows(WINDOW_MS, grace=GRACE_MS),
                  windowed_key="binary", timestamp="field:id")
    elif job == "session":
        # records per key and session of event time; a record that extends a session replaces it: a tombstone
        # for the session it ends, then the count of the longer one (Kafka Streams' session-windowed keys)
        app.count(source, sink, name="counts", windows=SessionWindows(SESSION_GAP_MS, grace=GRACE_MS),
                  windowed_key="binary")
    elif job == "sliding":
        # records per key and sliding window of event time: every window a record creates or falls in is updated
        # (one output each), keyed as Kafka Streams' time-windowed keys
        app.count(source, sink, name="counts", windows=SlidingWindows(SLIDING_MS, grace=GRACE_MS),
                  windowed_key="binary")
    else:
        raise ValueError(f"no job {job!r}: the jobs are {', '.join(JOBS)}")
