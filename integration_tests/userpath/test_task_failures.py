"""Errors raised inside Spark tasks that running again cannot fix reach the user at once, as one clear line
with the root cause, instead of Spark retrying them and the driver re-planning them for minutes."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from eos import Application, ConfigError, Processor, TaskFailedError
from eos.driver.runner import Runner
from integration_tests.helpers import produce


class FailsInInit(Processor):
    def init(self, context):
        super().init(context)
        raise RuntimeError("the lookup table is missing")

    def process(self, record):
        self.context.forward(record.key, record.value)


def one_record_topics(kafka, topic_factory):
    src, dst = topic_factory("in", partitions=2), topic_factory("out", partitions=2)
    produce(kafka.bootstrap_servers, src, [(b"k", b"v"), (b"j", b"w")])
    return src, dst


def stops_at_once(kafka, spark, topic_factory, unique_name, processor, name) -> TaskFailedError:
    """Run a one-step job of `processor` that must fail: the error it stops with, within 45 s."""
    src, dst = one_record_topics(kafka, topic_factory)
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR")
    app.stream(src, key_serde="bytes", value_serde="bytes").process(processor, name=name).to(dst)
    started = time.monotonic()
    with pytest.raises(TaskFailedError) as err:
        app.run(spark, until_caught_up=True)
    assert time.monotonic() - started < 45  # one attempt, not 4 Spark attempts x 5 batch attempts x re-plans
    return err.value


def test_a_processor_that_fails_in_init_stops_the_job_at_once_with_the_root_cause(kafka, spark, topic_factory,
                                                                                   unique_name):
    err = stops_at_once(kafka, spark, topic_factory, unique_name, FailsInInit, "fails")
    text = str(err)
    assert "task fails-" in text and "failed while being created or in init()" in text
    assert "RuntimeError: the lookup table is missing" in text and "collectAndServe" not in text
    assert err.cause_type == "RuntimeError" and "raise RuntimeError" in err.detail


class FailsInPunctuation(Processor):
    def init(self, context):
        super().init(context)
        context.schedule(1, self.tick, type="stream")

    def process(self, record):
        self.context.forward(record.key, record.value)

    def tick(self, now):
        raise KeyError("threshold")


def test_a_punctuation_that_raises_stops_the_job_at_once_naming_task_and_punctuation(kafka, spark, topic_factory,
                                                                                     unique_name):
    """It was retried like a transient failure (~80 s) though a retried batch runs the same punctuation at
    the same stream time; the framework's own window closing is a punctuation too."""
    err = stops_at_once(kafka, spark, topic_factory, unique_name, FailsInPunctuation, "ticks")
    text = str(err)
    assert "task ticks-" in text and "the punctuation FailsInPunctuation.tick" in text and "KeyError" in text
    assert err.cause_type == "KeyError"


class AsksForAStoreNotItsOwn(Processor):
    def process(self, record):
        self.context.forward(record.key, self.context.store("totals").get(record.key))


def test_a_processor_asking_for_a_store_it_is_not_connected_to_stops_the_job_at_once(kafka, spark, topic_factory,
                                                                                     unique_name):
    """Every record would fail alike: no dead letters, one line naming the store and how to connect it."""
    err = stops_at_once(kafka, spark, topic_factory, unique_name, AsksForAStoreNotItsOwn, "asks")
    text = str(err)
    assert "task asks-" in text and "processor 'asks' is not connected to a store 'totals'" in text
    assert "connect_processor_and_state_stores" in text and err.cause_type == "TopologyError"


def test_a_job_module_the_executors_cannot_import_is_reported_as_such(kafka, spark, topic_factory, unique_name,
                                                                       tmp_path):
    src, dst = one_record_topics(kafka, topic_factory)
    module = f"only_on_the_driver_{unique_name('m').replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent("""
        from eos import Processor

        class Copy(Processor):
            def process(self, record):
                self.context.forward(record.key, record.value)
    """))
    sys.path.insert(0, str(tmp_path))  # the driver can import it; Spark's Python workers cannot
    try:
        copy = __import__(module).Copy
        app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR")
        app.stream(src, key_serde="bytes", value_serde="bytes").process(copy, name="copy").to(dst)
        started = time.monotonic()
        with pytest.raises(TaskFailedError) as err:
            app.run(spark, until_caught_up=True)
        assert time.monotonic() - started < 45
        assert "the job definition cannot be loaded on this executor" in str(err.value)
        assert f"No module named '{module}'" in str(err.value)
    finally:
        sys.path.remove(str(tmp_path))


def test_a_state_directory_an_executor_cannot_write_is_a_configuration_error(kafka, spark, topic_factory,
                                                                             unique_name, tmp_path):
    src, dst = one_record_topics(kafka, topic_factory)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    app = Application(unique_name("app"), kafka.bootstrap_servers, log_level="ERROR",
                      state_dir=str(blocker / "{executor}"))
    app.count(src, dst, name="counts")
    with pytest.raises(ConfigError, match=r"state_dir .* cannot be used: .* is not a directory"):
        app.run(spark, until_caught_up=True)  # checked on the driver before Spark runs anything
    started = time.monotonic()
    with pytest.raises(ConfigError) as err:  # and in the task, where an executor finds it on its own disk
        Runner(app, spark).run(until_caught_up=True)
    assert time.monotonic() - started < 45
    assert "cannot use the state directory" in str(err.value) and "Not a directory" in str(err.value)
    assert "Set state_dir to a local directory every executor can write" in str(err.value)
