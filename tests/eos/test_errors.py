"""Errors: what a task reports travels to the driver as the same kind of error; one-line root causes."""

from __future__ import annotations

import pytest

from eos.driver.runner import root_cause
from eos.errors import (
    BadRecordError,
    ConfigError,
    FailureKind,
    JobFailedError,
    TaskFailedError,
    TaskFailure,
    stops_the_job,
)


def test_task_failures_become_errors_that_stop_the_job():
    for kind, cls in ((FailureKind.CONFIG, ConfigError), (FailureKind.BAD_RECORD, BadRecordError),
                      (FailureKind.USER_CODE, TaskFailedError), (FailureKind.JOB_LOAD, TaskFailedError)):
        exc = TaskFailure(kind, "enrich-1", "KeyError", "boom", "Traceback ...").to_exception()
        assert isinstance(exc, cls) and stops_the_job(exc) and "task enrich-1: boom" in str(exc)
    assert stops_the_job(JobFailedError("x")) and not stops_the_job(RuntimeError("executor lost"))


def test_root_cause_of_a_spark_error_is_the_python_exception_line():
    text = ("An error occurred while calling o123.collectAndServe.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 3.0 failed 4 "
            "times\norg.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
            '  File "/x/eos/worker/entry.py", line 70, in run_task\n'
            "eos.errors.BatchFailedError: task enrich-1 batch 4 failed after 5 attempts: timed out\n"
            "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n"
            "Driver stacktrace:\n")
    assert root_cause(RuntimeError(text)) == (
        "eos.errors.BatchFailedError: task enrich-1 batch 4 failed after 5 attempts: timed out")
    assert root_cause(RuntimeError("plain message")) == "plain message"


def test_a_job_target_without_the_application_names_the_ones_its_file_defines(tmp_path):
    from eos.cli.loader import load_application

    job = tmp_path / "orders_job.py"
    job.write_text('from eos import Application\norders = Application("o", bootstrap_servers="unused:9092")\n'
                   'limit = 3\n')
    with pytest.raises(ValueError, match=r"orders_job.py defines no 'app'; its Applications: orders \(give "
                                         r".*orders_job.py:orders\)"):
        load_application(str(job))
    with pytest.raises(ValueError, match=r"'limit' is not an eos.Application \(got int\)"):
        load_application(f"{job}:limit")
    assert load_application(f"{job}:orders").config.application_id == "o"
    empty = tmp_path / "empty_job.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ValueError, match=r"defines no eos.Application at its top level \(app = Application"):
        load_application(str(empty))


def test_a_job_file_that_raises_while_loaded_is_one_line_naming_its_line(tmp_path):
    from eos.cli.loader import load_application

    job = tmp_path / "bad_job.py"
    job.write_text('from eos import Application\napp = Application("o", bootstrap_servers="unused:9092")\n'
                   'app.stream("orders").filter("total > 10").to("big-orders")\n')
    with pytest.raises(ValueError, match=r"bad_job.py, line 3: TypeError: filter: predicate must be a function"):
        load_application(str(job))
    job.write_text('from eos import Application\napp = Application("o", bath_timeout=3)\n')
    with pytest.raises(ValueError, match=r"bad_job.py, line 2: ConfigError: unknown setting 'bath_timeout'. Did you "
                                         r"mean 'batch_timeout'\?"):
        load_application(str(job))


def test_a_job_files_function_naming_a_kafka_client_class_ships_to_the_workers(tmp_path):
    """confluent_kafka's classes name their module "cimpl", which no import found: cloudpickle copied them by
    value into a job file's functions, and the copy failed to load on every executor (the job stopped with
    "the job definition cannot be loaded"). They now go by reference, as any importable class."""
    from pyspark import cloudpickle

    from eos.cli.loader import load_application

    job = tmp_path / "producing_job.py"
    job.write_text("from confluent_kafka import Producer, TopicPartition\nfrom eos import Application\n"
                   "app = Application('p', bootstrap_servers='unused:9092')\n"
                   "def hook(point):\n    return Producer, TopicPartition('t', 0)\n"
                   "app.fault_hooks.on('before_commit', hook)\n")
    app = load_application(str(job))
    (hook,) = [h for hooks in app.fault_hooks.hooks.values() for h in hooks]
    from confluent_kafka import Producer, TopicPartition

    shipped = cloudpickle.loads(cloudpickle.dumps(hook))
    producer, tp = shipped(None)
    assert producer is Producer and isinstance(tp, TopicPartition)
