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


def test_cyclic_garbage_of_a_batch_is_still_collected(thresholds):
    class Node:
        pass

    with fewer_collections():
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
    assert gc.collect() >= 2
