"""Which master a job runs on when none is given: spark-submit's, then spark-defaults.conf, then local."""

from __future__ import annotations

import pytest

from eos.driver.spark import DEFAULT_MASTER, is_local_master, resolve_master
from eos.errors import ConfigError


def test_an_explicit_master_wins_then_spark_defaults_then_the_local_default(tmp_path, monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert resolve_master() == DEFAULT_MASTER
    (tmp_path / "spark-defaults.conf").write_text("# cluster\nspark.executor.memory  2g\nspark.master   spark://m:7077\n")
    assert resolve_master() == "spark://m:7077"
    assert resolve_master("local[4]") == "local[4]"


def test_local_masters_are_the_ones_on_this_machine():
    assert all(map(is_local_master, ["local", "local[2]", "local[2,4]", "local-cluster[2,1,1024]"]))
    assert not any(map(is_local_master, ["spark://h:7077", "yarn", "k8s://https://h:6443", "localhost"]))


def test_a_jobs_driver_jvm_gets_the_quick_jit_unless_the_user_chose_jit_options_or_turned_it_off(monkeypatch):
    from eos.driver.spark import QUICK_JIT_KEY, _quick_jit

    class Conf(dict):
        def get(self, key, default=None):  # SparkConf.get's signature
            return super().get(key, default)

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert _quick_jit(Conf())
    assert _quick_jit(Conf({"spark.driver.extraJavaOptions": "-Xmx2g"}))
    assert not _quick_jit(Conf({QUICK_JIT_KEY: "false"}))
    assert not _quick_jit(Conf({QUICK_JIT_KEY: "FALSE"}))
    assert not _quick_jit(Conf({"spark.driver.extraJavaOptions": "-XX:-TieredCompilation"}))
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=4 pyspark-shell")
    assert not _quick_jit(Conf())


@pytest.mark.parametrize("master", ["local", "local[1]", "local[*]", "local[2,4]", "local[*, 3]",
                                    "local-cluster[2,1,1024]", "spark://10.0.0.1:7077", "yarn",
                                    "k8s://https://k8s.example:6443"])
def test_the_masters_spark_accepts_pass_the_check(master):
    assert resolve_master(master) == master


@pytest.mark.parametrize("master", ["probe", "local[two]", "locl[2]", "local-cluster[2,1]", "spark://",
                                    "10.0.0.1:7077"])
def test_a_master_spark_would_refuse_fails_before_a_jvm_starts_and_lists_the_forms(master):
    with pytest.raises(ConfigError, match=r"is not one Spark accepts: use local\[N\]"):
        resolve_master(master)
