"""The process: shared context, the operator's own metrics, and what both wings need at startup."""
