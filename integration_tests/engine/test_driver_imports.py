"""A driver runs a Spark job without importing pandas, NumPy or PyArrow (PySpark's py4j converters would
import all three at the first call: ~85 MiB of the driver's memory and ~0.3 s of its start-up)."""

from __future__ import annotations

import json
import subprocess
import sys

_DRIVER = """
import json, sys
from eos.driver.spark import build_spark_context
sc = build_spark_context("local[1]", app_name="driver-imports")
try:
    total = sc.parallelize(range(10), 2).map(lambda x: x * 2).sum()
finally:
    sc.stop()
print(json.dumps({"total": total, "loaded": sorted(m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules)}))
"""


def test_a_driver_runs_a_job_without_importing_pandas_numpy_or_pyarrow():
    done = subprocess.run([sys.executable, "-c", _DRIVER], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"total": 90, "loaded": []}
