"""gpu-rightsizer: diagnose why GPU workloads waste their GPUs, and right-size them."""

__version__ = "0.1.0"
