"""Generate docs/helm-values.md from charts/gpu-rightsizer/values.yaml and its `# --` comments.

values.yaml is the single source: each value's description is the comment above it, its default is the
value itself. tests/chart checks that the committed reference is current (`--check`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
VALUES = REPO_ROOT / "charts" / "gpu-rightsizer" / "values.yaml"
DOC = REPO_ROOT / "docs" / "helm-values.md"

#: blocks documented as one value (their content is passed through to Kubernetes as is)
FREE_FORM = {
    "podSecurityContext",
    "containerSecurityContext",
    "resources",
    "nodeSelector",
    "tolerations",
    "affinity",
    "labels",
    "annotations",
    "podAnnotations",
    "podLabels",
    "commonLabels",
    "additionalAlertLabels",
}

HEADER = """# Helm values reference

Every value of the `gpu-rightsizer` chart, its default and what it does. This file is generated from
`charts/gpu-rightsizer/values.yaml` (`python tests/chart/gen_values_doc.py`); the chart's tests fail when
the two disagree. `values.schema.json` rejects unknown keys and wrong types, and the templates reject
contradictory combinations (for example `actuator.enabled=true` with neither `actuator.namespaces` nor
`actuator.clusterWide`) with a message naming the value. See [install.md](install.md) for how the values
fit together.

| Value | Default | Description |
|---|---|---|
"""


def leaf_paths(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the documented values: dict leaves; free-form blocks and lists count as one."""
    if isinstance(node, dict) and node and prefix.rsplit(".", 1)[-1] not in FREE_FORM:
        return [
            p for key, value in node.items() for p in leaf_paths(value, f"{prefix}.{key}" if prefix else key)
        ]
    return [prefix]


def comments_by_path(text: str) -> dict[str, str]:
    """Dotted key path -> the comment block right above that key."""
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []
    out: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][\w.\-/]*):(.*)$", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [match.group(2)])
        block: list[str] = []
        back = index - 1
        while back >= 0 and lines[back].strip().startswith("#"):
            block.insert(0, lines[back].strip())
            back -= 1
        if block and block[0].startswith("# --"):
            out[path] = " ".join(re.sub(r"^#( --)?\s?", "", c) for c in block).strip()
        if match.group(3).strip() == "":
            stack.append((indent, match.group(2)))
    return out


def value_at(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        node = node[key]
    return node


def render() -> str:
    text = VALUES.read_text()
    values = yaml.safe_load(text)
    comments = comments_by_path(text)
    rows = []
    missing = []
    for path in leaf_paths(values):
        description = comments.get(path)
        if description is None:
            missing.append(path)
            continue
        default = json.dumps(value_at(values, path), separators=(", ", ": "))
        escaped = description.replace("|", r"\|").replace("<", "&lt;").replace(">", "&gt;")
        rows.append(f"| `{path}` | `{default}` | {escaped} |")
    if missing:
        raise SystemExit(f"values without a `# --` comment in values.yaml: {missing}")
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if DOC.exists() and DOC.read_text() == render() else 1)
    DOC.write_text(render())
    print(f"wrote {DOC}")
