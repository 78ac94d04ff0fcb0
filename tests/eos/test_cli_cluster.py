"""`eos cluster`: a failure's text is printed as it is, brackets included (a broker's log lines such as
"[/tmp/kafka-logs]" once crashed the error printer and hid the failure). `eos kafka archive` makes none for
brokers that would not map it."""

from __future__ import annotations

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
