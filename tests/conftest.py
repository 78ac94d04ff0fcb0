"""Unit-test guard: every test driver's committed records pass the job's own exactly-once audits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from eos.testing import driver as driver_module


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def _audited_drivers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every `TopologyTestDriver` a test makes (those `check_exactly_once` makes, crashed or not, too) is
    audited when the test has passed: `driver.audit()`, the lineage audit of every step and the window and
    join audits, over what it committed, must say PASS (a job run with lineage=False has only its window
    audits). Not for a test marked `no_audit` (it forges committed records)."""
    made: list[Any] = []
    build = driver_module.TopologyTestDriver.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        build(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(driver_module.TopologyTestDriver, "__init__", init)
    yield
    if request.node.get_closest_marker("no_audit") or request.node.stash.get(_FAILED, True):
        return
    for driver in made:
        for report in driver.audit():
            check = report.lineage or report.window or report.join
            assert report.verdict == "PASS", f"the {report.mode} audit of {report.outputs} failed: {check}"
