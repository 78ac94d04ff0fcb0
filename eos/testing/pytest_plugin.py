"""The pytest plugin the framework installs (entry point `pytest11`): the `topology_driver` fixture.

    def test_totals(topology_driver):
        driver = topology_driver(app)              # eos.testing.TopologyTestDriver(app, **options)
        driver.pipe("orders", "alice", {"qty": 2, "price": 3.5})
        assert driver.read("customer-totals")[-1].value["revenue"] == 7.0

Every driver the test made is closed when it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eos.app import Application


@pytest.fixture
def topology_driver() -> Iterator[Callable[..., Any]]:
    """A factory of `TopologyTestDriver`s: `topology_driver(app, partitions=1, wall_clock_ms=None, ...)`."""
    from eos.testing.driver import TopologyTestDriver

    made: list[TopologyTestDriver] = []

    def make(app: Application, **options: Any) -> TopologyTestDriver:
        driver = TopologyTestDriver(app, **options)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.close()
