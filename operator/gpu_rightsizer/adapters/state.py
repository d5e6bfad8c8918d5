"""Saved streaming windows on disk, one file per window length, replaced atomically.

Why: after a restart the incremental reads would backfill the whole window from Prometheus (a day
of samples for a 24 h window). With a state directory (`--state-dir`, a volume of its own) the
windows are saved every few minutes and on shutdown, and loaded at the next start, which then
reads only the time since. A file is written beside its final name, flushed to the disk and renamed
over it, so a crash mid-write leaves the previous file, never half of a new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

#: The files' suffix (the loader refuses any content that is not a saved window anyway).
SUFFIX = ".window"


class StateDir:
    """Where each window length's saved state lives."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path(self, window_seconds: float) -> Path:
        """The file of one window length, e.g. `window-86400s.window`."""
        return self.directory / f"window-{window_seconds:g}s{SUFFIX}"

    def read(self, window_seconds: float) -> bytes | None:
        """The saved bytes, None when there are none."""
        try:
            return self.path(window_seconds).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, window_seconds: float, data: bytes) -> Path:
        """Replace the window's file with `data`: a temporary file, fsync, rename, fsync the directory."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path(window_seconds)
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=self.directory)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)
        return target

    def remove(self, window_seconds: float) -> None:
        """Forget a window length's file (no workload uses that window any more)."""
        with contextlib.suppress(FileNotFoundError):
            self.path(window_seconds).unlink()
