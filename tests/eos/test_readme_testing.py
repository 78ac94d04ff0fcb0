"""The README's "Testing a job" example, run verbatim: its test file next to the "Writing a job" job file,
under pytest with the fixture the framework installs, with no broker and no Spark."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_block(section: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    found = re.search(r"```python\n(.*?)```", text[start:end], re.S)
    assert found, f"README section {section!r} lost its example"
    return found.group(1)


def test_the_readme_testing_example_passes_as_written(tmp_path):
    (tmp_path / "job.py").write_text(python_block("Writing a job"))
    (tmp_path / "test_job.py").write_text(python_block("Testing a job"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_job.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout
