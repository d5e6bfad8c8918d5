"""`gpu-rightsizer` command line: one entry point, one module per subcommand.

Only the chosen subcommand's module is imported, and it keeps heavy imports inside `run`, so
`gpu-rightsizer analyze` does not pay for kopf and `agent` does not need the Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: subcommand -> (module under gpu_rightsizer.commands, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run the operator (recommender, and the actuator when enabled)"),
    "analyze": ("analyze", "one-shot report from Prometheus or an OpenMetrics file"),
    "explain": ("explain", "one workload's findings, evidence, vetoes and sparklines in the terminal"),
    "agent": ("agent", "NVML node agent exporting dcgm-exporter-compatible metrics"),
    "demo": ("demo", "local cluster with simulated GPU workloads and the operator"),
    "crds": ("crds", "print or write the CustomResourceDefinitions"),
    "cluster": ("cluster", "bring the local test cluster up or down"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the chosen subcommand's module is imported to add its arguments."""
    parser = argparse.ArgumentParser(
        prog="gpu-rightsizer",
        description="Find out why GPU workloads waste their GPUs, and fix it.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if name != command:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(f"gpu_rightsizer.commands.{module_name}")
        sub_parser = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the chosen subcommand; returns the process exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in arguments if not a.startswith("-")), None)
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(arguments)
    try:
        return int(args._module.run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
