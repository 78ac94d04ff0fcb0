"""Errors: what a task reports travels to the driver as the same kind of error; one-line root causes."""

from __future__ import annotations

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
