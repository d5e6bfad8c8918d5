"""The chart and docs/install.md keep the GPU Operator's and dcgm-exporter's contract.

The GPU Operator mounts exactly one key of the ConfigMap named by `dcgmExporter.config.name`:
`dcgm-metrics.csv`, at `/etc/dcgm-exporter/dcgm-metrics.csv`, and sets `DCGM_EXPORTER_COLLECTORS` to that
path itself (gpu-operator `controllers/object_controls.go` `MetricsConfigFileName`/`MetricsConfigMountPath`,
`deployments/gpu-operator/values.yaml` "expected to be listed under a key called `dcgm-metrics.csv`").
Another key leaves the volume unmountable, so dcgm-exporter pods stick in ContainerCreating on every GPU
node; an env override points dcgm-exporter at a file that does not exist. dcgm-exporter reads the CSV
with Go's `encoding/csv` (`Comment = '#'`, every record the same number of fields) and exits on a field
name DCGM does not know (`internal/pkg/counters/counter_config.go` `ExtractCounters`).
"""

from __future__ import annotations

import csv
import io
import itertools
import re
import shlex
from pathlib import Path

import pytest

from gpu_rightsizer.model import metric_names as mn
from tests.chart.chartlib import CHART_DIR, REPO_ROOT, HelmResult, helm_template, require_helm

#: The GPU Operator's contract (gpu-operator a22dbf6, controllers/object_controls.go:130-137,1901-1921).
GPU_OPERATOR_KEY = "dcgm-metrics.csv"
GPU_OPERATOR_MOUNT = "/etc/dcgm-exporter/dcgm-metrics.csv"
INSTALL_DOC = REPO_ROOT / "docs" / "install.md"
NOTES = CHART_DIR / "templates" / "NOTES.txt"
COUNTERS_FILE = CHART_DIR / "files" / "dcgm-counters.csv"

#: DCGM field names known to DCGM 3.3 and newer (go-dcgm b7fa315 pkg/dcgm/const_fields.go, with the field
#: ids): the counters file may use only these, or dcgm-exporter exits at start on every node.
KNOWN_DCGM_FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK": 100,
    "DCGM_FI_DEV_MEM_CLOCK": 101,
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 112,
    "DCGM_FI_DEV_MEMORY_TEMP": 140,
    "DCGM_FI_DEV_GPU_TEMP": 150,
    "DCGM_FI_DEV_POWER_USAGE": 155,
    "DCGM_FI_DEV_GPU_UTIL": 203,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 204,
    "DCGM_FI_DEV_XID_ERRORS": 230,
    "DCGM_FI_DEV_POWER_VIOLATION": 240,
    "DCGM_FI_DEV_THERMAL_VIOLATION": 241,
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": 243,
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": 245,
    "DCGM_FI_DEV_FB_FREE": 251,
    "DCGM_FI_DEV_FB_USED": 252,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 202,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 393,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 395,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 1001,
    "DCGM_FI_PROF_SM_ACTIVE": 1002,
    "DCGM_FI_PROF_SM_OCCUPANCY": 1003,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 1004,
    "DCGM_FI_PROF_DRAM_ACTIVE": 1005,
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 1006,
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 1007,
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 1008,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1009,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 1010,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": 1011,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": 1012,
}


def _counter_records(text: str) -> list[list[str]]:
    """The records dcgm-exporter reads from a counters CSV, parsed the way Go's encoding/csv does."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [[field.strip() for field in row] for row in csv.reader(io.StringIO("\n".join(lines)))]


def _code_blocks(markdown: str) -> list[str]:
    return re.findall(r"```(?:bash|yaml)?\n(.*?)```", markdown, flags=re.DOTALL)


def _commands(block: str) -> list[list[str]]:
    """Shell commands of a code block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def _sets(command: list[str]) -> dict[str, str]:
    """`--set a.b=c` pairs of a helm command."""
    out: dict[str, str] = {}
    for flag, value in itertools.pairwise(command):
        if flag == "--set":
            path, _, item = value.partition("=")
            out[path] = item
    return out


def _namespace(command: list[str]) -> str:
    return command[command.index("-n") + 1]


