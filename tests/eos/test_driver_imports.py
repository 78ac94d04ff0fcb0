"""PySpark's py4j converters of NumPy values must not make the driver import pandas, NumPy and PyArrow."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
import eos.driver.spark as spark
from py4j.protocol import INPUT_CONVERTER
spark._numpy_converters_until_numpy()
spark._numpy_converters_until_numpy()  # idempotent: not wrapped twice
wrapped = [c for c in INPUT_CONVERTER if isinstance(c, spark._NumpyConverterUntilNumpy)]
answers = [c.can_convert(x) for c in INPUT_CONVERTER for x in (1, "a", [1, 2], 1.5)]
before = sorted(m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules)
import numpy as np
converts = [c.can_convert(np.array([1, 2])) or c.can_convert(np.int64(3)) for c in wrapped]
nested = any(isinstance(c.inner, spark._NumpyConverterUntilNumpy) for c in wrapped)
print(json.dumps({"wrapped": len(wrapped), "before": before, "converts": converts, "nested": nested}))
"""


def test_numpy_converters_ask_nothing_until_numpy_is_imported_then_convert_as_pyspark_does():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["wrapped"] == 2 and not result["nested"]
    assert result["before"] == [], f"asking the converters imported {result['before']}"
    assert result["converts"] == [True, True]
