"""`eos cluster`: a failure's text is printed as it is, brackets included (a broker's log lines such as
"[/tmp/kafka-logs]" once crashed the error printer and hid the failure)."""

from __future__ import annotations

from typer.testing import CliRunner

from eos.cli import cluster as cli
from localkafka import ClusterError


def test_a_cluster_failure_with_brackets_in_its_text_is_printed_not_crashed_on(monkeypatch, tmp_path):
    def fail(self, timeout):
        raise ClusterError("broker 2 did not start: ERROR [LogDirFailureChannel] in dir [/tmp/kafka-logs]")

    monkeypatch.setattr(cli.LocalCluster, "up", fail)
    result = CliRunner().invoke(cli.cluster_app, ["up", "--dir", str(tmp_path / "c")])
    assert result.exit_code == 1, result.output
    assert "in dir [/tmp/kafka-logs]" in result.output
