"""Resolve the pinned Apache Kafka release from Maven Central into a cache outside the repository.

The Maven file (`pom.xml` next to this module) is the single source of truth for the Kafka version.
Resolution is idempotent: a stamp file records the hash of the Maven file that produced the cache, so a
second run neither calls Maven nor downloads anything.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KafkaJars", "ToolMissingError", "ensure_kafka_jars", "kafka_version", "check_java"]

POM = Path(__file__).with_name("pom.xml")
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
_MIN_JAVA = 17


class ToolMissingError(RuntimeError):
    """Java or Maven is missing or too old; the message says what to install."""


@dataclass(frozen=True)
class KafkaJars:
    version: str
    libs: Path

    @property
    def classpath(self) -> str:
        return str(self.libs / "*")


def kafka_version() -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not node.text:
        raise RuntimeError(f"{POM} does not define <kafka.version>")
    return node.text.strip()


def cache_root() -> Path:
    """`EOS_KAFKA_CACHE`, else `$XDG_CACHE_HOME/eos/kafka`, else `~/.cache/eos/kafka`."""
    if env := os.environ.get("EOS_KAFKA_CACHE"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eos" / "kafka"


def check_java() -> str:
    """Return the `java` executable, or raise if it is missing or older than Java 17."""
    java = shutil.which("java", path=_java_search_path())
    if java is None:
        raise ToolMissingError(
            "Java 17 or newer is required to run Apache Kafka locally, but `java` is not on PATH. "
            "Install a JDK 17 (e.g. `apt-get install openjdk-17-jdk-headless`) or set JAVA_HOME."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    if major < _MIN_JAVA:
        raise ToolMissingError(
            f"Java {_MIN_JAVA}+ is required to run Apache Kafka 4.x, found: {out.splitlines()[0] if out else '?'} "
            f"at {java}. Install a JDK 17 and put it first on PATH (or set JAVA_HOME)."
        )
    return java


def _java_search_path() -> str:
    path = os.environ.get("PATH", "")
    if home := os.environ.get("JAVA_HOME"):
        path = f"{Path(home) / 'bin'}{os.pathsep}{path}"
    return path


def _check_maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ToolMissingError(
            "Apache Maven is required once, to download the Kafka jars from Maven Central, but `mvn` is "
            "not on PATH. Install it (e.g. `apt-get install maven`), or point EOS_KAFKA_CACHE at a "
            "directory that already holds <version>/libs."
        )
    return mvn


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def ensure_kafka_jars(*, quiet: bool = True) -> KafkaJars:
    """Return the resolved jars, running Maven only when the cache is missing or stale."""
    version = kafka_version()
    home = cache_root() / version
    libs, stamp = home / "libs", home / ".resolved"
    digest = _pom_digest()
    if stamp.is_file() and stamp.read_text().strip() == digest and any(libs.glob("kafka_2.13-*.jar")):
        return KafkaJars(version, libs)

    check_java()
    mvn = _check_maven()
    home.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=home))
    cmd = [
        mvn, "-B", "-f", str(POM), "dependency:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
    ]
    if quiet:
        cmd.insert(2, "-q")
    result = subprocess.run(cmd, capture_output=quiet, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        detail = (result.stdout or "")[-3000:] if quiet else ""
        raise RuntimeError(f"Maven could not resolve Apache Kafka {version} (exit {result.returncode}).\n{detail}")
    if libs.exists():
        shutil.rmtree(libs)
    staging.rename(libs)
    stamp.write_text(digest + "\n")
    return KafkaJars(version, libs)
