"""GPU models, their MIG profile tables, Kubernetes resource names and slice selection.

Tables come from the NVIDIA MIG user guide ("Supported MIG Profiles") plus published `nvidia-smi mig -lgip` outputs. Where a
source gives a range of GiB, the lower bound is used so a chosen slice really holds the workload. SM
counts marked `sms_estimated` were not found in the sources (B200 3g/4g/7g) and are estimates; a runtime
NVML table (`nvmlDeviceGetGpuInstanceProfileInfo`) passed as an override replaces the static one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpu_rightsizer.model.codes import SharingStrategy

GIB_PER_MIB = 1.0 / 1024.0


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG GPU-instance profile of one GPU model."""

    name: str  # e.g. "1g.10gb" (no "+me": media-extension variants carry `media_extensions`)
    memory_gib: float
    sms: int
    compute_slices: int  # of `compute_total` (7; 4 on A30)
    memory_slices: int  # of 8
    max_instances: int
    media_extensions: bool = False
    sms_estimated: bool = False
    compute_total: int = 7  # compute slices of the whole GPU: 7, or 4 on A30

    @property
    def compute_fraction(self) -> float:
        """Share of the GPU's compute slices."""
        return self.compute_slices / self.compute_total

    @property
    def memory_fraction(self) -> float:
        """Share of the GPU's memory (and DRAM bandwidth: it scales with memory slices: NVIDIA MIG blog)."""
        return self.memory_slices / 8.0

    @property
    def gpu_fraction(self) -> float:
        """Share of a GPU the slice takes out of service for others: the scarcer of compute and memory."""
        return max(self.compute_fraction, self.memory_fraction)


@dataclass(frozen=True, slots=True)
class GPUModelSpec:
    """Figures of one GPU model the rules need: full SM count, memory, link capacities, MIG table."""

    key: str
    display_name: str
    sms: int
    memory_gib: float
    pcie_bytes_per_s: float  # one direction, x16 at the model's PCIe generation
    nvlink_bytes_per_s: float | None  # nominal bidirectional NVLink bandwidth; None = no NVLink
    mig_profiles: tuple[MigProfile, ...] = field(default_factory=tuple)
    has_tensor_cores: bool = True

    @property
    def mig_capable(self) -> bool:
        """True when the model has a MIG table."""
        return bool(self.mig_profiles)


def _p(
    name: str,
    memory_gib: float,
    sms: int,
    compute: int,
    memory: int,
    max_instances: int,
    *,
    media: bool = False,
    estimated: bool = False,
    compute_total: int = 7,
) -> MigProfile:
    return MigProfile(name, memory_gib, sms, compute, memory, max_instances, media, estimated, compute_total)


_PCIE_GEN4_X16 = 16 * 1.97e9  # ≈1.97 GB/s per lane per direction (Gen4)
_PCIE_GEN5_X16 = 16 * 3.94e9  # ≈3.94 GB/s per lane per direction (Gen5)

