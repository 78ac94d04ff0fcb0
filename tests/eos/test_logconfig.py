"""`eos.driver.logconfig`: a driver JVM the framework launches is given Spark's log4j file only where Spark would
have loaded that file itself; anything of the user's that may configure log4j leaves log4j to its own search.
(integration_tests/userpath/test_log_config.py shows the JVM configured as Spark configures it.)"""

from __future__ import annotations

import zipfile

import pytest

from eos.driver.logconfig import launch_log_options

PLAIN = "-Dlog4j2.configurationFile=classpath:org/apache/spark/log4j2-defaults.properties"
JSON = "-Dlog4j2.configurationFile=classpath:org/apache/spark/log4j2-json-layout.properties"


@pytest.fixture(autouse=True)
def _no_submit_args(monkeypatch):
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A Spark home whose common-utils jar holds Spark's two log4j files, and an empty configuration directory."""
    (tmp_path / "jars").mkdir()
    (tmp_path / "conf").mkdir()
    with zipfile.ZipFile(tmp_path / "jars" / "spark-common-utils_2.13-9.9.9.jar", "w") as jar:
        for name in ("org/apache/spark/log4j2-defaults.properties", "org/apache/spark/log4j2-json-layout.properties"):
            jar.writestr(name, "rootLogger.level = info\n")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    return tmp_path


def test_spark_s_file_is_named_where_nothing_of_the_user_s_configures_log4j(home):
    assert launch_log_options({}, {}) == PLAIN
    assert launch_log_options({"spark.log.structuredLogging.enabled": "true"}, {}) == JSON  # Spark's choice too
    assert launch_log_options({"spark.log.structuredLogging.enabled": "false"}, {}) == PLAIN


def test_the_installed_spark_holds_the_file_named():
    assert launch_log_options({}, {}) == PLAIN


@pytest.mark.parametrize("conf, env", [
    ({"spark.eos.logConfigAtLaunch": "false"}, {}),
    ({"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=/etc/mine.xml"}, {}),
    ({"spark.driver.extraJavaOptions": "-Dlog4j.configuration=file:/etc/log4j.properties"}, {}),
    ({"spark.driver.extraClassPath": "/opt/mine.jar"}, {}),
    ({}, {"JAVA_TOOL_OPTIONS": "-Dlog4j2.level=debug"}),
    ({}, {"SPARK_SUBMIT_OPTS": "-Dlog4j2.configurationFile=/etc/mine.xml"}),
    ({}, {"LOG4J_CONFIGURATION_FILE": "/etc/mine.xml"}),
    ({}, {"SPARK_DIST_CLASSPATH": "/opt/hadoop/etc"}),
    ({}, {"PYSPARK_SUBMIT_ARGS": "--conf spark.log.structuredLogging.enabled=true pyspark-shell"}),
], ids=["off", "user-option", "log4j1-option", "user-classpath", "tool-options", "submit-opts", "log4j-env",
        "dist-classpath", "structured-in-submit-args"])
def test_anything_of_the_user_s_that_may_configure_log4j_leaves_it_to_log4j(home, conf, env):
    assert launch_log_options(conf, env) is None


def test_driver_options_in_pyspark_submit_args_count_as_the_user_s(home, monkeypatch):
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -Dlog4j2.configurationFile=/x.xml pyspark-shell")
    assert launch_log_options({}, {}) is None


@pytest.mark.parametrize("variable", ["SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR"])
def test_a_log4j2_file_in_a_directory_on_the_classpath_leaves_it_to_log4j(home, tmp_path, variable):
    directory = tmp_path / "mine"
    directory.mkdir()
    (directory / "log4j.properties").write_text("log4j.rootLogger=INFO\n")  # log4j 1's: log4j 2 never reads it
    assert launch_log_options({}, {variable: str(directory)}) == PLAIN
    (directory / "log4j2.xml").write_text("<Configuration/>\n")
    assert launch_log_options({}, {variable: str(directory)}) is None


def test_spark_home_s_own_conf_directory_counts_unless_spark_conf_dir_names_another(home, tmp_path):
    (home / "conf" / "log4j2.properties").write_text("rootLogger.level = warn\n")
    assert launch_log_options({}, {}) is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert launch_log_options({}, {"SPARK_CONF_DIR": str(elsewhere)}) == PLAIN


def test_a_spark_without_the_file_keeps_log4j_s_search(home):
    (home / "jars" / "spark-common-utils_2.13-9.9.9.jar").unlink()
    with zipfile.ZipFile(home / "jars" / "spark-common-utils_2.13-9.9.8.jar", "w") as jar:
        jar.writestr("org/apache/spark/other.properties", "")
    assert launch_log_options({}, {}) is None
