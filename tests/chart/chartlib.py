"""Helpers shared by the chart tests: find helm, render the chart, pick objects out of the render.

helm is the pinned binary from hack/testbins/build.sh (or one on PATH); tests that need it skip with the
reason when it is missing, except under CI, where a missing helm is an error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "charts" / "gpu-rightsizer"
FULL_VALUES = Path(__file__).resolve().parent / "values-full.yaml"
RELEASE = "gpurs"
NAMESPACE = "gpu-rightsizer"
#: Kubernetes versions the chart is validated against: its minimum (kubeVersion), a middle one, the newest.
KUBE_VERSIONS = ("1.29.0", "1.33.0", "1.36.0")
#: The API groups of the optional prometheus-operator objects, declared so `helm template` renders them.
MONITORING_API = "monitoring.coreos.com/v1"

Manifest = dict[str, Any]


def find_helm() -> Path | None:
    """The pinned helm from hack/testbins (or $GPU_RIGHTSIZER_TESTBINS), else one on PATH."""
    candidates: list[Path] = []
    override = os.environ.get("GPU_RIGHTSIZER_TESTBINS")
    if override:
        candidates.append(Path(override) / "helm")
    script = REPO_ROOT / "hack" / "testbins" / "build.sh"
    if script.is_file():
        printed = subprocess.run(
            ["bash", str(script), "--print"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if printed:
            candidates.append(Path(printed.splitlines()[-1]) / "helm")
    on_path = shutil.which("helm")
    if on_path:
        candidates.append(Path(on_path))
    return next((path for path in candidates if os.access(path, os.X_OK)), None)


def require_helm() -> Path:
    """helm, or skip (fail under CI) with the reason."""
    helm = find_helm()
    if helm is None:
        reason = (
            "helm not found: run `bash hack/testbins/build.sh` (builds the pinned helm) or put helm on PATH"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return helm


@dataclass
class HelmResult:
    """Outcome of one helm call; `docs` holds the parsed manifests of a successful template."""

    returncode: int
    stdout: str
    stderr: str
    docs: list[Manifest] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[Manifest]:
        return [doc for doc in self.docs if doc["kind"] == kind]

    def one(self, kind: str, name: str, namespace: str | None = None) -> Manifest:
        found = [
            doc
            for doc in self.of_kind(kind)
            if doc["metadata"]["name"] == name
            and (namespace is None or doc["metadata"].get("namespace") == namespace)
        ]
        assert len(found) == 1, f"expected one {kind} {namespace or ''}/{name}, found {len(found)}"
        return found[0]


def set_args(values: dict[str, Any] | None) -> list[str]:
    """`--set-json path=value` pairs for a flat {dotted.path: value} dict."""
    import json

    args: list[str] = []
    for path, value in (values or {}).items():
        args += ["--set-json", f"{path}={json.dumps(value)}"]
    return args


def helm_template(
    helm: Path,
    *,
    values_files: Sequence[Path] = (),
    values: dict[str, Any] | None = None,
    kube_version: str = KUBE_VERSIONS[-1],
    extra: Iterable[str] = (),
    check: bool = True,
    api_versions: Sequence[str] = (MONITORING_API,),
) -> HelmResult:
    """`helm template` the chart (CRDs included) and parse the output; `api_versions` are the API
    groups the render acts as if the cluster served (prometheus-operator's by default)."""
    cmd = [
        str(helm),
        "template",
        RELEASE,
        str(CHART_DIR),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        kube_version,
        "--include-crds",
    ]
    for api in api_versions:
        cmd += ["--api-versions", api]
    for path in values_files:
        cmd += ["--values", str(path)]
    cmd += set_args(values)
    cmd += list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    result = HelmResult(proc.returncode, proc.stdout, proc.stderr)
    if proc.returncode == 0:
        result.docs = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    elif check:
        raise AssertionError(f"helm template failed ({proc.returncode}):\n{proc.stderr}")
    return result


def pod_spec(manifest: Manifest) -> Manifest:
    """The pod spec of a Deployment, DaemonSet, StatefulSet or Job."""
    return manifest["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def workloads(docs: Iterable[Manifest]) -> list[Manifest]:
    return [doc for doc in docs if doc["kind"] in {"Deployment", "DaemonSet", "StatefulSet", "Job"}]


def write_docs(path: Path, docs: Iterable[Manifest]) -> Path:
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return path