A100_40GB = GPUModelSpec(
    "A100-40GB",
    "NVIDIA A100 40GB",
    108,
    40.0,
    _PCIE_GEN4_X16,
    600e9,
    (
        _p("1g.5gb", 4.75, 14, 1, 1, 7),
        _p("1g.5gb+me", 4.75, 14, 1, 1, 1, media=True),
        _p("1g.10gb", 9.5, 14, 1, 2, 4),
        _p("2g.10gb", 9.5, 28, 2, 2, 3),
        _p("3g.20gb", 19.5, 42, 3, 4, 2),
        _p("4g.20gb", 19.5, 56, 4, 4, 1),
        _p("7g.40gb", 39.25, 98, 7, 8, 1),
    ),
)
A100_80GB = GPUModelSpec(
    "A100-80GB",
    "NVIDIA A100 80GB",
    108,
    80.0,
    _PCIE_GEN4_X16,
    600e9,
    (
        _p("1g.10gb", 9.5, 14, 1, 1, 7),
        _p("1g.10gb+me", 9.5, 14, 1, 1, 1, media=True),
        _p("1g.20gb", 19.5, 14, 1, 2, 4),
        _p("2g.20gb", 19.5, 28, 2, 2, 3),
        _p("3g.40gb", 39.25, 42, 3, 4, 2),
        _p("4g.40gb", 39.25, 56, 4, 4, 1),
        _p("7g.80gb", 78.5, 98, 7, 8, 1),
    ),
)
# A30: four compute slices and four memory slices (MIG user guide: 1g = 1/4, 2g = 2/4, 4g = 4/4);
# memory is kept in eighths (2 per quarter) so `memory_fraction` stays comparable, compute in quarters.
# GiB are NVML's figures (5836 / 11672 / 23344 MiB, NVIDIA/go-nvml mock a30.go), rounded down.
A30 = GPUModelSpec(
    "A30",
    "NVIDIA A30",
    56,
    24.0,
    _PCIE_GEN4_X16,
    200e9,
    (
        _p("1g.6gb", 5.69, 14, 1, 2, 4, compute_total=4),
        _p("1g.6gb+me", 5.69, 14, 1, 2, 1, media=True, compute_total=4),
        _p("2g.12gb", 11.39, 28, 2, 4, 2, compute_total=4),
        _p("2g.12gb+me", 11.39, 28, 2, 4, 1, media=True, compute_total=4),
        _p("4g.24gb", 22.79, 56, 4, 8, 1, compute_total=4),
    ),
)
H100_80GB = GPUModelSpec(
    "H100-80GB",
    "NVIDIA H100 80GB",
    132,
    80.0,
    _PCIE_GEN5_X16,
    900e9,
    (
        _p("1g.10gb", 9.75, 16, 1, 1, 7),
        _p("1g.10gb+me", 9.75, 16, 1, 1, 1, media=True),
        _p("1g.20gb", 19.62, 26, 1, 2, 4),
        _p("2g.20gb", 19.62, 32, 2, 2, 3),
        _p("3g.40gb", 39.5, 60, 3, 4, 2),
        _p("4g.40gb", 39.5, 64, 4, 4, 1),
        _p("7g.80gb", 79.25, 132, 7, 8, 1),
    ),
)


def _scaled_sms(spec_profiles: tuple[MigProfile, ...], sms: int, full_sms: int) -> tuple[MigProfile, ...]:
    """Another SKU of the same die: same slices and memory, SM counts scaled and marked as estimates."""
    return tuple(
        MigProfile(
            p.name,
            p.memory_gib,
            sms if p.compute_slices == p.compute_total else math.floor(p.sms * sms / full_sms),
            p.compute_slices,
            p.memory_slices,
            p.max_instances,
            p.media_extensions,
            True,
            p.compute_total,
        )
        for p in spec_profiles
    )


# H100 PCIe: 114 SMs (NVIDIA H100 datasheet), NVLink bridge 600 GB/s. Per-profile SM counts were not
# found in a source: scaled from the SXM table and marked estimated (never an automatic change).
H100_PCIE = GPUModelSpec(
    "H100-PCIe",
    "NVIDIA H100 PCIe 80GB",
    114,
    80.0,
    _PCIE_GEN5_X16,
    600e9,
    _scaled_sms(H100_80GB.mig_profiles, 114, 132),
)
# H800 SXM: the H100 SXM die with NVLink cut to 400 GB/s (NVIDIA H800 product brief). MIG SM counts
# are assumed equal to H100 SXM but not verified: estimated.
H800 = GPUModelSpec(
    "H800",
    "NVIDIA H800 80GB",
    132,
    80.0,
    _PCIE_GEN5_X16,
    400e9,
    _scaled_sms(H100_80GB.mig_profiles, 132, 132),
)
H100_NVL = GPUModelSpec(
    "H100-NVL",
    "NVIDIA H100 NVL 94GB",
    132,
    94.0,
    _PCIE_GEN5_X16,
    600e9,
    (
        _p("1g.12gb", 10.75, 16, 1, 1, 7),
        _p("1g.12gb+me", 10.75, 16, 1, 1, 1, media=True),
        _p("1g.24gb", 21.62, 26, 1, 2, 4),
        _p("2g.24gb", 21.62, 32, 2, 2, 3),
        _p("3g.47gb", 46.38, 60, 3, 4, 2, estimated=True),
        _p("4g.47gb", 46.38, 64, 4, 4, 1, estimated=True),
        _p("7g.94gb", 93.12, 132, 7, 8, 1),
    ),
)
H200 = GPUModelSpec(
    "H200",
    "NVIDIA H200 141GB",
    132,
    141.0,
    _PCIE_GEN5_X16,
    900e9,
    (
        _p("1g.18gb", 16.0, 16, 1, 1, 7),
        _p("1g.18gb+me", 16.0, 16, 1, 1, 1, media=True),
        _p("1g.35gb", 32.25, 26, 1, 2, 4),
        _p("2g.35gb", 32.25, 32, 2, 2, 3),
        _p("3g.71gb", 69.5, 60, 3, 4, 2),
        _p("4g.71gb", 69.5, 64, 4, 4, 1),
        _p("7g.141gb", 140.0, 132, 7, 8, 1),
    ),
)
# B200: only 1g.23gb's 18 SMs are confirmed (MIG guide fractions; go-nvml's mock agrees but mocks are
# not sources). 1g.45gb/2g.45gb SMs and the 3g/4g/7g rows (7g may well have all 148 SMs) are estimates:
# advice only, never an automatic change. Prefer the runtime NVML table.
B200 = GPUModelSpec(
    "B200",
    "NVIDIA B200 180GB",
    148,
    180.0,
    _PCIE_GEN5_X16,
    1800e9,
    (
        _p("1g.23gb", 20.5, 18, 1, 1, 7),
        _p("1g.23gb+me", 20.5, 18, 1, 1, 1, media=True),
        _p("1g.45gb", 44.25, 30, 1, 2, 4, estimated=True),
        _p("2g.45gb", 44.25, 36, 2, 2, 3, estimated=True),
        _p("3g.90gb", 88.5, 54, 3, 4, 2, estimated=True),
        _p("4g.90gb", 88.5, 72, 4, 4, 1, estimated=True),
        _p("7g.180gb", 177.0, 126, 7, 8, 1, estimated=True),
    ),
)

