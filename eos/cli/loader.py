"""Load an `Application` from `package.module:attr` or `path/to/job.py[:attr]` (attr defaults to `app`).

A job loaded from a file is not importable on Spark workers, so its module is registered with
cloudpickle to be pickled by value."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from eos.app import Application, loading_job

__all__ = ["load_application", "load_module"]


def load_module(spec: str) -> ModuleType:
    """A job's module (or a module beside it, as a chaos scenario's load): `path/to/file.py` or
    `package.module`; a failure is a ValueError of one line."""
    if spec.endswith(".py") or Path(spec).is_file():
        return _load_file(Path(spec))
    try:
        with loading_job(spec):
            return importlib.import_module(spec)
    except ImportError as exc:
        raise ValueError(f"cannot import {spec!r} ({exc}); give module:attr or path/to/job.py[:attr]") from None


def load_application(target: str) -> Application:
    spec, _, attr = target.partition(":")
    attr = attr or "app"
    module = load_module(spec)
    if not hasattr(module, attr):
        apps = [name for name, value in vars(module).items() if isinstance(value, Application)]
        raise ValueError(f"{target}: {spec} defines no {attr!r}; " + (
            f"its Applications: {', '.join(apps)} (give {spec}:{apps[0]})" if apps else
            "it defines no eos.Application at its top level (app = Application(...))"))
    obj = getattr(module, attr)
    if callable(obj) and not isinstance(obj, Application):
        obj = obj()
    if not isinstance(obj, Application):
        raise ValueError(f"{target}: {attr!r} is not an eos.Application (got {type(obj).__name__})")
    return obj


def _load_file(path: Path) -> ModuleType:
    """Import a job file. Its module is registered with cloudpickle before it runs, so that what it defines
    is shipped to Spark's workers by value (they cannot import the file)."""
    if not path.is_file():
        raise ValueError(f"job file {path} does not exist")
    name = f"eos_job_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    try:
        with loading_job(str(path)):
            spec.loader.exec_module(module)
    except Exception as exc:  # one line naming the job file's line, as the commands print a ValueError
        lines = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path.resolve()]
        where = f"{path}, line {lines[-1].lineno}: " if lines else f"{path}: "
        raise ValueError(f"{where}{type(exc).__name__}: {exc}") from exc
    return module
