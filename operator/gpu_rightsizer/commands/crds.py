"""Print the CustomResourceDefinitions, write them into folders, or check that committed copies are current.

gpu-rightsizer crds                                   # print every CRD to stdout
gpu-rightsizer crds --output-dir crds --output-dir charts/gpu-rightsizer/crds
gpu-rightsizer crds --check --output-dir crds         # exit 1 and name each file that drifted
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the `crds` options."""
    parser.add_argument(
        "--output-dir",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="write one YAML file per CRD into DIR (repeatable); without it, print to stdout",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a file in an --output-dir is missing or differs from the models",
    )


def run(args: argparse.Namespace) -> int:
    """Generate the CRDs and print, write or check them; returns the exit code."""
    from gpu_rightsizer.crdgen import render_all  # imported here: keeps `gpu-rightsizer --help` fast

    files = render_all()
    output_dirs: list[Path] = args.output_dir
    if args.check:
        if not output_dirs:
            print("crds --check needs at least one --output-dir to compare with", file=sys.stderr)
            return 2
        return _check(files, output_dirs)
    if not output_dirs:
        sys.stdout.write("".join(files.values()))
        return 0
    for directory in output_dirs:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            target = directory / name
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                target.write_text(text, encoding="utf-8")
                print(f"wrote {target}", file=sys.stderr)
    return 0


def _check(files: dict[str, str], output_dirs: list[Path]) -> int:
    drifted: list[str] = []
    for directory in output_dirs:
        for name, text in files.items():
            target = directory / name
            if not target.is_file():
                drifted.append(f"{target}: missing")
            elif target.read_text(encoding="utf-8") != text:
                drifted.append(f"{target}: differs from the models in gpu_rightsizer/model/crd.py")
    for line in drifted:
        print(f"drift: {line}", file=sys.stderr)
    if drifted:
        dirs = " ".join(f"--output-dir {d}" for d in output_dirs)
        print(f"regenerate with: gpu-rightsizer crds {dirs}", file=sys.stderr)
        return 1
    return 0