GPU_MODELS: dict[str, GPUModelSpec] = {
    spec.key: spec for spec in (A100_40GB, A100_80GB, A30, H100_80GB, H100_PCIE, H800, H100_NVL, H200, B200)
}

#: Bigger-memory upgrade path for memory-capacity-bound work (rule R9: 80 → 141/180 GB).
MEMORY_UPGRADE_PATH: tuple[str, ...] = (
    "A30",
    "A100-40GB",
    "A100-80GB",
    "H100-80GB",
    "H100-NVL",
    "H200",
    "B200",
)

#: Higher-bandwidth upgrade path for memory-bandwidth-bound work (rule R6: A100 → H100 → H200/B200).
BANDWIDTH_UPGRADE_PATH: tuple[str, ...] = (
    "A30",
    "A100-40GB",
    "A100-80GB",
    "H100-80GB",
    "H100-NVL",
    "H200",
    "B200",
)

_PRE_VOLTA = re.compile(r"(?:^|-)(K80|K40|M60|M40|M4|P100|P40|P4|GTX)(?:-|$)")


def normalise_product(label: str) -> str:
    """GFD product label or DCGM modelName → upper-case dash form without vendor, MIG or sharing suffixes.

    'NVIDIA-H100-80GB-HBM3-MIG-1g.10gb' and 'NVIDIA H100 80GB HBM3' both become 'H100-80GB-HBM3'.
    """
    text = re.sub(r"[\s_]+", "-", label.strip()).upper()
    text = re.sub(r"-MIG-.*$", "", text)
    text = re.sub(r"-SHARED$", "", text)
    text = re.sub(r"^(NVIDIA-|TESLA-)+", "", text)
    return text


def model_key_for_product(label: str | None) -> str | None:
    """Map a GFD product label / DCGM modelName to a key of `GPU_MODELS`, or None when unknown."""
    if not label:
        return None
    text = normalise_product(label)
    if re.search(r"(?:^|-)G[BH]\d", text):  # GH200/GB200 superchips: different tables, not modelled here
        return None
    if "A100" in text:
        return "A100-80GB" if "80GB" in text else "A100-40GB"
    if re.search(r"(?:^|-)A30(?:-|$)", text):
        return "A30"
    if "H800" in text:
        return "H100-PCIe" if "PCIE" in text else "H800"
    if "H100" in text:
        if "NVL" in text or "94GB" in text:
            return "H100-NVL"
        return "H100-PCIe" if "PCIE" in text else "H100-80GB"
    if "H200" in text:
        return "H200"
    if "B200" in text:
        return "B200"
    return None


