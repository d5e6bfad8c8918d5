"""The real scrape of an idle RTX 4000 Ada (GPU Operator v25.10 on LKE): 1 MiB of framebuffer used, no
CUDA context, GR 0.5 % and PCIe 78/46 MB/s, which is that platform's idle floor, not work."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from pathlib import Path

import pytest

from gpu_rightsizer.commands import analyze

SCRAPE = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "real-scrapes"
    / "lke-rtx4000ada-gpu-operator-v25.10.prom"
)
START = 1_764_600_000


def repeated(lines: list[str], path: Path) -> Path:
    """Scrape lines repeated every 30 s for 2 h, as OpenMetrics (the scrape README's recipe)."""
    out: list[str] = []
    for name in sorted({line.split("{", 1)[0] for line in lines}):
        out.append(f"# TYPE {name} gauge")
        own = [line for line in lines if line.split("{", 1)[0] == name]
        out.extend(f"{line} {START + 30 * step}" for step in range(240) for line in own)
    path.write_text("\n".join([*out, "# EOF"]) + "\n")
    return path


def two_hours(path: Path) -> Path:
    """The one scrape as a 2 h window."""
    return repeated([line for line in SCRAPE.read_text().splitlines() if line.strip()], path)


@pytest.mark.parametrize("sharing", ["auto", "none", "time-slicing", "mig-mixed"])
def test_the_idle_rtx4000_reads_idle_names_no_missing_resource_and_claims_no_savings(
    sharing: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    args = parser.parse_args(
        [
            "--openmetrics",
            str(two_hours(tmp_path / "rtx.om")),
            "--window",
            "2h",
            "--sharing",
            sharing,
            "-o",
            "json",
        ]
    )
    assert analyze.run(args) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["primary"] == "IdleAllocation"
    named = {a["resource"] for a in row["actions"]} | {
        key for a in row["actions"] if a.get("target") for key in a["target"]["requests"]
    }
    assert named <= {"nvidia.com/gpu"}, named  # the node publishes nvidia.com/gpu and nothing else
    assert not any("gpu.shared" in a["to"] or "mig-" in a["to"] for a in row["actions"])
    assert row["savings"]["gpuHoursPerDay"] == 0
    assert not any(a["automatic"] for a in row["actions"])


def test_no_finding_says_kernels_run_on_the_idle_rtx4000(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    assert (
        analyze.run(parser.parse_args(["--openmetrics", str(two_hours(tmp_path / "rtx.om")), "-o", "json"]))
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)
    messages = " ".join(f["message"] for f in row["findings"])
    assert "Kernels still run" not in messages and "enable MIG" not in messages
    assert "unknown" in row["summary"] or row["savings"]["ifOfferedGpuHoursPerDay"] > 0


def with_context_and_a_free_gpu(path: Path, free_gpu: bool) -> Path:
    """A variant of the scrape, made up for the idle-floor test: the pod's GPU holds a CUDA context (900
    MiB) but runs nothing, and (with `free_gpu`) a second RTX 4000 Ada on the node that no pod holds
    reads the same floor."""
    lines = [line for line in SCRAPE.read_text().splitlines() if line.strip()]
    held = [re.sub(r"^(DCGM_FI_DEV_FB_USED\{.*\}) 1$", r"\1 900", line) for line in lines]
    free = [
        re.sub(r',container="cuda",namespace="default",pod="cuda-75454ffb9f-8ljq7",pod_uid=""', "", line)
        .replace('gpu="0"', 'gpu="1"')
        .replace("GPU-a8394b51", "GPU-b8394b51")
        for line in lines
    ]
    return repeated(held + (free if free_gpu else []), path)


@pytest.mark.parametrize("free_gpu", [False, True])
def test_a_free_gpu_on_the_node_gives_the_idle_floor(
    free_gpu: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    scrape = with_context_and_a_free_gpu(tmp_path / "rtx.om", free_gpu)
    assert analyze.run(parser.parse_args(["--openmetrics", str(scrape), "--window", "2h", "-o", "json"])) == 0
    (row,) = json.loads(capsys.readouterr().out)  # the free GPU is board data, never a workload
    assert (row["primary"] == "IdleAllocation") is free_gpu, row["primary"]


def test_savings_apart_are_in_the_table_and_the_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    scrape = str(two_hours(tmp_path / "rtx.om"))
    assert analyze.run(parser.parse_args(["--openmetrics", scrape, "-o", "csv"])) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert row["gpu_hours_per_day_saved"] == "0.000" and float(row["gpu_hours_per_day_if_offered"]) > 0
    assert analyze.run(parser.parse_args(["--openmetrics", scrape])) == 0
    assert "if offered]" in capsys.readouterr().out
