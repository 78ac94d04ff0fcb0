"""A class-data sharing (CDS) archive of the Spark driver's JVM, so that a driver starts faster.

A driver's JVM loads about 10,000 classes from Spark's jars to start a SparkContext and run its first job:
read from the jars, parsed and verified at every start. Java (13 and later) can write the classes a run
loaded to an archive at its exit (`-XX:ArchiveClassesAtExit`) and map them from there in later runs
(`-XX:SharedArchiveFile`). `eos spark archive` makes one such run (a local context and one Python job)
and keeps the archive in the cache; contexts the framework starts use it when it fits. Measured here:
SparkContext start-up 6.0-6.7 s -> 4.1-4.2 s, the first Python job 3.9 -> 3.6 s (docs/measurements.md).

An archive fits one Java build and one classpath: its name is a digest of the `java` Spark runs, Spark's
jars (names, sizes, times) and the rest of the driver's classpath, so that another Java or Spark release
finds no archive (and starts as before) rather than one the JVM would reject. The JVM cannot archive a
classpath holding a non-empty directory, which a Spark configuration directory with files in it is
(`$SPARK_CONF_DIR`, `$SPARK_HOME/conf`): such set-ups, drivers launched by spark-submit (their JVM runs
before any of this) and drivers given their own class-data options run without an archive. Off with
`spark.eos.classDataArchive=false`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eos.logs import logger

__all__ = ["Classpath", "classpath", "spark_home", "archive_path", "driver_java_options", "build_archive",
           "DISABLE_KEY", "ArchiveBuildError", "user_java_options"]

_TOLD: set[Path] = set()  # archives found missing, and said so

#: Spark setting that turns the archive off (`--spark-conf spark.eos.classDataArchive=false`)
DISABLE_KEY = "spark.eos.classDataArchive"
#: Settings that change the driver's classpath or JVM in ways an archive cannot follow: left to the user
_OWN_SETTINGS = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")
#: Changes when the way archives are made changes, so that older ones are not used
_FORMAT = "1"
#: Map with checksums (a damaged archive is not used; measured: no slower) and without the JVM's notes about
#: archives (one that does not fit is simply not used)
_USE = "-XX:+VerifySharedSpaces -Xlog:cds=off -Xlog:cds+dynamic=off"


class ArchiveBuildError(RuntimeError):
    """The archive could not be made; the message says why and what runs without it."""


@dataclass(frozen=True)
class Classpath:
    """What a driver JVM's archive depends on; `digest` is None when no archive can fit (`reason` says why)."""
    java: str | None
    digest: str | None
    reason: str = ""


def spark_home() -> Path:
    """$SPARK_HOME, else where PySpark's own search finds Spark (`pyspark.find_spark_home`), run without importing
    the pyspark package: its imports (~0.3 s) need not come before the driver's JVM is launched."""
    if home := os.environ.get("SPARK_HOME"):
        return Path(home)
    module: Any = sys.modules.get("pyspark.find_spark_home")
    if module is None:
        spec = importlib.util.find_spec("pyspark")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        path = os.path.join(locations[0], "find_spark_home.py") if locations else ""
        if not os.path.isfile(path):
            from pyspark import find_spark_home as module  # (raises what a missing PySpark raises)
        else:
            loader = importlib.util.spec_from_file_location("pyspark.find_spark_home", path)
            assert loader is not None and loader.loader is not None
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)  # a module of its own: it imports only os, sys and importlib
    return Path(module._find_spark_home())


def _java() -> str | None:
    """The `java` spark-class runs: $JAVA_HOME/bin/java, else the one on PATH."""
    if home := os.environ.get("JAVA_HOME"):
        java = os.path.join(home, "bin", "java")
        return java if os.access(java, os.X_OK) else None
    return shutil.which("java")


def _nonempty_dir(path: str | Path) -> bool:
    return os.path.isdir(path) and any(os.scandir(path))


