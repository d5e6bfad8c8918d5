"""Print what NVML offers on this machine (GPM, MIG table, processes) through the agent's adapter."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "operator"))

from gpu_rightsizer.adapters.nvml import NvmlCallError, PynvmlLibrary
from gpu_rightsizer.agent.sampler import NvmlSampler

nvml = PynvmlLibrary()
sampler = NvmlSampler(nvml)
for _ in range(3):
    snapshot = sampler.sample()
    time.sleep(0.5)
print("driver", snapshot.driver_version, "up", snapshot.nvml_up, "errors", dict(sampler.errors))
for device in snapshot.devices:
    print(device.index, device.uuid, device.model_name, device.pci_bus_id, device.mig_profile)
    for key, value in sorted(device.values.items()):
        print(f"  {key.value:24s} {value:.4g}")
    print("  processes", device.processes)
for uuid, table in sampler.mig_profiles.items():
    for p in table:
        print("  mig", uuid[:12], p)
try:
    print("mig mode", nvml.mig_mode(nvml.device_handle(0)))
except NvmlCallError as exc:
    print("mig mode error", exc.kind, exc)
sampler.close()
