"""Subcommands of the `gpu-rightsizer` CLI: each module has `add_arguments(parser)` and `run(args) -> int`."""
