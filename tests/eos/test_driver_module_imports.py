"""What a job's driver imports before it runs (each import is CPU that the driver's JVM, starting beside it, waits
for on two cores)."""

from __future__ import annotations

import subprocess
import sys


def test_a_job_driver_imports_prometheus_client_only_to_serve_metrics():
    done = subprocess.run([sys.executable, "-c", "import sys, eos.driver.runner; print('prometheus_client' in "
                           "sys.modules)"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
