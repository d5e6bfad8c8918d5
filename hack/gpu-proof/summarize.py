"""Figures of each recorded fixture, merged with run_proof.py's throughput into summary.json.

For each fixture: busy (GR_ENGINE_ACTIVE), SM active, tensor, DRAM, PCIe RX/TX, GPU memory, container
CPU, the busiest process's CPU (the agent's per-process figure) and the workload's own steps/s. The
result goes under `--key` (default `calibration`) in tests/fixtures/h200/summary.json, next to the older
entries.

Run: python hack/gpu-proof/summarize.py FIXTURES_DIR RUN_SUMMARY.json [RUN_SUMMARY.json ...] [--key K]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "operator"))

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.agent.process_cpu import PROCESS_CPU_MAX
from gpu_rightsizer.model.observation import Signal

GPU_SIGNALS = {
    "busy": Signal.GR_ENGINE_ACTIVE,
    "sm_active": Signal.SM_ACTIVE,
    "sm_occupancy": Signal.SM_OCCUPANCY,
    "tensor": Signal.TENSOR_ACTIVE,
    "fp32": Signal.FP32_ACTIVE,
    "dram": Signal.DRAM_ACTIVE,
    "gpu_util": Signal.GPU_UTIL,
    "pcie_rx_bytes_per_s": Signal.PCIE_RX_BYTES_PER_S,
    "pcie_tx_bytes_per_s": Signal.PCIE_TX_BYTES_PER_S,
    "fb_used_mib": Signal.FB_USED_MIB,
}


def figures(fixture: Path) -> dict[str, object]:
    """p50/p95/mean of the GPU and CPU signals of one gzipped recording."""
    text = gzip.decompress(fixture.read_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / fixture.name.removesuffix(".gz")
        path.write_bytes(text)
        (window,) = read_openmetrics(path)
    pod = window.pods[0]
    stats = pod.gpus[0].stats
    out: dict[str, object] = {"samples": stats[Signal.GR_ENGINE_ACTIVE].samples}
    for name, signal in GPU_SIGNALS.items():
        if signal in stats:
            s = stats[signal]
            out[name] = {"p50": s.p50, "p95": s.p95, "mean": s.mean, "max": s.max}
    cpu = pod.stats[Signal.CPU_USAGE_CORES]
    out["cpu_cores"] = {"p50": cpu.p50, "p95": cpu.p95, "mean": cpu.mean, "max": cpu.max}
    busiest = [
        s.value
        for family in text_string_to_metric_families(text.decode())
        if family.name == PROCESS_CPU_MAX
        for s in family.samples
    ]
    if busiest:
        out["busiest_process_cores"] = {"p50": statistics.median(busiest), "max": max(busiest)}
    out["cpu_limit_cores"] = window.allocation.cpu_limit_cores
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("fixtures", type=Path)
    parser.add_argument("runs", type=Path, nargs="+", help="summary.json files written by run_proof.py")
    parser.add_argument("--key", default="calibration", help="the summary.json entry to (re)write")
    args = parser.parse_args()
    target = args.fixtures / "summary.json"
    summary = json.loads(target.read_text())
    workloads: list[dict[str, object]] = []
    sweep: list[object] = []
    for run in args.runs:
        recorded = json.loads(run.read_text())
        sweep += recorded.get("sweep", [])
        for entry in recorded["workloads"]:
            name = str(entry["workload"])
            result = entry.get("result", {})
            workloads.append(
                {
                    "workload": name,
                    "cores": len(entry.get("cores", [])),
                    "cpu_quota_cgroup": bool(entry.get("cpu_quota_cgroup")),
                    "result": result,
                    "steps_per_s": result.get("steps_per_s") if isinstance(result, dict) else None,
                    "figures": figures(args.fixtures / f"{name}.om.gz"),
                }
            )
    summary[args.key] = {"workloads": workloads, "loader_sweep": sweep}
    target.write_text(json.dumps(summary, indent=1) + "\n")
    for row in workloads:
        f = row["figures"]
        assert isinstance(f, dict)

        def p95(key: str, f: dict[str, object] = f) -> float:
            value = f.get(key)
            return float(value["p95"]) if isinstance(value, dict) else float("nan")

        print(
            f"{row['workload']:18s} busy {p95('busy'):.3f} sm {p95('sm_active'):.3f} "
            f"tensor {p95('tensor'):.3f} dram {p95('dram'):.3f} "
            f"pcie rx {p95('pcie_rx_bytes_per_s') / 1e6:.1f} MB/s tx {p95('pcie_tx_bytes_per_s') / 1e6:.1f} MB/s "
            f"cpu {p95('cpu_cores'):.2f} busiest {f.get('busiest_process_cores')} "
            f"steps/s {row['steps_per_s']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