def _helm_commands(markdown: str, chart: str) -> list[list[str]]:
    found = []
    for block in _code_blocks(markdown):
        for command in _commands(block):
            if command[:2] == ["helm", "upgrade"] and chart in command:
                found.append(command)
    return found


# ------------------------------------------------------------------------------- the counters file


def test_counters_file_parses_as_dcgm_exporter_reads_it() -> None:
    records = _counter_records(COUNTERS_FILE.read_text())
    assert records, "no counters"
    assert all(len(r) == 3 for r in records), [r for r in records if len(r) != 3]
    assert all(r[1] in ("gauge", "counter") and r[2] for r in records)
    names = [r[0] for r in records]
    assert len(names) == len(set(names)), "duplicate counters"
    unknown = sorted(set(names) - set(KNOWN_DCGM_FIELDS))
    assert not unknown, f"dcgm-exporter would exit on unknown DCGM fields: {unknown}"


def test_counters_file_enables_every_field_the_operator_reads() -> None:
    names = {r[0] for r in _counter_records(COUNTERS_FILE.read_text())}
    read = set(mn.DCGM_METRICS) - {mn.DCGM_FB_RESERVED, mn.DCGM_CLOCK_THROTTLE_REASONS}
    assert read <= names, f"read but never exported: {sorted(read - names)}"
    # the throttle gate's inputs: the clock-event bitmask and the violation counters
    assert mn.DCGM_CLOCKS_EVENT_REASONS in names
    assert set(mn.DCGM_VIOLATION_COUNTERS) <= names


# ------------------------------------------------------------------------------------- the chart


@pytest.fixture(scope="module")
def counters_render() -> HelmResult:
    return helm_template(
        require_helm(),
        values={
            "dcgmExporter.counters.enabled": True,
            "dcgmExporter.counters.namespace": "gpu-operator",
            "dcgmExporter.counters.name": "gpu-rightsizer-dcgm-metrics",
        },
    )


