"""The framework's zip for executors without it (`eos.driver.shipping.framework_zip`): its modules come with
bytecode that an executor's Python uses, and that one of another bytecode version skips for the source."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from eos.driver.shipping import framework_zip

#: run in a fresh Python that writes no bytecode, with the zip first on its path: where each module came from,
#: and a traceback raised in a zipped module
_IMPORT = """
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import eos.worker.entry, eos.worker.zygote, transactions.producer, recovery
from eos.driver.spark import block_manager_threads
try:
    block_manager_threads({"spark.eos.blockManagerThreads": "many"})
except Exception:
    shown = traceback.format_exc()
print(json.dumps({"files": [m.__file__ for m in (eos.worker.entry, eos.worker.zygote, transactions.producer)],
                  "shown": shown}))
"""


def _imported(archive: Path, cwd: Path) -> dict:
    out = subprocess.run([sys.executable, "-B", "-c", _IMPORT, str(archive)], cwd=cwd, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_the_zip_holds_each_module_with_its_bytecode_which_an_executor_imports(tmp_path):
    archive = framework_zip(tmp_path / "eos-framework.zip")
    names = set(zipfile.ZipFile(archive).namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert "eos/worker/entry.py" in sources and "transactions/producer.py" in sources
    assert {n + "c" for n in sources} <= names and not any("__pycache__" in n for n in names)
    seen = _imported(archive, tmp_path)
    assert all(f.startswith(str(archive)) and f.endswith(".pyc") for f in seen["files"]), seen["files"]
    # a traceback still shows the zipped source's lines
    assert 'File "eos/driver/spark.py"' in seen["shown"] and "raise ConfigError(" in seen["shown"], seen["shown"]


def test_an_executor_of_another_bytecode_version_compiles_the_source_instead(tmp_path):
    archive = framework_zip(tmp_path / "eos-framework.zip")
    other = tmp_path / "other-python.zip"
    magic = importlib.util.MAGIC_NUMBER
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(other, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith(".pyc"):
                assert data.startswith(magic)
                data = bytes([magic[0] ^ 0xFF]) + data[1:]  # the bytecode of a Python of another version
            target.writestr(info, data)
    seen = _imported(other, tmp_path)
    assert all(f.startswith(str(other)) and f.endswith(".py") for f in seen["files"]), seen["files"]


def test_the_default_zip_is_named_by_its_content_and_this_pythons_bytecode_version(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    first = framework_zip()
    assert framework_zip() == first  # reused while neither changed
    monkeypatch.setattr(importlib.util, "MAGIC_NUMBER", b"\x00\x00\r\n")
    assert framework_zip() != first
