"""Getting the framework's code onto executors that do not have it installed.

On a cluster, executors run the tasks in their own Python; they need `eos`, `transactions` and `recovery`
(pure Python) next to the third-party packages (confluent-kafka, rocksdict, ...), which must be installed
on the executors or shipped as a packed virtualenv (`--archives`, see the README). The driver zips the
three packages once per process and adds the zip to the SparkContext (`sc.addPyFile`), so every executor
puts it on its `sys.path` before running a task. Job modules loaded by `eos run` are pickled by value, and
functions of a spark-submit main file are too, so the job's own code needs no shipping.

Local masters share the driver's Python and skip it; `spark.eos.shipFramework=true|false` overrides.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import py_compile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import structlog

from eos.driver.spark import spark_conf

__all__ = ["framework_zip", "ship_framework", "PACKAGES"]

log = structlog.get_logger(__name__)

PACKAGES = ("eos", "transactions", "recovery")
_SHIPPED: set[int] = set()  # ids of the SparkContexts shipped to


def _package_dirs() -> list[Path]:
    import eos
    import recovery
    import transactions

    return [Path(module.__file__).parent for module in (eos, transactions, recovery)]  # type: ignore[arg-type]


def framework_zip(target: str | Path | None = None) -> Path:
    """A zip of the framework's packages at `target` (default: a file in the temp directory named by the
    content's hash and this Python's bytecode version, reused while both are unchanged). Returns its path.

    Each module is there as its source and as bytecode compiled by this Python (`x.pyc` beside `x.py`, where
    Python's zip importer looks for it): an executor's Python otherwise compiles every module it imports from
    source, in every Python process Spark starts, since it cannot write the result into the zip (~0.3 CPU-s
    for a worker's modules). The bytecode is hash-based and checked against the source in the zip; an
    executor whose Python has another bytecode version (magic number) skips it and compiles the source."""
    files: list[tuple[Path, str]] = []
    for directory in _package_dirs():
        for path in sorted(directory.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed", ".json"):
                files.append((path, str(Path(directory.name) / path.relative_to(directory))))
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    for path, name in files:
        digest.update(name.encode())
        digest.update(path.read_bytes())
    out = Path(target) if target else Path(tempfile.gettempdir()) / f"eos-framework-{digest.hexdigest()[:12]}.zip"
    if target or not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(f".{os.getpid()}.partial")
        compiled = out.with_suffix(f".{os.getpid()}.pyc")
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
                for path, name in files:
                    archive.write(path, name)
                    if path.suffix == ".py":
                        py_compile.compile(str(path), str(compiled), dfile=name, doraise=True,
                                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                        archive.write(compiled, name[:-3] + ".pyc")
            partial.replace(out)
        finally:
            compiled.unlink(missing_ok=True)
            partial.unlink(missing_ok=True)
    return out


def ship_framework(sc: Any, *, local: bool) -> Path | None:
    """Add the framework's zip to `sc` unless its executors share the driver's Python (local masters) or
    `spark.eos.shipFramework` says otherwise. Once per SparkContext."""
    setting = (spark_conf(sc).get("spark.eos.shipFramework") or "").lower()
    if setting not in ("", "true", "false"):
        from eos.errors import ConfigError

        raise ConfigError(f"spark.eos.shipFramework must be true or false, got {setting!r}")
    if (setting == "false" or (local and setting != "true")) or id(sc) in _SHIPPED:
        return None
    path = framework_zip()
    sc.addPyFile(str(path))
    _SHIPPED.add(id(sc))
    log.info("framework shipped to the executors", archive=str(path))
    return path
