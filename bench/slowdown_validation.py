"""Predicted vs measured slowdown when a workload may use only some of the GPU's SMs (run on the GPU).

The engine sizes slices on the phase shape (`logic/width.py`): duty d = GR_ENGINE_ACTIVE, width
w = SM_ACTIVE / GR_ENGINE_ACTIVE × SMs, and predicts (1 − d) + d · max(1, w / s) on s SMs. This bench
checks the SM term on a real GPU without touching MIG: each workload runs once on the whole GPU while
NVML GPM measures its shape over the timed steps, then again limited to s SMs, and the measured step
time ratio is set against the prediction.

SM limits: a CUDA green context (`torch.cuda.green_contexts`, `--method green`) or an MPS client with
`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (`--method mps`, the script starts and stops the MPS daemon with its
pipe and log folders under /tmp). Neither cuts memory bandwidth or L2 the way a MIG slice does, so the
bandwidth column (d · max(…, b / β) with β = s / SMs, b = DRAM_ACTIVE / GR_ENGINE_ACTIVE) is the
model's own figure, not a measurement. Each (method, SM count) runs in its own process, so one failure
costs one row.

Time-sliced shares (`--share 2,4`): the workload runs next to N − 1 processes that keep the GPU busy
with GEMMs (the worst case the bound covers: every sharer busy whenever this one is), under the
driver's default time-slicing, against (1 − d) + d · N.

    python3 bench/slowdown_validation.py [--sms 128,64,32,16] [--mps-sms 66,33]
                                         [--method green|mps|both|none] [--share 2,4] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from gpu_rightsizer.logic.width import PhaseShape, predicted_slowdown, predicted_time_sliced_slowdown

#: Timed steps run at least this long, so GPM's two samples span many steps.
MEASURE_SECONDS = 2.0
MPS_DIRS = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps-pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp/mps-log"}

Step = Callable[[], None]

#: A sharer that keeps the GPU busy all the time: bf16 GEMMs back to back.
BUSY_SHARER = (
    "import torch\n"
    "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
    "while True:\n"
    "    for _ in range(8):\n"
    "        torch.matmul(a, a)\n"
    "    torch.cuda.synchronize()\n"
)


def _workloads() -> dict[str, Callable[[], Step]]:
    """Each entry sets a workload up and returns one step (which ends synchronised)."""
    import torch

    def gemm() -> Step:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

        def step() -> None:
            for _ in range(8):
                torch.matmul(a, b)
            torch.cuda.synchronize()

        return step

    def membw() -> Step:
        x = torch.rand(2**28, device="cuda")
        y = torch.rand(2**28, device="cuda")
        out = torch.empty_like(x)

        def step() -> None:
            for _ in range(10):
                torch.add(x, y, alpha=0.5, out=out)  # 12 bytes per element, no reuse: DRAM-bound
            torch.cuda.synchronize()

        return step

    def tiny_kernels() -> Step:
        x = torch.zeros(1024, device="cuda")

        def step() -> None:
            for _ in range(200):
                x.add_(1.0)  # one block each: the launch rate, not the SMs, sets the pace
            torch.cuda.synchronize()

        return step

    def duty_wide() -> Step:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

        def step() -> None:
            for _ in range(4):
                torch.matmul(a, b)  # a wide phase on every SM …
            torch.cuda.synchronize()
            time.sleep(0.030)  # … then the host works or waits (loader, queue, logging)

        return step

    def small_batch_inference() -> Step:
        layers = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(6)]
        x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)

        def step() -> None:
            for _ in range(20):
                y = x
                for w in layers:
                    y = torch.nn.functional.gelu(y @ w)
            torch.cuda.synchronize()

        return step

    return {
        "gemm-bf16": gemm,
        "membw-copy": membw,
        "tiny-kernels": tiny_kernels,
        "duty-wide": duty_wide,
        "small-batch-infer": small_batch_inference,
    }


def _time_steps(step: Step) -> tuple[float, int]:
    """Mean step seconds over at least MEASURE_SECONDS (after 3 warm-up steps), and the step count."""
    for _ in range(3):
        step()
    started = time.perf_counter()
    steps = 0
    while steps < 5 or time.perf_counter() - started < MEASURE_SECONDS:
        step()
        steps += 1
    return (time.perf_counter() - started) / steps, steps


def child(method: str, sms: int, names: list[str]) -> dict[str, Any]:
    """Measure every workload under one SM limit (method 'none' also reads GPM); returns the rows."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.zeros(1, device="cuda")
    props = torch.cuda.get_device_properties(0)
    context: Any = None
    if method == "green":
        from torch.cuda import green_contexts

        context = green_contexts.GreenContext.create(sms, 0)
        enter = getattr(context, "set_context", None) or context.make_current
        enter()
    sharers = (
        [subprocess.Popen([sys.executable, "-c", BUSY_SHARER]) for _ in range(sms - 1)]
        if method == "share"
        else []
    )
    if sharers:
        time.sleep(8.0)  # past their imports and first GEMMs
    nvml: Any = None
    handle: Any = None
    if method == "none":
        from gpu_rightsizer.adapters.nvml import GpmMetric, PynvmlLibrary

        nvml = PynvmlLibrary()
        nvml.init()
        handle = nvml.device_handle(0)
    rows: dict[str, Any] = {"method": method, "sms": sms, "device_sms": props.multi_processor_count}
    builders = _workloads()
    for name in names:
        try:
            step = builders[name]()
            first = nvml.gpm_sample(handle) if nvml else None
            seconds, steps = _time_steps(step)
            row: dict[str, Any] = {"step_s": seconds, "steps": steps}
            if nvml:
                second = nvml.gpm_sample(handle)
                metrics = nvml.gpm_metrics(
                    first, second, [GpmMetric.GRAPHICS_UTIL, GpmMetric.SM_UTIL, GpmMetric.DRAM_BW_UTIL]
                )
                nvml.gpm_free(first)
                nvml.gpm_free(second)
                row.update(
                    gr_engine_active=metrics.get(GpmMetric.GRAPHICS_UTIL, float("nan")) / 100,
                    sm_active=metrics.get(GpmMetric.SM_UTIL, float("nan")) / 100,
                    dram_active=metrics.get(GpmMetric.DRAM_BW_UTIL, float("nan")) / 100,
                )
            rows[name] = row
            del step
            torch.cuda.empty_cache()
        except Exception as exc:  # one workload failing under a limit costs its cell only
            rows[name] = {"error": f"{type(exc).__name__}: {exc}"}
    if context is not None:
        leave = getattr(context, "pop_context", None) or context.pop_current
        leave()
    for sharer in sharers:
        sharer.kill()
        sharer.wait()
    return rows


