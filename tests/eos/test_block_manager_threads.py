"""`spark.eos.blockManagerThreads`: read before any JVM starts, a bad value refused with what to change. (That the
driver's pools are bounded in a real JVM is in integration_tests/engine/test_driver_threads.py.)"""

from __future__ import annotations

import pytest

from eos.driver import spark
from eos.errors import ConfigError


def test_the_default_is_two_threads_and_zero_leaves_sparks_pools():
    assert spark.block_manager_threads({}) == 2
    assert spark.block_manager_threads({"spark.eos.blockManagerThreads": "0"}) == 0
    assert spark.block_manager_threads({"spark.eos.blockManagerThreads": " 4 "}) == 4


@pytest.mark.parametrize("value", ["two", "-1", "1.5", ""])
def test_a_job_context_with_a_bad_value_fails_before_its_jvm_starts(value, monkeypatch):
    monkeypatch.setattr(spark, "_launches_jvm", lambda: False)  # (no JVM options to compute either)
    with pytest.raises(ConfigError, match=r"spark.eos.blockManagerThreads must be a whole number"):
        spark._context_settings("local[2]", "orders", {"spark.eos.blockManagerThreads": value}, for_job=True,
                                defaults={})
    # contexts that are not a job's (the auditor's scans, the user's own) do not read it
    spark._context_settings("local[2]", "orders", {"spark.eos.blockManagerThreads": value}, for_job=False,
                            defaults={})
