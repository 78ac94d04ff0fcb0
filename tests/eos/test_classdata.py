"""The driver's class-data archive: which archive fits which Java and classpath, and when none is used.
(That the JVM maps a real archive is shown in integration_tests/userpath/test_class_data.py.)"""

from __future__ import annotations

import json
import os

import pytest

from eos.driver import classdata
from eos.driver.classdata import ArchiveBuildError, archive_path, build_archive, classpath, driver_java_options


class Conf(dict):
    def get(self, key, default=None):  # SparkConf.get's signature
        return super().get(key, default)


@pytest.fixture
def spark(tmp_path, monkeypatch):
    """A Spark home with two jars, a `java`, an empty conf dir and a cache, all under tmp_path."""
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "scala-library.jar"):
        (home / "jars" / name).write_bytes(b"PK" + name.encode())
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    java = java_home / "bin" / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    monkeypatch.setenv("EOS_CLASS_DATA_CACHE", str(tmp_path / "cache"))
    for name in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH", "PYSPARK_SUBMIT_ARGS"):
        monkeypatch.delenv(name, raising=False)
    return home


def _archive(path, size=1000, spark_home=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    home = str(spark_home or os.path.realpath(os.environ["SPARK_HOME"]))
    path.with_suffix(".json").write_text(json.dumps({"size": size, "spark_home": home}))


def test_the_archive_is_named_after_the_java_and_the_jars_so_another_release_finds_none(spark):
    first = classpath()
    assert first.digest and first.java == os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    assert classpath() == first  # stable
    (spark / "jars" / "spark-core.jar").write_bytes(b"PK another release")
    assert classpath().digest != first.digest
    (spark / "jars" / "extra.jar").write_bytes(b"PK")
    assert len({first.digest, classpath().digest}) == 2
    assert archive_path().name == f"spark-driver-{classpath().digest}.jsa"


def test_a_conf_directory_with_files_or_no_java_means_no_archive_and_says_why(spark, tmp_path, monkeypatch):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    assert classpath().digest is not None  # an empty one is fine
    (conf_dir / "spark-defaults.conf").write_text("spark.master local[2]\n")
    cp = classpath()
    assert cp.digest is None and str(conf_dir) in cp.reason and archive_path(cp) is None
    assert driver_java_options(Conf()) is None
    with pytest.raises(ArchiveBuildError, match="not empty"):
        build_archive()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    assert "no java" in classpath().reason


def test_the_options_map_a_complete_archive_and_only_then(spark):
    path = archive_path()
    assert driver_java_options(Conf()) is None  # none made yet
    _archive(path)
    options = driver_java_options(Conf())
    assert options is not None and f"-XX:SharedArchiveFile={path}" in options and "VerifySharedSpaces" in options
    _archive(path)
    path.write_bytes(b"\0" * 500)  # cut short: the JVM would die mapping it (SIGBUS)
    assert driver_java_options(Conf()) is None
    _archive(path)
    path.with_suffix(".json").unlink()
    assert driver_java_options(Conf()) is None


def test_the_user_can_turn_it_off_or_bring_their_own_class_data(spark, monkeypatch):
    _archive(archive_path())
    assert driver_java_options(Conf()) is not None
    assert driver_java_options(Conf({"spark.eos.classDataArchive": "false"})) is None
    assert driver_java_options(Conf({"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/mine.jsa"})) is None
    assert driver_java_options(Conf({"spark.driver.extraJavaOptions": "-Xshare:off"})) is None
    assert driver_java_options(Conf({"spark.driver.extraClassPath": "/opt/lib/*"})) is None
    assert driver_java_options(Conf({"spark.driver.extraJavaOptions": "-Xmx2g"})) is not None
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:ArchiveClassesAtExit=/x.jsa pyspark-shell")
    assert driver_java_options(Conf()) is None


def test_building_is_idempotent_and_removes_archives_that_can_no_longer_fit(spark, tmp_path, monkeypatch):
    old = archive_path().with_name("spark-driver-0123456789abcdef0123.jsa")
    _archive(old)  # an earlier build of this Spark installation
    gone = old.with_name("spark-driver-1111111111aaaaaaaaaa.jsa")
    _archive(gone, spark_home=tmp_path / "removed-venv")  # of an installation that no longer exists
    other_home = tmp_path / "other-venv"
    other_home.mkdir()
    other = old.with_name("spark-driver-2222222222bbbbbbbbbb.jsa")
    _archive(other, spark_home=other_home)  # another installation's (a second virtualenv): still fits it
    runs = []

    def jvm(cmd, **kwargs):  # what `python -m eos.driver.classdata <target>` does: the JVM writes the target
        runs.append(cmd)
        with open(cmd[-1], "wb") as f:
            f.write(b"\1" * 4096)
        return classdata.subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(classdata.subprocess, "run", jvm)
    path = build_archive()
    assert path == archive_path() and path.stat().st_size == 4096 and driver_java_options(Conf()) is not None
    assert not old.exists() and not old.with_suffix(".json").exists() and not gone.exists()
    assert other.exists() and other.with_suffix(".json").exists()
    assert build_archive() == path and len(runs) == 1
    build_archive(force=True)
    assert len(runs) == 2 and [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []


def test_a_build_whose_jvm_writes_nothing_fails_and_leaves_no_archive(spark, monkeypatch):
    failed = classdata.subprocess.CompletedProcess([], 1, "", "Error: non-empty directory")
    monkeypatch.setattr(classdata.subprocess, "run", lambda cmd, **kw: failed)
    with pytest.raises(ArchiveBuildError, match="non-empty directory"):
        build_archive()
    assert not archive_path().exists() and driver_java_options(Conf()) is None
