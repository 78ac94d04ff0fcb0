"""`eos spark archive` makes a class-data archive that the driver JVMs the framework starts really map: the
JVM's class-loading log names the archive ("shared objects file (top)") as the source of Spark's classes.
A job's driver JVM (`ContextStart`, as `Application.run` and `eos run` start it) maps it too, with the JIT's
quick tier only and the serial collector; other contexts, and a job given `spark.eos.quickJit=false` and
`spark.eos.serialGc=false`, keep the JVM's JIT and collector."""

from __future__ import annotations

import os
import subprocess
import sys

from eos.driver.classdata import archive_path, classpath

DRIVER = """
import sys
from eos.driver.spark import ContextStart, build_spark_context
conf = {"spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={sys.argv[1]}",
        "spark.eos.classDataArchive": sys.argv[2], **dict(kv.split("=", 1) for kv in sys.argv[4:])}
job = sys.argv[3] == "job"
sc = ContextStart("local[1]", conf=conf).context() if job else build_spark_context("local[1]", conf=conf)
assert sc.parallelize([1, 2, 3], 1).map(lambda x: x * 2).collect() == [2, 4, 6]
print(" ".join(sc._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))
sc.stop()
"""


def _driver(tmp_path, env, archive: str, kind: str = "context", *conf: str) -> tuple[list[str], str]:
    """The driver JVM's class-loading log and its JVM arguments."""
    log = tmp_path / "classes.log"
    done = subprocess.run([sys.executable, "-c", DRIVER, str(log), archive, kind, *conf], env=env, check=True,
                          timeout=240, capture_output=True, text=True)
    return log.read_text().splitlines(), done.stdout


def test_the_cli_makes_an_archive_the_next_driver_maps(tmp_path, monkeypatch):
    # Spark's own configuration directory, as `make setup` has it. The cache is the suite's, the user's own
    # (integration_tests/conftest.py): the archive `make setup` made, checked here, rather than a second one
    # made for the test (~25 s of the suite on two cores); where set-up made none, the first command makes it.
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    env = dict(os.environ)
    made = subprocess.run([sys.executable, "-m", "eos.cli", "spark", "archive", "--strict"], env=env, text=True,
                          capture_output=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    path = archive_path(classpath())
    assert path is not None and path.is_file() and str(path) in made.stdout.replace("\n", "")
    written = path.stat().st_mtime_ns
    again = subprocess.run([sys.executable, "-m", "eos.cli", "spark", "archive"], env=env, text=True,
                           capture_output=True, timeout=60)
    assert again.returncode == 0 and path.stat().st_mtime_ns == written  # made once

    mapped, arguments = _driver(tmp_path, env, "true")
    from_archive = [line for line in mapped if "shared objects file (top)" in line]
    assert len(from_archive) > 1000, f"{len(from_archive)} of {len(mapped)} classes came from the archive"
    # "(top)": the dynamic archive on top of the JDK's own; without one no class can come from there
    assert any("org.apache.spark.SparkContext " in line for line in from_archive)
    assert "TieredStopAtLevel" not in arguments and "GC" not in arguments  # not a job's: the JVM's own JIT and GC

    mapped, arguments = _driver(tmp_path, env, "true", "job")
    from_archive = [line for line in mapped if "shared objects file (top)" in line]
    assert len(from_archive) > 1000, f"a job's driver: {len(from_archive)} of {len(mapped)} from the archive"
    assert {"-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1"} <= set(arguments.split())
    assert {"-XX:+UseSerialGC", "-Xms16m", "-Xmn6m"} <= set(arguments.split())  # (and the archive maps under it, above)

    _, arguments = _driver(tmp_path, env, "true", "job", "spark.eos.quickJit=false", "spark.eos.serialGc=false")
    assert not any(option in arguments for option in ("TieredStopAtLevel", "CICompilerCount", "GC", "-Xms", "-Xmn"))