def _run_child(method: str, sms: int, names: list[str], env: dict[str, str]) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        method,
        "--child-sms",
        str(sms),
        "--only",
        ",".join(names),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240, check=False)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    return {"method": method, "sms": sms, "error": (done.stderr or done.stdout)[-600:]}


def _mps(start: bool) -> None:
    env = {**os.environ, **MPS_DIRS}
    for folder in MPS_DIRS.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    if start:
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True, timeout=30)
        time.sleep(1.0)
    else:
        subprocess.run(
            ["nvidia-cuda-mps-control"], input="quit\n", text=True, env=env, timeout=30, check=False
        )
        time.sleep(1.0)


def table(baseline: dict[str, Any], limited: list[dict[str, Any]], total_sms: int) -> list[dict[str, Any]]:
    """One row per (workload, method, SM count): shape, measured and predicted slowdown."""
    out: list[dict[str, Any]] = []
    for name, base in baseline.items():
        if not isinstance(base, dict) or "step_s" not in base:
            continue
        shape = PhaseShape.from_means(
            base.get("gr_engine_active"), base.get("sm_active"), total_sms, base.get("dram_active")
        )
        for run in limited:
            cell = run.get(name)
            if not isinstance(cell, dict) or "step_s" not in cell:
                continue
            if run["method"] == "share":
                sharers = int(run["sms"])
                row = _row(name, shape, base, cell, "time-slice", f"1/{sharers}")
                if shape is not None:
                    row["predicted"] = predicted_time_sliced_slowdown(shape, sharers)
                out.append(row)
                continue
            device_sms = int(run.get("device_sms", total_sms))
            sms = device_sms if run["method"] == "mps" and device_sms < total_sms else int(run["sms"])
            row = _row(name, shape, base, cell, run["method"], sms)
            if shape is not None:
                row["predicted"] = predicted_slowdown(shape, sms, total_sms)
                row["predicted_bw"] = predicted_slowdown(
                    shape, sms, total_sms, slice_bandwidth_fraction=sms / total_sms
                )
            out.append(row)
    return out


