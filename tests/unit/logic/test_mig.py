"""MIG tables, product-label mapping, resource names and slice selection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_rightsizer.logic.mig import (
    GPU_MODELS,
    MigProfile,
    SliceNeed,
    device_plugin_profile_name,
    find_profile,
    is_mig_profile_name,
    mig_profile_of_resource,
    mig_request,
    mig_resource_name,
    model_key_for_product,
    nvlink_per_direction_bytes,
    nvml_profile_name,
    profiles_for,
    runtime_mig_table,
    same_profile,
    shared_request,
    smallest_fitting_profile,
    spec_for_product,
)
from gpu_rightsizer.logic.workloads import GPU_RESOURCE_PATTERN
from gpu_rightsizer.model.codes import SharingStrategy


@pytest.mark.parametrize(
    ("label", "key"),
    [
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "H100-80GB"),
        ("NVIDIA-H100-NVL", "H100-NVL"),
        ("NVIDIA-H200", "H200"),
        ("NVIDIA H200 NVL", "H200"),
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA-A100-PCIE-40GB-SHARED", "A100-40GB"),
        ("NVIDIA-A30", "A30"),
        ("NVIDIA-B200", "B200"),
        ("NVIDIA-GH200-480GB", None),
        ("NVIDIA-L4", None),
        ("", None),
        (None, None),
    ],
)
def test_product_labels_map_to_tables(label: str | None, key: str | None) -> None:
    assert model_key_for_product(label) == key


def test_tables_have_the_documented_shapes() -> None:
    for spec in GPU_MODELS.values():
        names = [p.name for p in spec.mig_profiles]
        assert len(names) == len(set(names)), spec.key
        full = [
            p for p in spec.mig_profiles if p.compute_slices == p.compute_total and not p.media_extensions
        ]
        assert len(full) == 1, spec.key
        for profile in spec.mig_profiles:
            assert profile.memory_gib <= spec.memory_gib
            assert profile.sms <= spec.sms
            assert 1 <= profile.memory_slices <= 8
    h100 = {p.name: p for p in GPU_MODELS["H100-80GB"].mig_profiles}
    assert (h100["1g.20gb"].sms, h100["3g.40gb"].sms, h100["7g.80gb"].sms) == (26, 60, 132)
    h200 = {p.name: p for p in GPU_MODELS["H200"].mig_profiles}
    assert h200["1g.18gb"].memory_gib == 16.0 and h200["1g.18gb"].max_instances == 7


def _pick(key: str, memory: float, sms: float, dram: float | None = None, **kw: object) -> str | None:
    profile = smallest_fitting_profile(
        GPU_MODELS[key].mig_profiles,
        SliceNeed(memory, sms, dram),
        memory_headroom=1.2,
        sm_target=0.8,
        dram_target=0.8,
        **kw,  # type: ignore[arg-type]
    )
    return profile.name if profile else None


def test_smallest_fitting_profile_follows_the_procedure() -> None:
    assert _pick("H100-80GB", 5.0, 5.0) == "1g.10gb"  # 6 GiB ≤ 9.75; 6.25 SMs ≤ 16
    assert _pick("H100-80GB", 8.5, 5.0) == "1g.20gb"  # 10.2 GiB > 9.75
    assert _pick("H100-80GB", 5.0, 18.0) == "1g.20gb"  # 22.5 SMs > 16, ≤ 26
    assert _pick("H100-80GB", 5.0, 40.0) == "3g.40gb"  # 50 SMs
    assert _pick("H100-80GB", 70.0, 5.0) is None  # 84 GiB > 79.25
    assert _pick("H200", 25.0, 10.0) == "1g.35gb"  # GenTD26-like ~25 GB pod
    assert _pick("A100-40GB", 3.0, 5.0) == "1g.5gb"


def test_dram_need_pushes_to_more_memory_slices() -> None:
    assert _pick("H100-80GB", 5.0, 5.0, dram=0.3) == "3g.40gb"  # 0.3 > 2/8 × 0.8, ≤ 4/8 × 0.8


def test_media_profiles_only_when_media_is_needed() -> None:
    need = SliceNeed(2.0, 2.0, None, needs_media=True)
    profile = smallest_fitting_profile(
        GPU_MODELS["A100-40GB"].mig_profiles, need, memory_headroom=1.2, sm_target=0.8, dram_target=0.8
    )
    assert profile is not None and profile.media_extensions
    assert _pick("A100-40GB", 2.0, 2.0) == "1g.5gb"


def test_runtime_table_overrides_the_static_one() -> None:
    runtime = [MigProfile("1g.18gb", 17.0, 16, 1, 1, 7), MigProfile("7g.141gb", 140.0, 132, 7, 8, 1)]
    spec = spec_for_product("NVIDIA-H200")
    assert profiles_for(spec, {"H200": runtime}) == tuple(runtime)
    assert profiles_for(spec, {"H100-80GB": runtime}) == spec.mig_profiles if spec else False
    assert profiles_for(None, None) == ()


def test_find_profile_accepts_resource_names() -> None:
    profiles = GPU_MODELS["H100-80GB"].mig_profiles
    assert find_profile(profiles, "nvidia.com/mig-3g.40gb") == find_profile(profiles, "3g.40gb")
    assert find_profile(profiles, "9g.1gb") is None


def test_resource_names_per_strategy() -> None:
    profile = find_profile(GPU_MODELS["H200"].mig_profiles, "1g.18gb")
    assert profile is not None
    mixed = mig_request(profile, SharingStrategy.MIG_MIXED, "NVIDIA-H200")
    assert (mixed.resource, mixed.node_selector) == ("nvidia.com/mig-1g.18gb", {})
    single = mig_request(profile, SharingStrategy.MIG_SINGLE, "NVIDIA-H200-MIG-3g.71gb")
    assert single.resource == "nvidia.com/gpu"
    assert single.node_selector["nvidia.com/gpu.product"] == "NVIDIA-H200-MIG-1g.18gb"
    assert single.node_selector["nvidia.com/mig.config"] == "all-1g.18gb"
    shared = shared_request(SharingStrategy.TIME_SLICING, 0.2)
    assert shared.resource == "nvidia.com/gpu.shared"
    assert "5 replicas" in shared.note


# --- names: the device plugin writes NVML's '+' as '.' (k8s-device-plugin internal/rm/rm.go) --------------
@pytest.mark.parametrize(
    ("nvml", "plugin"),
    [
        ("1g.10gb", "1g.10gb"),
        ("1g.10gb+me", "1g.10gb.me"),
        ("1g.24gb+gfx", "1g.24gb.gfx"),
        ("1g.24gb+me.all", "1g.24gb.me.all"),
        ("1g.24gb-me", "1g.24gb-me"),
        ("4g.96gb+gfx", "4g.96gb.gfx"),
    ],
)
def test_profile_names_convert_between_nvml_and_device_plugin_spellings(nvml: str, plugin: str) -> None:
    assert device_plugin_profile_name(nvml) == plugin
    assert nvml_profile_name(plugin) == nvml
    assert nvml_profile_name(nvml) == nvml
    assert mig_profile_of_resource(f"nvidia.com/mig-{plugin}") == plugin
    assert same_profile(nvml, plugin) and same_profile(f"nvidia.com/mig-{plugin}", nvml)
    assert is_mig_profile_name(nvml) and is_mig_profile_name(plugin)


def test_non_mig_names_are_not_profiles() -> None:
    assert mig_profile_of_resource("nvidia.com/gpu") is None
    assert mig_profile_of_resource("nvidia.com/gpu.shared") is None
    assert mig_profile_of_resource("nvidia.com/mig-big") is None
    assert not is_mig_profile_name("9g.10gb")
    assert not same_profile("1g.24gb-me", "1g.24gb+me")  # two different Blackwell profiles


def test_media_extension_profiles_are_found_and_emitted_in_device_plugin_spelling() -> None:
    profiles = GPU_MODELS["H100-80GB"].mig_profiles
    media = find_profile(profiles, "nvidia.com/mig-1g.10gb.me")
    assert media is not None and media.media_extensions
    assert find_profile(profiles, "1g.10gb+me") is media
    assert mig_resource_name(media) == "nvidia.com/mig-1g.10gb.me"
    single = mig_request(media, SharingStrategy.MIG_SINGLE, "NVIDIA-H100-80GB-HBM3")
    assert single.node_selector == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me",  # GFD: MigDevice.GetName()
        "nvidia.com/mig.config": "all-1g.10gb.me",  # mig-parted's config name
    }
    for model in GPU_MODELS.values():
        for profile in model.mig_profiles:
            assert "+" not in mig_resource_name(profile)
            assert GPU_RESOURCE_PATTERN.match(mig_resource_name(profile)), profile.name


def test_allowed_profiles_in_device_plugin_spelling_admit_the_media_profile() -> None:
    need = SliceNeed(2.0, 2.0, None, needs_media=True)
    profile = smallest_fitting_profile(
        GPU_MODELS["A100-40GB"].mig_profiles,
        need,
        memory_headroom=1.2,
        sm_target=0.8,
        dram_target=0.8,
        allowed=["1g.5gb.me"],
    )
    assert profile is not None and mig_resource_name(profile) == "nvidia.com/mig-1g.5gb.me"


@given(
    compute=st.integers(1, 7),
    memory=st.integers(1, 999),
    suffix=st.lists(st.sampled_from(["me", "gfx", "all", "x1"]), max_size=3),
    joiner=st.sampled_from(["+", "-"]),
)
def test_profile_spellings_round_trip(compute: int, memory: int, suffix: list[str], joiner: str) -> None:
    """NVML name → device-plugin name → NVML name, and the resource name is always one Kubernetes accepts."""
    nvml = f"{compute}g.{memory}gb" + (joiner + ".".join(suffix) if suffix else "")
    plugin = device_plugin_profile_name(nvml)
    assert "+" not in plugin
    assert nvml_profile_name(plugin) == nvml
    assert same_profile(nvml, plugin)
    assert GPU_RESOURCE_PATTERN.match(f"nvidia.com/mig-{plugin}")
    assert mig_profile_of_resource(f"nvidia.com/mig-{plugin}") == plugin


def test_a30_is_counted_in_quarters_with_nvml_memory() -> None:
    """A30 slices are quarters (MIG guide) and hold at most NVML's MiB (5836 / 11672 / 23344)."""
    a30 = {p.name: p for p in GPU_MODELS["A30"].mig_profiles}
    assert a30["1g.6gb"].gpu_fraction == 0.25
    assert a30["2g.12gb"].gpu_fraction == 0.5
    for name, mib in (("1g.6gb", 5836), ("2g.12gb", 11672), ("4g.24gb", 23344)):
        assert a30[name].memory_gib * 1024 <= mib


