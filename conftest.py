"""Suite-wide options and guards."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-full", action="store_true", help="run the full chaos matrix")
    parser.addoption("--chaos-repeats", type=int, default=5, help="repetitions per chaos scenario (full matrix)")
    parser.addoption("--soak", action="store_true", help="run long soak tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The broker-and-Spark files first, the unit tests' many short files last, where they fill the workers' tails
    # (`make test` runs pytest-xdist with --dist loadfile --no-loadscope-reorder: files go out in this order)
    items.sort(key=lambda item: not item.nodeid.startswith("integration_tests/"))
    for flag, marker in (("--chaos-full", "chaos_full"), ("--soak", "soak")):
        if not config.getoption(flag):
            skip = pytest.mark.skip(reason=f"long run: pass {flag}")
            for item in items:
                if marker in item.keywords:
                    item.add_marker(skip)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run in which no test passed proves nothing: fail it (exit code 5, like "no tests ran")."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    if not reporter.stats.get("passed"):
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
