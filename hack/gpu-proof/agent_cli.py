"""Start `gpu-rightsizer <args>` from a source checkout (no install needed on the GPU machine)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "operator"))

if __name__ == "__main__":
    if os.environ.get("GPU_PROOF_CPU"):  # pin the agent to its own core, away from the workloads
        os.sched_setaffinity(0, [int(os.environ["GPU_PROOF_CPU"])])
    try:
        from gpu_rightsizer.cli import main

        sys.exit(main(sys.argv[1:]))
    except ImportError:  # a subcommand module missing in this checkout: run the agent alone
        from gpu_rightsizer.commands import agent

        parser = argparse.ArgumentParser(prog="gpu-rightsizer agent")
        agent.add_arguments(parser)
        sys.exit(agent.run(parser.parse_args(sys.argv[2:])))
