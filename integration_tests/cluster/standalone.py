"""A Spark standalone cluster on loopback, started from PySpark's own `spark-class`: one master and N
workers, each worker (and the executors it launches) in its own process group so that a test can SIGKILL
a whole worker as a lost machine; and a Python for the executors with the framework's third-party
dependencies but **not** the framework, so that what runs on the executors was shipped by the driver."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from localkafka.config import free_port

ROOT = Path(__file__).resolve().parents[2]
# What the executors' Python needs besides the framework: the worker path's imports (no pandas/pyarrow:
# the jobs here are not vectorized).
EXECUTOR_REQUIREMENTS = ["confluent-kafka>=2.12,<3", "rocksdict>=0.3.23", "sortedcontainers>=2.4", "structlog>=24.1",
                         "tenacity>=8.2", "rich>=13", "pyroaring>=1.0", "orjson>=3.10"]


def executor_python() -> str:
    """A virtualenv under .cache/ with EXECUTOR_REQUIREMENTS only, built once (pip, from PyPI or its cache)."""
    key = hashlib.sha256(" ".join([sys.version, *EXECUTOR_REQUIREMENTS]).encode()).hexdigest()[:10]
    env = ROOT / ".cache" / f"executor-env-{key}"
    python = env / "bin" / "python"
    if not (env / ".complete").exists():
        # Without a pip of its own (bootstrapping one takes longer than the install): this pip installs into it.
        subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(env)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                        "--disable-pip-version-check", *EXECUTOR_REQUIREMENTS], check=True)
        (env / ".complete").write_text("")
    check = subprocess.run([str(python), "-c", "import eos"], capture_output=True, text=True, cwd=env)
    assert check.returncode != 0, "the executors' Python must not have the framework installed"
    return str(python)


class StandaloneCluster:
    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root, self.workers_wanted, self.cores, self.memory = root, workers, cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        import pyspark

        spark_home = str(Path(pyspark.__file__).parent)  # pip's PySpark is a Spark distribution too
        self._spark_class = str(Path(spark_home) / "bin" / "spark-class")
        # (the master's and workers' JVMs compile with C1 only, as the suite's others: integration_tests/conftest.py)
        self._env = {**os.environ, "SPARK_HOME": spark_home, "SPARK_LOCAL_IP": "127.0.0.1",
                     "SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1"}

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")
        return subprocess.Popen([self._spark_class, *args], env=self._env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start(self) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        self.master = self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", str(self.port), "--webui-port", str(self.ui_port))
        self.wait(lambda status: True, 60, "the master's web UI")
        for i in range(self.workers_wanted):
            work = self.root / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self.workers.append(self._start(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                str(self.cores), "--memory", self.memory, "--work-dir", str(work), "--webui-port",
                str(free_port()), self.master_url))
        self.wait(lambda status: status.get("aliveworkers", 0) >= self.workers_wanted, 90, "the workers")
        return self

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate(self.status()):
                    return
            except (OSError, ValueError):  # not listening yet, or serving HTML before its JSON page is up
                pass
            time.sleep(0.5)
        raise TimeoutError(f"standalone cluster: timed out waiting for {what}; logs in {self.root}")

    def kill_worker_of(self, pid: int) -> None:
        """SIGKILL the worker whose process group holds `pid` (an executor), with everything it started."""
        pgid = os.getpgid(pid)
        if pgid not in {proc.pid for proc in self.workers}:
            raise LookupError(f"process {pid} is not in a worker's process group of this cluster (group {pgid})")
        os.killpg(pgid, signal.SIGKILL)

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
