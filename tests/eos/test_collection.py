import gc

import pytest

from eos.worker.collection import BATCH_THRESHOLDS, fewer_collections


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_a_batch_raises_the_thresholds_and_restores_the_processs_own(thresholds):
    gc.set_threshold(700, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == BATCH_THRESHOLDS
    assert gc.get_threshold() == (700, 10, 10)


def test_higher_thresholds_of_the_process_are_kept_and_restored_after_an_error(thresholds):
    gc.set_threshold(200_000, 5, 5_000)
    with pytest.raises(RuntimeError), fewer_collections():
        assert gc.get_threshold() == (200_000, 10, 5_000)
        raise RuntimeError("the batch failed")
    assert gc.get_threshold() == (200_000, 5, 5_000)


def test_young_collections_still_run_during_a_batch_and_full_ones_wait(thresholds):
    """Cyclic garbage made during a batch is collected by young collections as the batch runs; the full
    collections that the default thresholds would set off by the batch's growth do not happen."""
    gc.set_threshold(700, 10, 10)
    collected: list[tuple[int, int]] = []

    def record(phase, info):
        if phase == "stop":
            collected.append((info["generation"], info["collected"]))

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a

    gc.collect()
    gc.callbacks.append(record)
    try:
        with fewer_collections():
            kept = [[i] for i in range(120_000)]  # a batch's outputs, held until the commit
            for _ in range(30_000):
                cycle()
        during = list(collected)
    finally:
        gc.callbacks.remove(record)
    assert kept
    assert during, "no collection ran during the batch"
    assert all(generation < 2 for generation, _ in during), during
    assert sum(n for _, n in during) > 0  # the cycles went with young collections

    collected.clear()
    gc.callbacks.append(record)
    try:
        kept = [[i] for i in range(120_000)]
        for _ in range(30_000):
            cycle()
    finally:
        gc.callbacks.remove(record)
    assert any(generation == 2 for generation, _ in collected), "the default thresholds run full collections"
