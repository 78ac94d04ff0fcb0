"""check_broker against a fake admin: which broker states are configuration errors and which are outages."""

from __future__ import annotations

import os
import time
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


def _counting_app(bootstrap: str = "127.0.0.1:1"):
    from eos import Application

    app = Application("internal", bootstrap, state_dir="/tmp/unused")
    app.count("orders", "counts", name="counts")
    return app


def _changelog(app) -> str:
    (store,) = [spec for sub in app.subtopologies.values() for spec in sub.stores]
    return store.changelog_topic(app.config.application_id)


def test_internal_topics_are_created_on_a_thread_of_their_own_and_waited_for_once():
    import threading

    from eos.driver.checks import create_internal_topics_soon
    from transactions.memory import MemoryAdmin, MemoryCluster

    cluster = MemoryCluster()
    cluster.create_topic("orders", 6)
    app = _counting_app()
    threads: list[str] = []
    closed: list[bool] = []
    release = threading.Event()

    class ClosingAdmin(MemoryAdmin):
        def close(self) -> None:
            closed.append(True)

    def new_admin():
        threads.append(threading.current_thread().name)
        release.wait(5)  # the broker is slow: the caller goes on meanwhile
        return ClosingAdmin(cluster)

    topics = create_internal_topics_soon(app.config, app.subtopologies, {"orders": 6}, new_admin)
    assert app.config.dlq_topic not in cluster.logs  # (not yet: the thread waits for its admin)
    release.set()
    assert topics.result(10) == 6 == cluster.partitions(app.config.dlq_topic)
    assert cluster.partitions(_changelog(app)) == 6
    assert threads == ["eos-internal-topics"]
    assert topics.result(10) == 6  # (asked again: the same answer, no second creation)
    deadline = time.monotonic() + 5
    while not closed and time.monotonic() < deadline:  # (closed just after the result is set)
        time.sleep(0.01)
    assert closed == [True]  # its own admin client is not left open for the run's life


def test_what_creating_the_internal_topics_raised_is_raised_when_they_are_waited_for():
    from eos.driver.checks import create_internal_topics_soon
    from transactions.memory import MemoryAdmin, MemoryCluster

    cluster = MemoryCluster()
    cluster.create_topic("orders", 2)
    app = _counting_app()
    cluster.create_topic(_changelog(app), 3, {"cleanup.policy": "compact"})
    topics = create_internal_topics_soon(app.config, app.subtopologies, {"orders": 2}, lambda: MemoryAdmin(cluster))
    with pytest.raises(ConfigError, match="has 3 partitions but its sub-topology has 2 tasks"):
        topics.result(10)
