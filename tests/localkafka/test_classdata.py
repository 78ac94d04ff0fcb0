"""Which class-data options a local broker and the storage tool get (localkafka.classdata): the archive only
when it is whole and fits this Java and these jars, and never over the user's own class-data options."""

from __future__ import annotations

import json
import os

import pytest

from localkafka.classdata import archive_options, archive_path
from localkafka.cluster import JVM_OPTIONS_ENV, LocalCluster
from localkafka.jars import KafkaJars


@pytest.fixture
def kit(tmp_path, monkeypatch):
    """Jars and a `java` of their own, and a cache where an archive for them may be."""
    monkeypatch.setenv("EOS_KAFKA_CACHE", str(tmp_path / "cache"))
    libs = tmp_path / "libs"
    libs.mkdir()
    for name in ("kafka_2.13-4.3.1.jar", "kafka-clients-4.3.1.jar"):
        (libs / name).write_bytes(b"jar " + name.encode())
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    return KafkaJars("4.3.1", libs), str(java)


def make_archive(jars: KafkaJars, java: str, size: int = 4096, recorded: int | None = None):
    path = archive_path(jars, java)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    path.with_suffix(".json").write_text(json.dumps({"size": size if recorded is None else recorded}))
    return path


def test_no_archive_no_options_and_a_whole_one_is_mapped_with_its_checks(kit):
    jars, java = kit
    assert archive_options(jars, java) == []
    path = make_archive(jars, java)
    assert archive_options(jars, java) == [f"-XX:SharedArchiveFile={path}", "-XX:+VerifySharedSpaces",
                                           "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def test_an_archive_cut_short_or_without_its_record_is_not_mapped(kit):
    jars, java = kit
    path = make_archive(jars, java, size=4096, recorded=8192)  # (the JVM dies of SIGBUS mapping past the end)
    assert archive_options(jars, java) == []
    path.with_suffix(".json").write_text("not json")
    assert archive_options(jars, java) == []
    path.with_suffix(".json").unlink()
    assert archive_options(jars, java) == []


@pytest.mark.parametrize("own", ["-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/x.jsa"])
def test_the_users_own_class_data_options_leave_the_archive_out(kit, own):
    jars, java = kit
    make_archive(jars, java)
    assert archive_options(jars, java, f"-XX:TieredStopAtLevel=1 {own}") == []
    assert archive_options(jars, java, "-XX:TieredStopAtLevel=1") != []


def test_another_jar_or_java_finds_no_archive(kit):
    jars, java = kit
    path = archive_path(jars, java)
    assert archive_path(jars, java) == path and path.name.startswith("broker-") and "4.3.1" in path.parts
    (jars.libs / "kafka-clients-4.3.1.jar").write_bytes(b"another build")
    assert archive_path(jars, java) != path
    changed = archive_path(jars, java)
    os.utime(java, ns=(1, 1))
    assert archive_path(jars, java) not in (path, changed)


def test_brokers_and_the_storage_tool_map_the_archive_and_the_archiving_broker_writes_one(kit, tmp_path, monkeypatch):
    jars, java = kit
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")
    path = make_archive(jars, java)
    cluster = LocalCluster(tmp_path / "cluster")
    cluster._jars, cluster._java_bin = jars, java
    for command in (cluster._java("kafka.tools.StorageTool"), cluster._java("kafka.Kafka", archive=True)):
        assert command[0] == java and f"-XX:SharedArchiveFile={path}" in command
        assert command.index(f"-XX:SharedArchiveFile={path}") < command.index(command[-1])

    target = tmp_path / "new.jsa"
    archiving = LocalCluster(tmp_path / "archiving", archive_to=target)
    archiving._jars, archiving._java_bin = jars, java
    broker = archiving._java("kafka.Kafka", archive=True)
    assert f"-XX:ArchiveClassesAtExit={target}" in broker and "-XX:+VerifySharedSpaces" in broker
    assert not any("SharedArchiveFile" in option for option in broker)
    assert not any("Archive" in option for option in archiving._java("kafka.tools.StorageTool"))