@pytest.mark.parametrize(
    ("label", "key", "sms", "nvlink_per_direction"),
    [
        ("NVIDIA-H100-PCIe", "H100-PCIe", 114, 300e9),
        ("NVIDIA H800", "H800", 132, 200e9),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB", 132, 450e9),
        ("NVIDIA-H200", "H200", 132, 450e9),
    ],
)
def test_h100_pcie_and_h800_have_their_own_figures(
    label: str, key: str, sms: int, nvlink_per_direction: float
) -> None:
    assert model_key_for_product(label) == key
    assert GPU_MODELS[key].sms == sms
    assert nvlink_per_direction_bytes(label) == nvlink_per_direction


def test_gb200_nvlink_is_nvlink_5_not_a_fallback() -> None:
    assert nvlink_per_direction_bytes("NVIDIA-GB200") == 900e9
    assert nvlink_per_direction_bytes("some-unknown-gpu") is None


def test_runtime_table_replaces_the_static_one_with_nvml_figures() -> None:
    spec = GPU_MODELS["B200"]
    rows = [
        {"profile": "1g.23gb", "memory_mib": "23040", "multiprocessors": "18", "max_instances": "7"},
        {"profile": "7g.180gb", "memory_mib": "182784", "multiprocessors": "148", "max_instances": "1"},
        {"profile": "broken", "memory_mib": "x", "multiprocessors": "1", "max_instances": "1"},
    ]
    table = runtime_mig_table(spec, rows)
    by_name = {p.name: p for p in table}
    assert set(by_name) == {"1g.23gb", "7g.180gb"}
    assert by_name["7g.180gb"].sms == 148 and not by_name["7g.180gb"].sms_estimated
    assert profiles_for(spec, {"B200": table}) == table
    assert profiles_for(spec, {"B200": ()}) == spec.mig_profiles
