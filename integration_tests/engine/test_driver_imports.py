"""A driver runs a Spark job without importing pandas, NumPy or PyArrow (PySpark's py4j converters would
import all three at the first call: ~85 MiB of the driver's memory and ~0.3 s of its start-up)."""

from __future__ import annotations

from integration_tests.helpers import fresh_driver

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
    result = fresh_driver(_DRIVER)
    assert result == {"total": 90, "loaded": []}
