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
    assert "4 passed" in done.stdout, done.stdout


def readme_app(section: str):
    namespace: dict = {"__name__": "readme_job"}
    exec(compile(python_block(section), f"README:{section}", "exec"), namespace)
    return namespace["app"]


def test_the_readme_jobs_commit_the_same_results_when_batches_crash():
    """`check_exactly_once` on each of the README's jobs: inputs run straight and with batches killed at random
    steps of the protocol commit the same outputs, dead letters and stores."""
    from eos.testing import TopologyTestDriver

    base = 1_800_000_000_000
    orders = [("orders", f"c{i % 4}", {"qty": i % 3, "price": 1.5} if i % 9 else {"qty": 1}, base + i)
              for i in range(40)]
    events = [("events", f"e{i % 5}", b"signup", base + i) for i in range(20)]
    clicks = [("clicks", f"u{i}".encode(), "home" if i % 3 else "", base + i) for i in range(20)]
    TopologyTestDriver(readme_app("Writing a job"), wall_clock_ms=base).check_exactly_once(
        orders + events + clicks, crashes=10, seed=1)

    minute = 60_000
    views = [("views", f"u{i % 5}", {"page": f"p{i % 3}"}, base + i * 7_000) for i in range(60)]
    logins = [("logins", f"user{i % 3}", "in", base + i * 100_000) for i in range(15)]
    pings = [("pings", f"sensor-{i % 4}", {}, base + i * minute // 2) for i in range(30) if i % 7]
    TopologyTestDriver(readme_app("Time and windows"), wall_clock_ms=base + 60 * minute).check_exactly_once(
        sorted(views + logins + pings, key=lambda r: r[3]), crashes=10, seed=2)

    shop = readme_app("Tables and joins")
    inputs = [("products", "p1", {"price": 5}, base)]
    for i in range(30):
        t = base + i * minute
        inputs += [("customers", f"c{i % 6}", {"tier": "gold" if i % 2 else "basic"}, t),
                   ("addresses", f"c{i % 7}", {"city": f"x{i}"}, t + 1),
                   ("orders", f"c{i % 8}", {"order": i, "product": f"p{i % 2 + 1}"}, t + 2),
                   ("payments", f"c{i % 5}", {"amount": i}, t + 3),
                   ("subscriptions", f"s{i % 9}", {"customer": f"c{i % 8}", "plan": "pro"}, t + 4)]
    report = TopologyTestDriver(shop, wall_clock_ms=base + 60 * minute).check_exactly_once(inputs, crashes=10, seed=3)
    assert report.crashes and report.records > 100
