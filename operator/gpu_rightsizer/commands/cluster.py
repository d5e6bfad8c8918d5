"""Bring the local test cluster up or down: real control plane on 127.0.0.1, KWOK fake GPU nodes.

`up` builds the pinned binaries on first use (cached outside the repository), creates the cluster,
installs the CRDs and prints the kubeconfig path; `down` deletes it and stops every process.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_NAME = "gpu-rightsizer"


def state_dir(name: str) -> Path:
    """Where a named local cluster keeps its files."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpu-rightsizer" / "clusters"
    return root / name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`cluster up|down [--name NAME]`."""
    parser.add_argument(
        "action", choices=["up", "down", "kubeconfig"], help="create, delete, or print the kubeconfig path"
    )
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"cluster name (default {DEFAULT_NAME})")


def crd_objects() -> list[dict[str, object]]:
    """The project's CRDs, generated from the models (the same YAML as crds/)."""
    from gpu_rightsizer.crdgen import build_crds

    return list(build_crds().values())


def run(args: argparse.Namespace) -> int:
    """Carry out the action; errors are one clear line on stderr and exit code 1."""
    from gpu_rightsizer.testcluster.binaries import BinariesUnavailableError, ensure_binaries
    from gpu_rightsizer.testcluster.kwok import ClusterError, LocalCluster

    workdir = state_dir(args.name)
    if args.action == "kubeconfig":
        print(workdir / "kubeconfig")
        return 0
    try:
        bins = ensure_binaries(build=args.action == "up")
        cluster = LocalCluster(name=args.name, workdir=workdir, bins=bins)
        if args.action == "down":
            cluster.down()
            return 0
        running = cluster.running_components()
        if running:
            print(
                f"gpu-rightsizer cluster up: cluster {args.name!r} is already running ({', '.join(running)}; "
                f"kubeconfig {cluster.kubeconfig}); give another --name, or delete it with "
                f"`gpu-rightsizer cluster down --name {args.name}`",
                file=sys.stderr,
            )
            return 1
        cluster.up()
        cluster.apply(crd_objects())
    except (BinariesUnavailableError, ClusterError) as error:
        print(f"gpu-rightsizer cluster {args.action}: {error}", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0
