"""Every metric the operator exports is on the Grafana dashboard the chart ships."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from gpu_rightsizer.runtime import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "gpu-rightsizer" / "files" / "dashboard.json"


def test_every_own_metric_has_a_panel() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = " ".join(t["expr"] for p in panels for t in p.get("targets", []))
    names = [m._name for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)]
    assert "gpu_rightsizer_query_duration_seconds" in names
    missing = [name for name in names if name not in exprs]
    assert not missing, f"metrics without a dashboard panel: {missing}"


def test_panel_ids_and_positions_do_not_collide() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in panels:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))
