"""A local cluster formatted with chosen feature levels (`LocalCluster(features=...)`, the peers benchmark's
`--broker-feature`): what is accepted, what the format command gets, what a reopened cluster keeps, and the
clear errors for what cannot be done."""

from __future__ import annotations

import subprocess
import tempfile

import pytest

from localkafka import cluster as module
from localkafka.cluster import ClusterError, LocalCluster, check_features, format_features, parse_feature
from localkafka.config import NodeSpec
from localkafka.provision import ENV_BOOTSTRAP, provide_kafka


@pytest.mark.parametrize(("text", "pair"), [
    ("transaction.version=1", ("transaction.version", 1)),
    ("group.version=0", ("group.version", 0)),
    (" transaction.version = 2 ", ("transaction.version", 2)),
])
def test_a_feature_is_a_dotted_name_and_a_level(text, pair):
    assert parse_feature(text) == pair


@pytest.mark.parametrize("text", ["transaction.version", "transaction.version=", "transaction.version=one",
                                  "transaction.version=-1", "=1", "version=1", "Transaction.Version=1",
                                  "transaction.version=1.5"])
def test_what_is_not_a_feature_says_what_one_looks_like(text):
    with pytest.raises(ClusterError, match=r"transaction\.version=1"):
        parse_feature(text)


@pytest.mark.parametrize("level", [-1, True, "1", 1.0])
def test_a_level_is_a_whole_number_from_zero(level):
    with pytest.raises(ClusterError, match="a name and a level from 0 up"):
        check_features({"transaction.version": level})


def test_features_print_as_they_are_given():
    assert format_features({"transaction.version": 1, "group.version": 0}) == "transaction.version=1, group.version=0"
    assert format_features({}) == "the release's defaults"
    assert parse_feature(format_features({"transaction.version": 1})) == ("transaction.version", 1)


def test_the_storage_is_formatted_with_each_feature(tmp_path, monkeypatch):
    commands: list[list[str]] = []
    cluster = LocalCluster(tmp_path / "cluster", features={"transaction.version": 1, "group.version": 0})
    monkeypatch.setattr(cluster, "_java", lambda *args, **kw: ["java", *args])
    monkeypatch.setattr(module.subprocess, "run",
                        lambda cmd, **kw: commands.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))
    cluster._format(NodeSpec(1, 9001, 9101, 9201))
    (cmd,) = commands
    assert cmd[:3] == ["java", "kafka.tools.StorageTool", "format"]
    assert cmd[-2:] == ["--feature=transaction.version=1", "--feature=group.version=0"]


def test_without_features_the_format_keeps_the_release_defaults(tmp_path, monkeypatch):
    commands: list[list[str]] = []
    cluster = LocalCluster(tmp_path / "cluster")
    monkeypatch.setattr(cluster, "_java", lambda *args, **kw: ["java", *args])
    monkeypatch.setattr(module.subprocess, "run",
                        lambda cmd, **kw: commands.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))
    cluster._format(NodeSpec(1, 9001, 9101, 9201))
    assert not [arg for arg in commands[0] if arg.startswith("--feature")]


def test_a_reopened_cluster_keeps_its_features(tmp_path):
    LocalCluster(tmp_path / "cluster", features={"transaction.version": 1})._save()
    assert LocalCluster.open(tmp_path / "cluster").features == {"transaction.version": 1}


def test_features_cannot_be_set_on_a_cluster_named_by_the_environment(monkeypatch):
    monkeypatch.setenv(ENV_BOOTSTRAP, "127.0.0.1:9")
    with pytest.raises(ClusterError, match=f"unset {ENV_BOOTSTRAP}"):
        with provide_kafka(features={"transaction.version": 1}):
            pass


def test_a_level_the_release_does_not_have_fails_the_format_with_the_tools_reason(tmp_path, monkeypatch):
    cluster = LocalCluster(tmp_path / "cluster", features={"transaction.version": 9})
    monkeypatch.setattr(cluster, "_java", lambda *args, **kw: ["java", *args])
    log = ("[2026-11-30 19:46:59,887] INFO KafkaConfig values:\n\tunstable.feature.versions.enable = false\n"
           'Exception in thread "main" java.lang.IllegalArgumentException: No feature:transaction.version with '
           "feature level 9\n\tat org.apache.kafka.server.common.Feature.fromFeatureLevel(Feature.java:148)\n")
    monkeypatch.setattr(module.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, log, ""))
    with pytest.raises(ClusterError, match=r"^formatting storage of node 1 failed: No feature:transaction\.version "
                                           r"with feature level 9:\n"):
        cluster._format(NodeSpec(1, 9001, 9101, 9201))


def test_malformed_features_leave_no_cluster_directory_behind(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_BOOTSTRAP, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # (read again from TMPDIR)
    with pytest.raises(ClusterError, match=r"such as transaction\.version=1"):
        with provide_kafka(features={"transaction.version": -1}):
            pass
    assert list(tmp_path.iterdir()) == []
