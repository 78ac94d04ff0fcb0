"""Memory a Python worker's allocator keeps after its batches, handed back to the system (glibc's `malloc_trim`).

A batch allocates and frees tens of MiB through malloc: librdkafka's fetched and produced messages, Python's
larger objects. glibc keeps what is freed in its arenas, resident, for the next batch to reuse; by itself it
returns only free space at the top of the main heap. Between batches a worker of the peers' stateless job
held 10-16 MiB free in its arenas (26 MiB in use), counted in its memory the whole time. When more than
`TRIM_ABOVE` is free after a batch, the worker returns the whole free pages of every arena (`malloc_trim(0)`:
1.8 ms median here, 67 ms at most); the next batch faults back what it needs. The two workers' peak PSS
went from 122-129 to 113-118 MiB (three alternations; docs/measurements.md), with no change in the time of a
3M-record run beyond its spread.

Its arenas are capped too (`cap_arenas`). glibc gives each new thread an arena of its own, up to eight per core,
and each arena keeps its own free memory: a worker's librdkafka clients start a dozen threads, and a worker of the
peers' stateless job held three arenas beside the main one. At most two (the main one and one its clients'
threads share): that job's peak PSS 4-13 MiB lower in all 10 alternated pairs, the count's 2-10 in all 10, the
64-partition jobs' 5 at the median (-21 to +11); the rates within their spread, the CPU per record the same
(docs/measurements.md). glibc's `MALLOC_ARENA_MAX`, when set, is the user's choice and is left as it is.

Where the C library is not glibc (no `malloc_trim`, no `mallopt`), nothing happens.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

__all__ = ["ARENAS", "TRIM_ABOVE", "cap_arenas", "free_bytes", "release_free_memory"]

#: free bytes in the allocator's arenas above which a worker hands them back after its batches
TRIM_ABOVE = 4 << 20
#: the most malloc arenas a worker's threads share (`cap_arenas`)
ARENAS = 2
_M_ARENA_MAX = -8  # (glibc's malloc.h)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _libc() -> Any:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


_LIBC = _libc()
_TRIM = getattr(_LIBC, "malloc_trim", None)
_MALLOPT = getattr(_LIBC, "mallopt", None)
_INFO = getattr(_LIBC, "mallinfo2", None)  # (glibc 2.33 and later)
if _INFO is not None:
    _INFO.restype = _MallInfo2


def free_bytes() -> int | None:
    """Bytes free in the allocator's arenas (glibc's `mallinfo2().fordblks`); None where it cannot tell."""
    return int(_INFO().fordblks) if _INFO is not None else None


def release_free_memory() -> bool:
    """Hand the allocator's free pages back to the system when more than `TRIM_ABOVE` is free (or, where the
    allocator cannot tell, always). Whether it did."""
    if _TRIM is None:
        return False
    free = free_bytes()
    if free is not None and free <= TRIM_ABOVE:
        return False
    _TRIM(0)
    return True


def cap_arenas(arenas: int = ARENAS) -> bool:
    """Let this process and those forked from it make at most `arenas` malloc arenas, unless the environment sets
    `MALLOC_ARENA_MAX` (glibc read it at start). Called before any thread starts: a thread keeps the arena it
    has. Whether the cap was set."""
    if _MALLOPT is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(_MALLOPT(_M_ARENA_MAX, arenas))
