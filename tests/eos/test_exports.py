"""The package's exports load on first use (PEP 562): every exported name resolves to its module's object, the
list of exports and the map of where they come from agree, and `import eos` alone imports none of the API."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import eos


def test_every_export_resolves_to_the_object_of_its_module():
    assert sorted(eos.__all__) == sorted(eos._EXPORTS)
    for name, module in eos._EXPORTS.items():
        assert getattr(eos, name) is getattr(importlib.import_module(module), name)
    assert set(eos.__all__) <= set(dir(eos))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Aplication'"):
        eos.Aplication  # noqa: B018
    with pytest.raises(ImportError):
        from eos import Aplication  # type: ignore[attr-defined]  # noqa: F401


def test_importing_the_package_imports_none_of_the_api():
    code = ("import sys, eos; print(sorted(m for m in sys.modules if m.startswith(('eos.', 'recovery', 'pyspark'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = "from eos import Application; import sys; print('eos.app' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
