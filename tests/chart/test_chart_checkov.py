"""checkov's Kubernetes checks pass on the rendered chart.

checkov's helm framework silently scans nothing without a helm binary, so the chart is rendered with
`helm template` and the YAML is scanned with `--framework kubernetes`. checkov lives in its own
virtualenv (tests/chart/checkov.sh), outside the project venv, because of its large dependency set.

The only checks skipped are listed below with the reason; the pods' own justified exceptions (service
account token, hostPID of the agent) are `checkov.io/skip*` annotations on the objects themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart.chartlib import FULL_VALUES, helm_template, require_helm, write_docs

CHECKOV_SH = Path(__file__).resolve().parent / "checkov.sh"

#: checks skipped for every render, with the reason
SKIPPED_EVERYWHERE = {
    # The default pull policy is IfNotPresent, which is right for tag- or digest-pinned images.
    "CKV_K8S_15": "image pull policy Always",
}
#: checks skipped only for the default values
SKIPPED_FOR_DEFAULTS = {
    # The default image is referenced by tag (the chart cannot know the digest of your build);
    # values-full.yaml sets a digest, so this check runs there.
    "CKV_K8S_43": "image referenced by digest",
}


def checkov_executable() -> str:
    if os.environ.get("GPU_RIGHTSIZER_SKIP_CHECKOV") and not os.environ.get("CI"):
        pytest.skip("GPU_RIGHTSIZER_SKIP_CHECKOV is set")
    proc = subprocess.run(["bash", str(CHECKOV_SH), "--print"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        message = f"checkov could not be installed: {proc.stderr[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return proc.stdout.strip().splitlines()[-1]


def run_checkov(manifest: Path, skipped: dict[str, str]) -> dict[str, Any]:
    cmd = [
        checkov_executable(),
        "--framework",
        "kubernetes",
        "--skip-download",
        "--quiet",
        "--compact",
        "--output",
        "json",
        "--file",
        str(manifest),
    ]
    if skipped:
        cmd += ["--skip-check", ",".join(sorted(skipped))]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"checkov printed no JSON report (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    reports = report if isinstance(report, list) else [report]
    return {
        "passed": sum(r.get("summary", {}).get("passed", 0) for r in reports),
        "failed": [c for r in reports for c in r.get("results", {}).get("failed_checks", [])],
        "resources": sum(r.get("summary", {}).get("resource_count", 0) for r in reports),
    }


@pytest.mark.parametrize("values_name", ["default", "full"])
def test_rendered_chart_passes_checkov(values_name: str, tmp_path: Path) -> None:
    helm = require_helm()
    values_files = [FULL_VALUES] if values_name == "full" else []
    rendered = helm_template(helm, values_files=values_files, extra=["--skip-crds"])
    manifest = write_docs(tmp_path / f"{values_name}.yaml", rendered.docs)
    skipped = {**SKIPPED_EVERYWHERE, **(SKIPPED_FOR_DEFAULTS if values_name == "default" else {})}

    result = run_checkov(manifest, skipped)

    failures = [f"{c['check_id']} {c['check_name']} ({c['resource']})" for c in result["failed"]]
    assert not failures, "checkov failures:\n" + "\n".join(failures)
    # a scan that looked at nothing must not count as a pass
    assert result["resources"] >= 10
    assert result["passed"] >= 100
