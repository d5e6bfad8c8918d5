"""Compute-instance MIG profiles (`mig-1c.3g.20gb`: one of three compute instances of a 3g.20gb GPU
instance, go-nvlib mig_profile.go) are MIG resources like any other."""

from __future__ import annotations

import re

import pytest

from gpu_rightsizer.logic.mig import is_mig_profile_name, nvml_profile_name
from gpu_rightsizer.logic.workloads import GPU_RESOURCE_PATTERN
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.crd import MIG_PROFILE_PATTERN


@pytest.mark.parametrize("profile", ["1c.3g.20gb", "2c.3g.20gb", "1c.7g.80gb", "1c.2g.24gb.me"])
def test_compute_instance_profiles_are_mig_names(profile: str) -> None:
    assert GPU_RESOURCE_PATTERN.match(f"nvidia.com/mig-{profile}")
    assert re.fullmatch(MIG_PROFILE_PATTERN, profile)
    assert is_mig_profile_name(profile) and is_mig_profile_name(f"nvidia.com/mig-{profile}")
    sanitised = f"nvidia_com_mig_{profile.replace('.', '_')}"
    assert mn.resource_from_ksm(sanitised) == f"nvidia.com/mig-{profile}"


def test_the_compute_instance_prefix_does_not_break_nvml_spelling() -> None:
    assert nvml_profile_name("1c.2g.24gb.me") == "1c.2g.24gb+me"
    assert not GPU_RESOURCE_PATTERN.match("nvidia.com/mig-8c.3g.20gb")
