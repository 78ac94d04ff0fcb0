"""Python's cyclic garbage collector, held back while a worker runs a batch.

A batch makes a few objects per record (the record, its value, the outputs, their headers) and keeps the
outputs until the commit: with CPython's default thresholds (700, 10, 10) that growth of long-lived objects
sets off full collections, each traversing the worker's whole heap (pyspark, the clients, the stores'
caches, every output held so far). Measured in-process on 50,000 records of the stateless job, collections
took ~140 ms of ~0.9 s, most of it in full collections. During a batch young collections run every 50,000
allocations and full collections wait; once the batch is done the process's own thresholds are back, so
cyclic garbage the batch left behind is found by the next collection as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["fewer_collections", "BATCH_THRESHOLDS"]

#: (young, middle, old) thresholds while a batch runs; never lower than the process's own
BATCH_THRESHOLDS = (50_000, 10, 1_000)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's thresholds for the duration of the block, then restore the process's own."""
    before = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(before, BATCH_THRESHOLDS, strict=True)))
    try:
        yield
    finally:
        gc.set_threshold(*before)