#: NVLink bandwidth per GPU and direction (bytes/s) by product family, for models with or without a MIG
#: table. NVLink 3 (A100): 12 links × 25 GB/s; NVLink 4 (H100 SXM, H200, GH200): 18 × 25 GB/s; H100 NVL /
#: H100 PCIe bridge: 600 GB/s bidirectional; H800: 400 GB/s; A30 bridge: 200 GB/s; NVLink 5 (B200,
#: GB200): 18 × 50 GB/s. Sources: NVIDIA A100/H100/H200/B200 datasheets and product briefs.
_NVLINK_PER_DIRECTION: tuple[tuple[str, float], ...] = (
    (r"(?:^|-)GB\d", 900e9),
    (r"(?:^|-)GH\d", 450e9),
    (r"(?:^|-)B\d", 900e9),
    (r"H800", 200e9),
    (r"H100.*(?:NVL|94GB|PCIE)", 300e9),
    (r"H100|H200", 450e9),
    (r"A100", 300e9),
    (r"(?:^|-)A30(?:-|$)", 100e9),
)
#: Per-direction nominal assumed when the model is unknown (NVLink 4); findings say it was assumed.
NVLINK_FALLBACK_PER_DIRECTION = 450e9


def nvlink_per_direction_bytes(label: str | None) -> float | None:
    """Nominal NVLink bandwidth per direction of a GPU product (bytes/s), or None when unknown."""
    if not label:
        return None
    text = normalise_product(label)
    for pattern, value in _NVLINK_PER_DIRECTION:
        if re.search(pattern, text):
            return value
    return None


def spec_for_product(label: str | None) -> GPUModelSpec | None:
    """GPU model figures for a product label, or None when the model is not in the tables."""
    key = model_key_for_product(label)
    return GPU_MODELS.get(key) if key else None


def is_pre_volta(label: str | None) -> bool:
    """True for GPUs without tensor cores or profiling fields (K80, M60, P100, ...)."""
    return bool(label) and bool(_PRE_VOLTA.search(normalise_product(label or "")))


MigTables = Mapping[str, Sequence[MigProfile]]


def profiles_for(spec: GPUModelSpec | None, overrides: MigTables | None = None) -> tuple[MigProfile, ...]:
    """The MIG table of a model: a runtime (NVML) table from `overrides` replaces the static one."""
    if spec is None:
        return ()
    if overrides and spec.key in overrides and overrides[spec.key]:
        return tuple(overrides[spec.key])
    return spec.mig_profiles


#: Prefix of the MIG extended resources the device plugin advertises under the mixed strategy.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
#: A MIG profile in either spelling: NVML/mig-parted ('1g.10gb+me', '1g.24gb+me.all', '1g.24gb+gfx',
#: '1g.24gb-me') or the device plugin's, which writes every '+' as '.' ('1g.10gb.me', '1g.24gb.me.all').
_PROFILE_SPELLING = re.compile(
    r"^(?P<base>(?:[1-7]c\.)?[1-7]g\.[0-9]+gb)(?P<suffix>(?:[.+-][a-z][a-z0-9]*)*)$"
)  # a compute-instance profile ('1c.3g.20gb', go-nvlib mig_profile.go) has its CI count first


def device_plugin_profile_name(name: str) -> str:
    """A MIG profile as the device plugin spells it in resource names, product labels and mig-parted
    config names: '+' becomes '.' (k8s-device-plugin internal/rm/rm.go, nvml-mig-device.go GetName).

    '1g.10gb+me' → '1g.10gb.me'; '1g.24gb+me.all' → '1g.24gb.me.all'; '1g.24gb-me' stays. Tolerates a
    'nvidia.com/mig-' prefix and upper case.
    """
    return name.strip().lower().removeprefix(MIG_RESOURCE_PREFIX).replace("+", ".")


def nvml_profile_name(name: str) -> str:
    """A MIG profile as NVML and the MIG tables spell it: the first '.' after the memory size is '+'.

    '1g.10gb.me' → '1g.10gb+me'; '1g.24gb.me.all' → '1g.24gb+me.all'; '1g.24gb-me' and '1g.10gb' stay.
    """
    plugin = device_plugin_profile_name(name)
    match = _PROFILE_SPELLING.match(plugin)
    if match is None or not match["suffix"].startswith("."):
        return plugin
    return f"{match['base']}+{match['suffix'][1:]}"


