"""Where the local cluster's binaries live, and building them when they are missing.

The build is `hack/testbins/build.sh` (pinned versions, cached outside the repository); this module
only finds that script from an installed or checked-out package and runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REQUIRED = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "kwok",
    "kwokctl",
    "helm",
    "kubectl",
)


class BinariesUnavailableError(RuntimeError):
    """The test-cluster binaries are missing and could not be built."""


@dataclass(frozen=True)
class TestBinaries:
    """Paths of the pinned binaries of the local cluster."""

    __test__ = False  # not a pytest test class

    bin_dir: Path

    def path(self, name: str) -> Path:
        """Absolute path of one binary."""
        return self.bin_dir / name

    @property
    def prometheus(self) -> Path:
        """Prometheus comes from the Debian package, not from the Go build."""
        found = shutil.which("prometheus")
        if found is None:
            raise BinariesUnavailableError(
                "prometheus not found on PATH: install the Debian package `prometheus`"
            )
        return Path(found)

    @property
    def promtool(self) -> Path:
        """promtool ships with the Debian `prometheus` package."""
        found = shutil.which("promtool")
        if found is None:
            raise BinariesUnavailableError(
                "promtool not found on PATH: install the Debian package `prometheus`"
            )
        return Path(found)

    def env(self) -> dict[str, str]:
        """Environment with the binaries first on PATH (kwokctl looks kubectl up there)."""
        return {**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def build_script() -> Path:
    """`hack/testbins/build.sh` of the checkout this package runs from."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "hack" / "testbins" / "build.sh"
        if candidate.is_file():
            return candidate
    raise BinariesUnavailableError(
        "hack/testbins/build.sh not found: the local cluster needs a source checkout of gpu-rightsizer"
    )


def ensure_binaries(*, build: bool = True) -> TestBinaries:
    """Return the cached binaries, building the missing ones first (progress goes to stderr)."""
    override = os.environ.get("GPU_RIGHTSIZER_TESTBINS")
    if override:
        bins = TestBinaries(Path(override))
    else:
        script = build_script()
        args = ["bash", str(script)] + ([] if build else ["--print"])
        result = subprocess.run(args, stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=False)
        if result.returncode != 0:
            raise BinariesUnavailableError(
                f"{script} failed with exit code {result.returncode} (see its output above)"
            )
        bins = TestBinaries(Path(result.stdout.strip().splitlines()[-1]))
    missing = [name for name in REQUIRED if not os.access(bins.path(name), os.X_OK)]
    if missing:
        raise BinariesUnavailableError(
            f"missing in {bins.bin_dir}: {', '.join(missing)}; run hack/testbins/build.sh"
        )
    return bins
