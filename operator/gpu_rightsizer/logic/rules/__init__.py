"""The diagnosis rules' registry: one entry per diagnosis code, in primary (severity-first) order."""