def _row(
    name: str,
    shape: PhaseShape | None,
    base: dict[str, Any],
    cell: dict[str, Any],
    method: str,
    limit: int | str,
) -> dict[str, Any]:
    """The measured part of one table row; the caller adds the predictions where a shape is known."""
    return {
        "workload": name,
        "method": method,
        "sms": limit,
        "duty": None if shape is None else shape.duty,
        "width_sms": None if shape is None else shape.width_sms,
        "dram_share": None if shape is None else shape.bandwidth_share,
        "base_ms": base["step_s"] * 1000,
        "step_ms": cell["step_s"] * 1000,
        "measured": cell["step_s"] / base["step_s"],
        "predicted": None,
        "predicted_bw": None,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        "| workload | limit | SMs | d | w (SMs) | DRAM/GR | step on 132 (ms) | step (ms) | measured | "
        "predicted (SM term) | error | with modelled bandwidth term |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        error = None if r["predicted"] is None else r["predicted"] / r["measured"] - 1
        print(
            f"| {r['workload']} | {r['method']} | {r['sms']} | {_fmt(r['duty'], '.2f')} | "
            f"{_fmt(r['width_sms'], '.0f')} | {_fmt(r['dram_share'], '.2f')} | {r['base_ms']:.2f} | "
            f"{r['step_ms']:.2f} | {r['measured']:.2f}× | {_fmt(r['predicted'], '.2f')}× | "
            f"{_fmt(None if error is None else error * 100, '+.0f')} % | {_fmt(r['predicted_bw'], '.2f')}× |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sms", default="128,64,32,16", help="SM counts to limit to (green: multiples of 8)")
    parser.add_argument(
        "--mps-sms", default="66,33", help="SM counts for MPS (any count; rounded by the driver)"
    )
    parser.add_argument("--method", choices=("green", "mps", "both", "none"), default="green")
    parser.add_argument("--share", default="", help="time-sliced shares to measure: sharer counts N")
    parser.add_argument("--only", default="", help="comma-separated workloads (default: all)")
    parser.add_argument("--json", type=Path, help="also write the raw rows here")
    parser.add_argument("--child", choices=("none", "green", "mps", "share"), help=argparse.SUPPRESS)
    parser.add_argument("--child-sms", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(_workloads())
    if args.child:
        print(json.dumps(child(args.child, args.child_sms, names)), flush=True)
        return 0

    env = dict(os.environ)
    baseline = _run_child("none", 0, names, env)  # the parent opens no CUDA context (MPS starts later)
    total_sms = int(baseline.get("device_sms", 132))
    print("baseline:", json.dumps(baseline), flush=True)
    limited: list[dict[str, Any]] = []
    methods = {"both": ["green", "mps"], "none": []}.get(args.method, [args.method])
    for method in methods:
        counts = [int(s) for s in (args.mps_sms if method == "mps" else args.sms).split(",") if s]
        if method == "mps":
            _mps(start=True)
        try:
            for sms in counts:
                run_env = {**env, **MPS_DIRS}
                if method == "mps":
                    run_env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = f"{100 * sms / total_sms:.2f}"
                result = _run_child(method, sms, names, run_env)
                print(f"{method} {sms}:", json.dumps(result), flush=True)
                limited.append(result)
        finally:
            if method == "mps":
                _mps(start=False)
    for count in [int(n) for n in args.share.split(",") if n]:
        result = _run_child("share", count, names, env)
        print(f"share {count}:", json.dumps(result), flush=True)
        limited.append(result)
    rows = table(baseline, limited, total_sms)
    print()
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"baseline": baseline, "limited": limited, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
