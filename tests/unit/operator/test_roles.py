"""The role chooses the wings: an actuator process registers no recommender watch, a recommender no
lease, and the shared startup runs before either wing's (it puts the context into kopf's memo)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, kopf
from gpu_rightsizer.commands.run import import_wings
from gpu_rightsizer.config import OperatorConfig
import_wings(OperatorConfig(role={role!r}))
registry = kopf.get_default_registry()
print(json.dumps({{
    "watched": sorted(h.id for h in registry._watching.get_all_handlers()),
    "activities": [h.id for h in registry._activities.get_all_handlers()],
}}))
"""


def registered(role: str) -> dict[str, list[str]]:
    """The kopf handlers a fresh process registers for `role` (a subprocess: the registry is global)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(role=role)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_an_actuator_process_registers_no_recommender_watch() -> None:
    found = registered("actuator")
    assert found["watched"] == []
    assert "recommender_startup" not in found["activities"]
    assert found["activities"].index("process_startup") < found["activities"].index("actuator_startup")


@pytest.mark.parametrize("role", ["recommender", "all"])
def test_a_recommending_process_watches_gpu_pods_and_their_owners(role: str) -> None:
    found = registered(role)
    assert any("gpu_pod_event" in handler for handler in found["watched"])
    assert sum(handler.startswith("owner-cache-") for handler in found["watched"]) == 6
    assert found["activities"].index("process_startup") < found["activities"].index("recommender_startup")
    assert ("actuator_startup" in found["activities"]) == (role == "all")
