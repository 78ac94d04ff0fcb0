"""check_broker against a fake admin: which broker states are configuration errors and which are outages."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from eos.config import ConfigError, EosConfig
from eos.driver.checks import TRANSACTION_LOG, check_broker


class FakeAdmin:
    bootstrap_servers = "127.0.0.1:1"

    def __init__(self, live: int, rf: int = 3, min_isr: int = 2, log_exists: bool = True) -> None:
        self.live, self.log_exists = live, log_exists
        self.config = {"transaction.state.log.replication.factor": str(rf),
                       "transaction.state.log.min.isr": str(min_isr), "transaction.max.timeout.ms": "900000"}

    def broker_config(self) -> dict[str, str]:
        return self.config

    def live_brokers(self) -> int:
        return self.live

    def partition_counts(self, topics):
        return {t: (50 if self.log_exists and t == TRANSACTION_LOG else None) for t in topics}


def config() -> EosConfig:
    return EosConfig(application_id="checks", bootstrap_servers="127.0.0.1:1")


def test_a_single_broker_with_replicated_transaction_log_settings_fails_fast():
    with pytest.raises(ConfigError, match=r"1 live broker\(s\).*replication.factor=3.*Set both"):
        check_broker(FakeAdmin(live=1, log_exists=False), config())


@pytest.mark.parametrize("live", [1, 2, 3])
def test_a_broker_down_once_the_transaction_log_exists_is_an_outage_not_a_config_error(live):
    check_broker(FakeAdmin(live=live, log_exists=True), config())  # a restarted job starts and waits it out


def test_min_isr_above_the_replication_factor_fails_fast():
    with pytest.raises(ConfigError, match=r"min\.isr=3 above"):
        check_broker(FakeAdmin(live=3, rf=2, min_isr=3), config())


def test_a_transaction_timeout_above_the_brokers_maximum_fails_fast():
    cfg = EosConfig(application_id="checks", bootstrap_servers="127.0.0.1:1", transaction_timeout_ms=1_000_000)
    with pytest.raises(ConfigError, match=r"transaction\.max\.timeout\.ms=900000"):
        check_broker(FakeAdmin(live=3), cfg)


def test_a_state_directory_that_cannot_be_written_fails_before_spark_starts(tmp_path):
    from eos.driver.checks import check_state_dir

    check_state_dir(str(tmp_path / "new" / "{executor}"))  # created on first use: fine
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        check_state_dir(str(blocker / "state"))



def test_a_state_directory_without_write_permission_fails_before_spark_starts(tmp_path):
    from eos.driver.checks import check_state_dir

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):
        pytest.skip("running as root, which may write anywhere: the check cannot fail here")
    with pytest.raises(ConfigError, match="is not writable"):
        check_state_dir(str(locked / "state"))


class LaggingAdmin:
    """A broker that learns of the topic `late` only on the `learns_at`-th metadata request."""
    bootstrap_servers = "127.0.0.1:1"

    def __init__(self, learns_at: int) -> None:
        self.asked, self.learns_at = 0, learns_at

    def partition_counts(self, topics):
        self.asked += 1
        return {t: (None if t == "late" and self.asked < self.learns_at else 2) for t in topics}


def subtopologies():
    """What check_topics reads of a sub-topology: its inputs, outputs and global tables."""
    return {"copy": SimpleNamespace(name="copy", inputs=("in",), output_topics=("late",), global_tables=())}


def test_a_topic_the_broker_learns_of_a_moment_late_is_found_by_asking_again(monkeypatch):
    from eos.driver import checks

    monkeypatch.setattr(checks, "MISSING_TOPIC_GRACE_S", 5.0)
    admin = LaggingAdmin(learns_at=3)
    assert checks.check_topics(admin, subtopologies()) == {"in": 2, "late": 2}
    assert admin.asked == 3


def test_a_topic_still_missing_after_the_grace_is_a_config_error(monkeypatch):
    from eos.driver import checks

    monkeypatch.setattr(checks, "MISSING_TOPIC_GRACE_S", 0.5)
    admin = LaggingAdmin(learns_at=10**6)
    with pytest.raises(ConfigError, match=r"topic\(s\) late do not exist on 127\.0\.0\.1:1\. Create them first"):
        checks.check_topics(admin, subtopologies())
    assert admin.asked >= 2  # asked again before giving up