def classpath() -> Classpath:
    """The identity of the JVM and classpath a local driver would start with (a few milliseconds: a listing
    of Spark's jars)."""
    java = _java()
    if java is None:
        return Classpath(None, None, "no java found (JAVA_HOME, PATH)")
    home = spark_home()
    conf_dir = os.environ.get("SPARK_CONF_DIR") or str(home / "conf")
    if _nonempty_dir(conf_dir):
        return Classpath(java, None, f"the Spark configuration directory {conf_dir} is on the driver's classpath "
                                     "and is not empty (the JVM cannot archive classes next to a directory)")
    for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        if (value := os.environ.get(name)) and _nonempty_dir(value):
            return Classpath(java, None, f"${name} ({value}) is on the driver's classpath and is not empty")
    digest = hashlib.sha256(_FORMAT.encode())
    real = os.path.realpath(java)
    stat = os.stat(real)
    digest.update(f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0{conf_dir}\0".encode())
    digest.update(os.environ.get("SPARK_DIST_CLASSPATH", "").encode() + b"\0")
    jars = home / "jars"
    try:
        entries = sorted(os.scandir(jars), key=lambda e: e.name)
    except OSError:
        return Classpath(java, None, f"no Spark jars at {jars}")
    for entry in entries:
        s = entry.stat()
        digest.update(f"{entry.name}\0{s.st_size}\0{s.st_mtime_ns}\n".encode())
    return Classpath(java, digest.hexdigest()[:20])


def cache_root() -> Path:
    """`EOS_CLASS_DATA_CACHE`, else `$XDG_CACHE_HOME/eos/class-data`, else `~/.cache/eos/class-data`."""
    if env := os.environ.get("EOS_CLASS_DATA_CACHE"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eos" / "class-data"


def archive_path(cp: Classpath | None = None) -> Path | None:
    """Where the archive for this JVM and classpath is (or would be); None when none can fit."""
    cp = cp or classpath()
    return cache_root() / f"spark-driver-{cp.digest}.jsa" if cp.digest else None


def user_java_options(conf: Any) -> str:
    """The driver JVM options the user gave (settings, or spark-submit arguments through PySpark)."""
    return f"{conf.get('spark.driver.extraJavaOptions', '') or ''} {_submit_driver_options()}"


_DRIVER_OPTIONS_CONF = "spark.driver.extraJavaOptions="


def _submit_driver_options() -> str:
    """The driver's JVM options in PYSPARK_SUBMIT_ARGS: `--driver-java-options` and `--conf` (`-c`) of
    spark.driver.extraJavaOptions. Other arguments (an executor's options, say) are not the driver's; arguments
    that do not parse are all taken as the driver's, as the careful reading."""
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    try:
        words = shlex.split(args)
    except ValueError:
        return args
    found = []
    for name, value in itertools.pairwise([*words, ""]):
        if name == "--driver-java-options":
            found.append(value)
        elif name.startswith("--driver-java-options="):
            found.append(name.split("=", 1)[1])
        elif name in ("--conf", "-c") and value.startswith(_DRIVER_OPTIONS_CONF):
            found.append(value[len(_DRIVER_OPTIONS_CONF):])
        elif name.startswith("--conf=" + _DRIVER_OPTIONS_CONF):
            found.append(name[len("--conf=" + _DRIVER_OPTIONS_CONF):])
    return " ".join(found)


def driver_java_options(conf: Any) -> str | None:
    """The JVM options that map the archive, for a driver JVM about to be started with SparkConf `conf`;
    None when there is no archive for it, or it would not fit, or the user chose otherwise."""
    if str(conf.get(DISABLE_KEY, "true")).lower() == "false":
        return None
    if any(s in user_java_options(conf) for s in _OWN_SETTINGS) or conf.get("spark.driver.extraClassPath"):
        return None
    try:
        cp = classpath()
    except OSError as exc:  # a faster start is not worth a failed one
        logger(__name__).warning("cannot tell which class-data archive fits this driver; starting without one",
                                 error=str(exc))
        return None
    path = archive_path(cp)
    if path is None:
        logger(__name__).debug("no class-data archive can fit this driver", reason=cp.reason)
        return None
    if not path.is_file() or not _record_file(path).is_file():
        if path not in _TOLD:  # (once: a driver computes its JVM's options at its launch and at its context)
            _TOLD.add(path)
            logger(__name__).info("no class-data archive for this Java and Spark yet: `eos spark archive` makes "
                                  "one (the driver's JVM starts about 2 s faster)")
        return None
    if not _complete(path):
        logger(__name__).warning("the class-data archive is incomplete or damaged; starting without it",
                                 path=str(path), fix="`eos spark archive --rebuild`")
        return None
    return f"-XX:SharedArchiveFile={path} {_USE}"


def _record_file(path: Path) -> Path:
    return path.with_suffix(".json")


def _record(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_record_file(path).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _complete(path: Path) -> bool:
    """Whether the archive has the size it was written with: the JVM checks its contents (checksums) but
    dies on an archive cut short (SIGBUS when it maps past the end), so that case is checked here."""
    try:
        return path.stat().st_size == _record(path).get("size")
    except OSError:
        return False


def build_archive(*, force: bool = False, timeout: float = 300.0) -> Path:
    """Make the archive for this JVM and classpath unless it exists (idempotent): one local SparkContext that
    runs one Python job, in a process of its own, whose JVM writes the archive as it exits. Returns its path;
    raises ArchiveBuildError (saying why) when none can be made."""
    cp = classpath()
    path = archive_path(cp)
    if path is None:
        raise ArchiveBuildError(f"no class-data archive can fit this driver: {cp.reason}. Drivers start without "
                                "one (as fast as before)")
    if path.is_file() and _complete(path) and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)  # the JVM creates it
    try:
        done = subprocess.run([sys.executable, "-m", "eos.driver.classdata", tmp], capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0 or not os.path.isfile(tmp) or os.path.getsize(tmp) == 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ArchiveBuildError(f"the JVM did not write a class-data archive (exit {done.returncode}); drivers "
                                    f"start without one. Its output ends:\n{tail}")
        installation = str(spark_home().resolve())
        _record_file(path).write_text(json.dumps({"size": os.path.getsize(tmp), "spark_home": installation}))
        os.replace(tmp, path)
    except subprocess.TimeoutExpired:
        raise ArchiveBuildError(f"making the class-data archive took over {timeout:.0f} s; drivers start "
                                "without one") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for record in path.parent.glob("spark-driver-*.json"):
        home = _record(record.with_suffix(".jsa")).get("spark_home")
        if record.stem != path.stem and (home == installation or not (home and os.path.isdir(home))):
            # an earlier build of this Spark installation, or of one that is gone: it can no longer fit
            # (archives of other installations that still exist, say another virtualenv, are theirs)
            record.with_suffix(".jsa").unlink(missing_ok=True)
            record.unlink(missing_ok=True)
    return path


def _dump(target: str) -> None:
    """Run in a process of its own: start a local context whose JVM archives its classes at exit, run one
    Python job through the engine's RDD path (with a broadcast, as batches do), stop, and wait for the JVM."""
    from pyspark import SparkConf, SparkContext

    from eos.driver.spark import _BASE_CONF, _LOCAL_CONF, task_rdd

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = SparkConf().setMaster("local[2]").setAppName("eos-class-data")
    for key, value in {**_BASE_CONF, **_LOCAL_CONF}.items():
        conf.set(key, value)
    dump = f"-XX:ArchiveClassesAtExit={target} -XX:+VerifySharedSpaces -Xlog:cds=error"  # checksums, for _USE
    conf.set("spark.driver.extraJavaOptions", dump)
    sc = SparkContext(conf=conf)
    broadcast = sc.broadcast(b"class data")
    rdd = task_rdd(sc, [1, 2, 3, 4], [None] * 4)
    assert rdd.mapPartitions(lambda items: [len(broadcast.value) + sum(items)]).collect()
    broadcast.unpersist()
    gateway_jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
    sc.stop()
    SparkContext._gateway.shutdown()  # type: ignore[union-attr]
    gateway_jvm.stdin.close()  # the gateway JVM exits when its stdin closes, and writes the archive then
    gateway_jvm.wait(120)


if __name__ == "__main__":
    _dump(sys.argv[1])
