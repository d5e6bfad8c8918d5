"""Hand the C allocator's free pages back to the system once a cycle is done.

Why: a cycle's transients (range answers, decoded arrays, the chunks' windows) are freed when it ends,
but glibc keeps the pages of freed blocks that do not sit at the top of its heaps, so the resident
set stays near the cycle's peak and creeps up cycle after cycle. `malloc_trim(0)` gives every whole
free page of every heap back (`madvise(MADV_DONTNEED)`, glibc 2.8 and newer); the blocks stay where
they are, so nothing is copied and nothing in use moves. Python's own small-object arenas are not
glibc's and are freed by Python when they empty. Measured at 10,000 workloads
(`bench/fleet_backfill.py`, with the image's `MALLOC_ARENA_MAX=2`): see docs/scaling.md.

Where the C library is not glibc (musl, macOS), there is no such call and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

LOG = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        library = ctypes.CDLL(name)
        trim = library.malloc_trim
    except (OSError, AttributeError, TypeError):
        LOG.debug("the C library (%s) has no malloc_trim: freed pages stay with the process", name)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool | None:
    """Give the allocator's free pages back to the system: whether any were given back (glibc's
    answer), None where this C library cannot."""
    trim = _malloc_trim()
    return None if trim is None else bool(trim(0))
