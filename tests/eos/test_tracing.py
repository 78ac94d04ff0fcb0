"""W3C trace context through a job, by the test driver: outputs derived from a traced input carry a child
context (same trace, own span id, the same on a retry), straight, through a repartition topic and through
an aggregation's state."""

from __future__ import annotations

from eos import Application
from eos.testing import TopologyTestDriver
from eos.tracing import child_traceparent, parse_traceparent

BASE = 1_800_000_000_000
TRACE = "4bf92f3577b34da6a3ce929b0e0e4736"
PARENT = b"00-" + TRACE.encode() + b"-00f067aa0ba902b7-01"


def traced_app() -> Application:
    app = Application("traced", bootstrap_servers="unused:9092")
    orders = app.stream("orders").filter(lambda k, o: o["qty"] > 0).map_values(lambda o: {**o, "seen": True})
    orders.to("seen")
    orders.group_by(lambda k, o: o["country"], name="by_country").count(name="per_country").to_stream().to("counts")
    return app


def test_outputs_carry_a_child_of_their_inputs_trace_straight_through_a_repartition_and_through_state():
    driver = TopologyTestDriver(traced_app())
    driver.pipe("orders", "o1", {"qty": 1, "country": "no"}, timestamp=BASE, headers=[("traceparent", PARENT)])
    driver.pipe("orders", "o2", {"qty": 2, "country": "no"}, timestamp=BASE + 1)  # not traced
    (seen, untraced) = driver.read("seen")
    trace, span, flags = parse_traceparent(seen.headers["traceparent"])
    assert (trace, flags) == (TRACE, "01") and span != "00f067aa0ba902b7"
    assert "traceparent" not in untraced.headers
    first, second = driver.read("counts")  # through the repartition topic and the count's store
    assert parse_traceparent(first.headers["traceparent"])[0] == TRACE and first.value == 1
    assert parse_traceparent(first.headers["traceparent"])[1] not in (span, "00f067aa0ba902b7")
    assert "traceparent" not in second.headers  # the update o2 caused has o2's context: none


def test_span_ids_are_the_same_when_a_batch_is_retried_and_bad_contexts_pass_unchanged():
    assert child_traceparent(PARENT, b"a") == child_traceparent(PARENT, b"a") != child_traceparent(PARENT, b"b")
    for bad in (b"garbage", b"01-" + TRACE.encode() + b"-00f067aa0ba902b7-01",
                b"00-" + b"0" * 32 + b"-00f067aa0ba902b7-01"):
        assert parse_traceparent(bad) is None and child_traceparent(bad, b"a") == bad
    inputs = [("orders", f"o{i}", {"qty": i % 3, "country": "no" if i % 2 else "se"}, BASE + i) for i in range(30)]
    runs = []
    for crash in (None, "after_produce", "before_commit"):
        driver = TopologyTestDriver(traced_app())
        for n, (topic, key, value, ts) in enumerate(inputs):
            if crash and n % 7 == 3:
                driver.crash_at(crash)  # the batch dies after writing (or before committing) and is retried
            driver.pipe(topic, key, value, timestamp=ts, headers=[("traceparent", PARENT)])
        assert not crash or driver.crashes
        runs.append([(r.key, r.headers["traceparent"]) for t in ("seen", "counts") for r in driver.read(t)])
    assert runs[0] == runs[1] == runs[2] and len({h for _, h in runs[0]}) == len(runs[0])


def test_with_tracing_on_each_task_batch_is_a_span_linked_to_its_inputs_traces():
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the process's provider (set once: OpenTelemetry refuses a second)
    if trace.get_tracer_provider() is not provider:
        trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exporter))  # type: ignore[attr-defined]
    app = Application("spans", bootstrap_servers="unused:9092", tracing=True)
    app.stream("orders").map_values(lambda o: o, name="copy").to("out")
    driver = TopologyTestDriver(app)
    other = b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"
    driver.pipe_records([("orders", "a", {}, BASE), ("orders", "b", {}, BASE + 1)])
    driver.pipe("orders", "c", {}, timestamp=BASE + 2, headers=[("traceparent", PARENT)])
    driver.pipe("orders", "d", {}, timestamp=BASE + 3, headers=[("traceparent", other)])
    spans = [s for s in exporter.get_finished_spans() if s.name == "eos.batch"]
    assert spans and all(s.attributes["eos.task"] == "copy-0" and s.attributes["messaging.system"] == "kafka"
                         for s in spans)
    linked = {format(link.context.trace_id, "032x") for s in spans for link in s.links}
    assert linked == {TRACE, "1" * 32}
    assert sum(s.attributes.get("eos.records_in", 0) for s in spans) == 4


def test_tracing_without_opentelemetry_is_refused_with_what_to_install(monkeypatch):
    import builtins

    import pytest

    from eos.errors import ConfigError

    real_import = builtins.__import__

    def no_otel(name, *args, **kwargs):
        if name.startswith("opentelemetry"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    with pytest.raises(ConfigError, match=r"eos-spark-kafka\[tracing\]"):
        Application("spans", bootstrap_servers="unused:9092", tracing=True)