def test_counters_configmap_has_the_one_key_the_gpu_operator_mounts(counters_render: HelmResult) -> None:
    configmap = counters_render.one("ConfigMap", "gpu-rightsizer-dcgm-metrics", "gpu-operator")
    assert set(configmap["data"]) == {GPU_OPERATOR_KEY}
    assert _counter_records(configmap["data"][GPU_OPERATOR_KEY]) == _counter_records(
        COUNTERS_FILE.read_text()
    )
    # the GPU Operator's ClusterPolicy still names it after gpu-rightsizer is uninstalled
    assert configmap["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_counters_configmap_is_off_by_default() -> None:
    default = helm_template(require_helm())
    assert not [d for d in default.of_kind("ConfigMap") if "dcgm" in d["metadata"]["name"]]


# -------------------------------------------------------------------------- the recipes in the docs


def _values_file(markdown: str, name: str) -> str:
    """The YAML code block that starts with `# <name>`."""
    blocks = [b for b in _code_blocks(markdown) if b.startswith(f"# {name}\n")]
    assert len(blocks) == 1, f"{name} is not in docs/install.md"
    return blocks[0]


def test_install_doc_gpu_operator_recipe_names_the_configmap_the_chart_renders(tmp_path: Path) -> None:
    doc = INSTALL_DOC.read_text()
    values = tmp_path / "values-prod.yaml"
    values.write_text(_values_file(doc, "values-prod.yaml"))
    ours = [c for c in _helm_commands(doc, "charts/gpu-rightsizer") if "values-prod.yaml" in c]
    assert ours and all(c[c.index("-f") + 1] == "values-prod.yaml" for c in ours)
    render = helm_template(require_helm(), values_files=[values])
    theirs = [
        c for c in _helm_commands(doc, "nvidia/gpu-operator") if "dcgmExporter.config.name" in " ".join(c)
    ]
    assert theirs, "the GPU Operator recipe is missing from docs/install.md"
    for command in theirs:
        name = _sets(command)["dcgmExporter.config.name"]
        if _sets(command).get("dcgmExporter.config.create") == "true":
            data_file = command[command.index("--set-file") + 1].partition("=")[2]
            assert (REPO_ROOT / data_file).resolve() == COUNTERS_FILE.resolve()
            continue
        configmap = render.one("ConfigMap", name, _namespace(command))
        assert set(configmap["data"]) == {GPU_OPERATOR_KEY}


def test_install_doc_never_upgrades_another_chart_by_accident() -> None:
    """`helm upgrade` without --version moves a release to the repository's newest chart."""
    doc = INSTALL_DOC.read_text()
    for chart in (
        "nvidia/gpu-operator",
        "gpu-helm-charts/dcgm-exporter",
        "prometheus-community/kube-prometheus-stack",
    ):
        commands = _helm_commands(doc, chart)
        assert commands, chart
        for command in commands:
            assert "--version" in command and "--reuse-values" in command, command


def test_no_recipe_overrides_dcgm_exporter_collectors() -> None:
    """The GPU Operator sets DCGM_EXPORTER_COLLECTORS itself; an override points at a missing file."""
    for path in (INSTALL_DOC, NOTES, CHART_DIR / "values.yaml", REPO_ROOT / "README.md"):
        text = path.read_text()
        assert not re.search(r"env\[\d+\]\.(name|value)=DCGM_EXPORTER_COLLECTORS", text), path
        assert "name: DCGM_EXPORTER_COLLECTORS" not in text, path
        assert "gpu-rightsizer-counters.csv" not in text, path
    for command in _helm_commands(INSTALL_DOC.read_text(), "nvidia/gpu-operator"):
        assert not any(k.startswith("dcgmExporter.env") for k in _sets(command)), command


def test_notes_name_the_gpu_operator_key_and_no_env() -> None:
    text = NOTES.read_text()
    assert "dcgm-metrics.csv" in text
    assert "dcgmExporter.config.name=" in text
    assert "dcgmExporter.env" not in text


def test_install_doc_standalone_chart_recipe_uses_custom_metrics_with_the_shipped_file() -> None:
    commands = _helm_commands(INSTALL_DOC.read_text(), "gpu-helm-charts/dcgm-exporter")
    files = [
        c[i + 1].partition("=") for c in commands for i, flag in enumerate(c[:-1]) if flag == "--set-file"
    ]
    assert [(key, Path(value).name) for key, _, value in files] == [("customMetrics", COUNTERS_FILE.name)]
    assert (REPO_ROOT / files[0][2]).is_file()


def test_install_doc_labels_the_dcgm_exporter_service_monitor_for_kube_prometheus_stack() -> None:
    doc = INSTALL_DOC.read_text()
    operator = [
        c
        for c in _helm_commands(doc, "nvidia/gpu-operator")
        if _sets(c).get("dcgmExporter.serviceMonitor.additionalLabels.release")
    ]
    standalone = [
        c
        for c in _helm_commands(doc, "gpu-helm-charts/dcgm-exporter")
        if _sets(c).get("serviceMonitor.additionalLabels.release")
    ]
    assert operator and standalone
    assert "scrapes all three out of the box" not in doc


def test_install_doc_allowlists_every_node_and_pod_label_the_operator_reads() -> None:
    """kube-state-metrics exports only allowlisted labels; each label the operator reads must be listed."""
    doc = INSTALL_DOC.read_text()
    allow = re.findall(r"^\s*- (nodes|pods)=\[([^\]]*)\]", doc, flags=re.MULTILINE)
    listed = {kind: [label.strip() for label in labels.split(",")] for kind, labels in allow}
    assert set(listed) == {"nodes", "pods"}

    def sanitised(label: str) -> str:  # kube-state-metrics' label name for a Kubernetes label key
        return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)

    read_node = {v for k, v in vars(mn).items() if k.startswith("NODE_LABEL_") and isinstance(v, str)}
    read_pod = {v for k, v in vars(mn).items() if k.startswith("POD_LABEL_") and isinstance(v, str)}
    assert read_node and read_pod
    assert read_node <= {sanitised(label) for label in listed["nodes"]}
    assert read_pod <= {sanitised(label) for label in listed["pods"]}


def test_install_doc_documents_dcgm_exporter_sharing_settings() -> None:
    doc = INSTALL_DOC.read_text()
    for needed in ("KUBERNETES_VIRTUAL_GPUS", "NVIDIA_RESOURCE_NAMES", "hostPID: true"):
        assert needed in doc, needed
