"""`eos cluster`: a failure's text is printed as it is, brackets included (a broker's log lines such as
"[/tmp/kafka-logs]" once crashed the error printer and hid the failure). `eos kafka archive` makes none for
brokers that would not map it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from eos.cli import cluster as cli
from eos.cli.commands import kafka_app
from localkafka import ClusterError
from localkafka.cluster import JVM_OPTIONS_ENV


def test_a_cluster_failure_with_brackets_in_its_text_is_printed_not_crashed_on(monkeypatch, tmp_path):
    def fail(self, timeout):
        raise ClusterError("broker 2 did not start: ERROR [LogDirFailureChannel] in dir [/tmp/kafka-logs]")

    monkeypatch.setattr(cli.LocalCluster, "up", fail)
    result = CliRunner().invoke(cli.cluster_app, ["up", "--dir", str(tmp_path / "c")])
    assert result.exit_code == 1, result.output
    assert "in dir [/tmp/kafka-logs]" in result.output


def test_no_broker_archive_is_made_for_brokers_that_would_not_map_it(monkeypatch):
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1 -Xshare:off")
    result = CliRunner().invoke(kafka_app, ["archive"])
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "class-data options of its own (-XX:TieredStopAtLevel=1 -Xshare:off)" in said, said
    assert CliRunner().invoke(kafka_app, ["archive", "--strict"]).exit_code == 1


def test_up_formats_a_new_cluster_with_the_features_asked_for(monkeypatch, tmp_path):
    started: list[dict[str, int]] = []
    monkeypatch.setattr(cli.LocalCluster, "up", lambda self, timeout: started.append(self.features) or self)
    result = CliRunner().invoke(cli.cluster_app, ["up", "--dir", str(tmp_path / "c"),
                                                  "--feature", "transaction.version=1"])
    assert result.exit_code == 0, result.output
    assert started == [{"transaction.version": 1}]


def test_up_refuses_a_malformed_feature_and_says_what_one_looks_like(monkeypatch, tmp_path):
    monkeypatch.setattr(cli.LocalCluster, "up", lambda self, timeout: pytest.fail("started"))
    result = CliRunner().invoke(cli.cluster_app, ["up", "--dir", str(tmp_path / "c"), "--feature", "transaction"])
    assert result.exit_code == 1
    assert "NAME=LEVEL, such as transaction.version=1" in " ".join(result.output.split())


def test_up_does_not_restart_a_kept_cluster_with_other_features(monkeypatch, tmp_path):
    cli.LocalCluster(tmp_path / "c", features={"transaction.version": 1})._save()  # stopped with --keep-data
    monkeypatch.setattr(cli.LocalCluster, "up", lambda self, timeout: pytest.fail("started"))
    result = CliRunner().invoke(cli.cluster_app, ["up", "--dir", str(tmp_path / "c"),
                                                  "--feature", "transaction.version=2"])
    said = " ".join(result.output.split())
    assert result.exit_code == 1
    assert "was formatted with transaction.version=1, not transaction.version=2" in said
    assert "`eos cluster down` it (without --keep-data) first" in said
