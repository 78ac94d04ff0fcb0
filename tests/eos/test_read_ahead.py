"""`read_ahead_records`: a job that keeps what its reads fetched past their batches' ends takes it in the next
batches (`TaskResult.records_read_ahead`), commits exactly what the job commits without it, and stays exactly
once when batches are killed at every step (the kept records die with the worker)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from eos import Application
from eos.config import ConfigError
from eos.testing import TopologyTestDriver


def count_app(**settings) -> Application:
    app = Application("ahead", max_records_per_batch=40, **settings)  # (capped batches leave records past their ends)
    app.count("in", "counts", name="counts", key_serde="string", value_serde="string")
    return app


def inputs(n: int, seed: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [("in", f"k{rng.randrange(30)}", f"v{i}") for i in range(n)]


def counts(driver: TopologyTestDriver) -> list[tuple[str, int]]:
    return [(r.key, r.value) for r in driver.records("counts")]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_job_reading_ahead_commits_what_it_commits_without_and_stays_exactly_once_through_crashes(seed):
    records = inputs(600, seed)
    reference = Counter(key for _, key, _ in records)
    runs = {}
    for ahead in (0, 7):
        driver = TopologyTestDriver(count_app(read_ahead_records=ahead), partitions=2)
        driver.pipe_records(records)
        runs[ahead] = driver
        assert dict(counts(driver)) == reference  # (the last count of each key)
    assert sum(r.records_read_ahead for r in runs[0].results) == 0
    assert sum(r.records_read_ahead for r in runs[7].results) > 0  # it took kept records
    assert counts(runs[7]) == counts(runs[0])  # every count, partition by partition, in order
    report = runs[7].check_exactly_once(records, crashes=10, seed=seed, chunk=150)
    assert report.ok and report.crashes


def test_a_negative_read_ahead_fails_fast_and_says_what_to_set():
    with pytest.raises(ConfigError, match="read_ahead_records must be >= 0"):
        count_app(read_ahead_records=-1)
