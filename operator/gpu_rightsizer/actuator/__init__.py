"""The actuator wing: status -> gates -> patch -> verify (SPEC §6)."""
