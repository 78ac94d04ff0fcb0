"""The Python daemon of local masters: the installed pyspark before Spark's zip only when they are the same
release, and preloaded modules that start no thread before the daemon forks its workers."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from eos.worker.daemon import prefer_installed_pyspark


def _release(root, package, version):
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "version.py").write_text(f'__version__ = "{version}"\n')


def _zip(path, package, version):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{package}/__init__.py", "")
        z.writestr(f"{package}/version.py", f'__version__ = "{version}"\n')
    return str(path)


def test_the_zips_go_behind_an_installed_copy_of_the_same_release(tmp_path):
    site = tmp_path / "site-packages"
    _release(site, "pyspark", "4.3.0")
    _release(site, "py4j", "0.10.9.9")
    spark_zip = _zip(tmp_path / "pyspark.zip", "pyspark", "4.3.0")
    py4j_zip = _zip(tmp_path / "py4j-0.10.9.9-src.zip", "py4j", "0.10.9.9")
    path = ["/work", spark_zip, py4j_zip, "/usr/lib/python311.zip", str(site)]
    assert prefer_installed_pyspark(path) == ["/work", "/usr/lib/python311.zip", str(site), spark_zip, py4j_zip]


def test_another_release_or_none_installed_keeps_sparks_order(tmp_path):
    site = tmp_path / "site-packages"
    _release(site, "py4j", "0.10.9.9")
    spark_zip = _zip(tmp_path / "pyspark.zip", "pyspark", "4.3.0")
    py4j_zip = _zip(tmp_path / "py4j-0.10.9.9-src.zip", "py4j", "0.10.9.9")
    path = [spark_zip, py4j_zip, str(site)]
    assert prefer_installed_pyspark(path) == path  # no pyspark installed (a cluster's executors, typically)
    _release(site, "pyspark", "4.2.1")
    assert prefer_installed_pyspark(path) == path  # another release
    assert prefer_installed_pyspark([str(site)]) == [str(site)]  # no zips: nothing to do
    broken = tmp_path / "bad" / "pyspark.zip"
    broken.parent.mkdir()
    broken.write_bytes(b"not a zip")
    assert prefer_installed_pyspark([str(broken), str(site)]) == [str(broken), str(site)]


def test_the_daemon_module_imports_no_pyspark_and_its_preloads_start_no_thread():
    # `python -m eos.worker.daemon` imports the eos package before it can reorder the path: that must not
    # import pyspark (it would come from the zip); and a fork copies only the forking thread, so the modules
    # loaded before the daemon forks its workers must not have started any (the process has one OS thread).
    probe = ("import os, sys; import eos.worker.daemon as d; assert 'pyspark' not in sys.modules, 'pyspark imported';"
             "import gc; d.preload(); assert all(m in sys.modules for m in d.PRELOADED), 'not loaded';"
             "assert gc.get_freeze_count() > 10_000, gc.get_freeze_count();"  # what a worker's collector skips
             "print(len(os.listdir('/proc/self/task')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


_CLOSED_PEER = """
import os, socket, sys
import pyspark.daemon as daemon
import pyspark.worker

def main(infile, outfile):  # a task's output, larger than the socket's buffers: flushed after Spark has gone
    outfile.write(b"x" * (1 << 22))

pyspark.worker.main = main
if sys.argv[1] == "quiet":
    from eos.worker.daemon import quiet_closed_connections
    quiet_closed_connections(daemon)
ours, spark = socket.socketpair()
spark.close()
print("code", daemon.worker(ours, True))
"""


def test_a_worker_whose_connection_spark_closed_exits_without_a_traceback():
    env = {**os.environ, "PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE": "true"}  # as Spark launches its daemon
    run = [sys.executable, "-c", _CLOSED_PEER]
    plain = subprocess.run([*run, "plain"], capture_output=True, text=True, env=env, check=False)
    assert plain.returncode != 0 and "BrokenPipeError" in plain.stderr  # PySpark's own daemon: a traceback
    quiet = subprocess.run([*run, "quiet"], capture_output=True, text=True, env=env, check=False)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "code 1\n", "")  # not reused, nothing printed


def test_a_workers_other_errors_are_still_pysparks_to_report():
    probe = _CLOSED_PEER.replace('outfile.write(b"x" * (1 << 22))', 'raise MemoryError("not a closed connection")')
    env = {**os.environ, "PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE": "true"}
    done = subprocess.run([sys.executable, "-c", probe, "quiet"], capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode != 0 and "MemoryError: not a closed connection" in done.stderr