def is_mig_profile_name(name: str) -> bool:
    """True for a MIG profile name in either spelling ('1g.10gb', '1g.10gb.me', '1g.10gb+me', '1g.24gb-me')."""
    return _PROFILE_SPELLING.match(name.strip().lower().removeprefix(MIG_RESOURCE_PREFIX)) is not None


def mig_profile_of_resource(resource: str) -> str | None:
    """The profile (device plugin spelling) of a MIG extended resource, or None for any other resource."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    profile = device_plugin_profile_name(resource)
    return profile if is_mig_profile_name(profile) else None


def same_profile(a: str, b: str) -> bool:
    """True when two names, in any spelling, are the same MIG profile."""
    return device_plugin_profile_name(a) == device_plugin_profile_name(b)


_PROFILE_NAME = re.compile(r"^(?P<compute>\d+)g\.(?P<memory>\d+)gb(?P<media>\+me)?", re.IGNORECASE)


def runtime_mig_table(
    spec: GPUModelSpec, rows: Sequence[Mapping[str, str]], *, total_memory_mib: float | None = None
) -> tuple[MigProfile, ...]:
    """A MIG table from NVML's profile rows (the agent's `gpu_rightsizer_agent_mig_profile_info` labels).

    Each row needs `profile`, `memory_mib`, `multiprocessors` and `max_instances`. SM counts and memory
    are NVML's own (not estimates); slice counts come from the static row of the same name, else from
    the name's compute slices and the memory share. Rows that do not parse are skipped.
    """
    static = {p.name.lower(): p for p in spec.mig_profiles}
    compute_total = max((p.compute_total for p in spec.mig_profiles), default=7)
    total_mib = total_memory_mib or spec.memory_gib * 1024
    table: list[MigProfile] = []
    for row in rows:
        name = nvml_profile_name(str(row.get("profile", "")))
        match = _PROFILE_NAME.match(name)
        try:
            memory_mib = float(row["memory_mib"])
            sms = int(float(row["multiprocessors"]))
            instances = int(float(row["max_instances"]))
        except (KeyError, ValueError):
            continue
        if match is None or memory_mib <= 0 or sms <= 0:
            continue
        known = static.get(name)
        compute = known.compute_slices if known else int(match["compute"])
        memory_slices = known.memory_slices if known else max(1, min(8, round(memory_mib / total_mib * 8)))
        table.append(
            MigProfile(
                name,
                math.floor(memory_mib * GIB_PER_MIB * 100) / 100,
                sms,
                compute,
                memory_slices,
                instances,
                bool(match["media"]),
                False,
                known.compute_total if known else compute_total,
            )
        )
    return tuple(sorted(table, key=lambda p: (p.gpu_fraction, p.memory_gib, p.name)))


def find_profile(profiles: Sequence[MigProfile], name: str | None) -> MigProfile | None:
    """Profile by name in either spelling ('1g.10gb.me', '1g.10gb+me', 'nvidia.com/mig-1g.10gb.me'), or None."""
    if not name:
        return None
    for profile in profiles:
        if same_profile(profile.name, name):
            return profile
    return None


@dataclass(frozen=True, slots=True)
class SliceNeed:
    """What a workload needs from one GPU, measured on what it has now."""

    memory_gib: float  # p99 used GiB (before headroom)
    sm_equivalents: float  # p95(SM_ACTIVE) × SMs of the current device
    dram_fraction_of_full_gpu: float | None  # p95(DRAM_ACTIVE) scaled to the full GPU's bandwidth
    needs_media: bool = False


def smallest_fitting_profile(
    profiles: Sequence[MigProfile],
    need: SliceNeed,
    *,
    memory_headroom: float,
    sm_target: float,
    dram_target: float,
    allowed: Sequence[str] | None = None,
) -> MigProfile | None:
    """Smallest profile P with mem(P) ≥ headroom × need, SMs(P) ≥ SM need / target, DRAM need fits.

    docs/diagnosis.md, slice selection: mem(P) ≥ 1.2 × p99 used; SMs(P) ≥ p95(sm_active) × SMs_full / 0.8;
    dram_need ≤ mem_fraction(P) × 0.8. '+me' profiles are chosen only when media engines are needed.
    "Smallest" = least share of the GPU, then least memory, then fewest SMs, then name (deterministic).
    """
    required_memory = need.memory_gib * memory_headroom
    required_sms = need.sm_equivalents / sm_target
    allowed_names = {device_plugin_profile_name(name) for name in allowed} if allowed else None
    candidates = []
    for profile in profiles:
        if profile.media_extensions != need.needs_media and not (
            need.needs_media and profile.compute_slices == profile.compute_total
        ):
            continue
        if allowed_names is not None and device_plugin_profile_name(profile.name) not in allowed_names:
            continue
        if profile.memory_gib < required_memory or profile.sms < required_sms:
            continue
        if (
            need.dram_fraction_of_full_gpu is not None
            and need.dram_fraction_of_full_gpu > profile.memory_fraction * dram_target
        ):
            continue
        candidates.append(profile)
    if not candidates:
        return None
    return min(candidates, key=lambda p: (p.gpu_fraction, p.memory_gib, p.sms, p.name))


def full_gpu_profile(profiles: Sequence[MigProfile]) -> MigProfile | None:
    """The 7g profile (the whole GPU under MIG)."""
    full = [p for p in profiles if p.compute_slices >= p.compute_total and not p.media_extensions]
    return max(full, key=lambda p: p.memory_gib) if full else None


def mig_resource_name(profile: MigProfile) -> str:
    """Extended resource of a profile under the 'mixed' strategy, e.g. nvidia.com/mig-1g.18gb or
    nvidia.com/mig-1g.18gb.me: the device plugin never advertises a '+' (nor may a resource name hold one)."""
    return f"{MIG_RESOURCE_PREFIX}{device_plugin_profile_name(profile.name)}"


@dataclass(frozen=True, slots=True)
class ResourceRequest:
    """How a pod asks for a GPU (slice) under a sharing strategy."""

    resource: str
    count: int
    node_selector: dict[str, str] = field(default_factory=dict)
    note: str = ""

    def describe(self) -> str:
        """Human-readable form used in Action.to_value."""
        text = f"{self.resource}: {self.count}"
        if self.node_selector:
            selectors = ", ".join(f"{key}={value}" for key, value in sorted(self.node_selector.items()))
            text += f" (nodeSelector {selectors})"
        if self.note:
            text += f" ({self.note})"
        return text


def mig_request(profile: MigProfile, strategy: SharingStrategy, product_label: str | None) -> ResourceRequest:
    """Resource request for a MIG slice under mig-mixed (own resource) or mig-single (node selector)."""
    if strategy is SharingStrategy.MIG_SINGLE:
        product = product_label or "<gpu.product>"
        product = re.sub(r"-MIG-.*$", "", product)
        return ResourceRequest(
            "nvidia.com/gpu",
            1,
            {
                "nvidia.com/gpu.product": f"{product}-MIG-{device_plugin_profile_name(profile.name)}",
                "nvidia.com/mig.config": f"all-{device_plugin_profile_name(profile.name)}",
            },
            "mig-single: every GPU of the node carries this profile",
        )
    return ResourceRequest(mig_resource_name(profile), 1)


def shared_request(
    strategy: SharingStrategy, gpu_share: float, product_label: str | None = None
) -> ResourceRequest:
    """Resource request for a time-sliced or MPS share of one GPU.

    The replica count is how many such pods one GPU can host at the observed need (at most 1/share).
    Time-slicing isolates neither memory nor faults; MPS gives each client 1/replicas of memory.
    `nvidia.com/gpu.shared` exists only where the device plugin renames shares (`renameByDefault:
    true`); on its default (`time-slicing-no-rename`) a share is `nvidia.com/gpu` on a node whose
    product label ends in `-SHARED`, so the request selects that product.
    """
    replicas = max(2, min(16, math.floor(1.0 / max(gpu_share, 1e-6))))
    kind = "MPS" if strategy is SharingStrategy.MPS else "time-slicing"
    note = f"{kind}, up to {replicas} replicas per GPU; about {gpu_share:.0%} of a GPU"
    if strategy is SharingStrategy.TIME_SLICING_NO_RENAME:
        product = re.sub(r"-(MIG-.*|SHARED)$", "", product_label or "<gpu.product>")
        return ResourceRequest("nvidia.com/gpu", 1, {"nvidia.com/gpu.product": f"{product}-SHARED"}, note)
    return ResourceRequest("nvidia.com/gpu.shared", 1, {}, note)
