"""`runtime.memory.release_free_memory`: freed heap pages leave the resident set at the end of a cycle."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from gpu_rightsizer.runtime.memory import release_free_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _resident_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_blocks_below_a_live_one_leave_the_resident_set() -> None:
    # 1 KiB blocks are glibc's, not Python's small-object arenas; the block allocated last keeps the
    # freed ones below the heap's top, where glibc's own trimming never reaches them
    blocks = [bytearray(1024) for _ in range(96 * 1024)]
    above = bytearray(1024)
    del blocks
    before = _resident_mib()
    assert release_free_memory() is True
    after = _resident_mib()
    assert before - after > 48, f"resident {before:.0f} MiB before, {after:.0f} MiB after"
    assert len(above) == 1024


@pytest.mark.skipif(GLIBC, reason="this C library has malloc_trim")
def test_without_glibc_nothing_is_done() -> None:
    assert release_free_memory() is None
