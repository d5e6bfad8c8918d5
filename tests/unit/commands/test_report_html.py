"""`analyze -o html` opened in a real headless Chromium (Debian's package, hack/bootstrap.sh installs it).

Four workloads recorded on a real H200 (tests/fixtures/h200), put side by side in two namespaces,
go through the command; Chromium parses the file (its DOM after parsing is checked: totals, plots,
the applied change) and draws it (its screenshot must show every plot's line colour). The
screenshot stays in the test's temporary folder; its path is printed.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from gpu_rightsizer.commands import analyze
from gpu_rightsizer.model.crd import (
    ApplyStatus,
    ChangeHistoryEntry,
    ChangePhase,
    GPURecommendation,
    GPURecommendationSpec,
    GPURecommendationStatus,
    TargetRef,
)
from gpu_rightsizer.report_html import PLOT_COLOURS

H200 = Path(__file__).resolve().parents[2] / "fixtures" / "h200"
#: namespace -> recordings put in it (each ends at the same instant, on its own GPU)
LAYOUT = {"team-a": ["idle-holder", "tiny-inference"], "team-b": ["starved-loader", "loader-6w-q5"]}
END = 1_800_000_000.0


def _chromium() -> str:
    found = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; hack/bootstrap.sh installs Debian's chromium package")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium, or run hack/bootstrap.sh)")
    return found


def _side_by_side(target: Path) -> None:
    """One OpenMetrics file of the recordings: each moved to its namespace, its own GPU, and to end at END."""
    sample = re.compile(r"^(\S+?)(\{.*\})? (\S+) (\S+)$")
    lines: list[str] = []
    for index, (namespace, name) in enumerate((ns, n) for ns, names in LAYOUT.items() for n in names):
        text = gzip.decompress((H200 / f"{name}.om.gz").read_bytes()).decode()
        rows = [sample.match(line) for line in text.splitlines() if not line.startswith("#")]
        newest = max(float(m.group(4)) for m in rows if m)
        for m in rows:
            if m is None:
                continue
            labels = (m.group(2) or "").replace('namespace="gpu-proof"', f'namespace="{namespace}"')
            labels = re.sub(r'UUID="GPU-.', f'UUID="GPU-{index}', labels)
            lines.append(f"{m.group(1)}{labels} {m.group(3)} {float(m.group(4)) - newest + END:.3f}")
    target.write_text("\n".join(lines) + "\n# EOF\n")


def _applied_change(target: Path) -> None:
    """A GPURecommendation whose CPU raise of team-b's starved loader was verified."""
    at = datetime.fromtimestamp(END - 3 * 3600, tz=UTC)
    entry = ChangeHistoryEntry(
        change_id="c-1",
        at=at,
        finished_at=datetime.fromtimestamp(END - 3600, tz=UTC),
        change="containers[main].resources.limits[cpu] 2->8",
        outcome=ChangePhase.VERIFIED,
        reason="GPU busy p95 rose from 22% to 71%",
        before={"gpuBusyP95": 0.22, "cpuSaturationP95": 0.99},
        after={"gpuBusyP95": 0.71, "cpuSaturationP95": 0.61},
    )
    recommendation = GPURecommendation(
        metadata={"name": "job-starved-loader", "namespace": "team-b"},
        spec=GPURecommendationSpec(
            target_ref=TargetRef(api_version="batch/v1", kind="Job", name="starved-loader")
        ),
        status=GPURecommendationStatus(apply=ApplyStatus(history=[entry])),
    )
    target.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [recommendation.to_manifest()]})
    )


class _Elements(HTMLParser):
    """Every element of a DOM with its attributes, and the text of each table row."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.rows: list[list[str]] = []
        self._cells: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        if tag == "tr":
            self._cells = []
        elif tag == "td" and self._cells is not None:
            self._cells.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._cells is not None:
            self.rows.append(self._cells)
            self._cells = None

    def handle_data(self, data: str) -> None:
        if self._cells:
            self._cells[-1] += data

    def having(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def _pixels(png: bytes) -> tuple[int, int, int, bytes]:
    """Width, height, bytes per pixel and the unfiltered pixel rows of an 8-bit RGB(A) PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, header = 8, b"", b""
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), f"unexpected PNG: depth {depth}, colour type {colour}"
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    out, previous = bytearray(), bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - bpp] if x >= bpp else 0
            up, corner = previous[x], previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        out += line
        previous = line
    return width, height, bpp, bytes(out)


def _colour_counts(pixels: tuple[int, int, int, bytes], tolerance: int = 24) -> dict[str, int]:
    """Pixels near each plot's line colour (anti-aliased edges count while within `tolerance`)."""
    width, height, bpp, data = pixels
    seen = Counter(data[i : i + 3] for i in range(0, width * height * bpp, bpp))
    counts = {}
    for name, colour in PLOT_COLOURS.items():
        want = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        counts[name] = sum(
            n for rgb, n in seen.items() if all(abs(rgb[c] - want[c]) <= tolerance for c in range(3))
        )
    return counts


@pytest.mark.timeout(300)
def test_html_report_renders_in_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    recording, records, report = (
        tmp_path / "side-by-side.om",
        tmp_path / "recs.yaml",
        tmp_path / "report.html",
    )
    _side_by_side(recording)
    _applied_change(records)
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    argv = ["--openmetrics", str(recording), "--min-window", "30s", "--sharing", "mig-mixed", "-o", "html"]
    argv += ["--output-file", str(report), "--recommendations", str(records)]
    assert analyze.run(parser.parse_args(argv)) == 0
    assert "http://" not in report.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    browser += [f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1400"]
    dumped = subprocess.run(
        [*browser, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    dom = _Elements()
    dom.feed(dumped)

    # totals per namespace, and the grand total, as Chromium parsed them
    assert [a["data-namespace"] for a in dom.having("tr") if "data-namespace" in a] == ["team-a", "team-b"]
    by_label = {cells[0]: cells for cells in dom.rows if cells}
    # idle-holder 24 + tiny-inference 12 GPU-h/d, if offered
    assert by_label["team-a"][1:4] == ["2", "-", "36.0 GPU-h/d"]
    assert by_label["team-b"][1] == "2"
    assert by_label["total"][1:4] == ["4", "-", "36.0 GPU-h/d"]
    # waste apart from savings: two one-GPU workloads at 0-1 % busy hold nearly 2 × 24 idle GPU-hours a day
    idle = float(by_label["team-a"][4].split()[0])
    assert 46.0 <= idle <= 48.0
    assert float(by_label["total"][4].split()[0]) > idle  # team-b's starved loaders waste too
    assert "waste cost" not in dumped  # no price, no money column
    assert len(dom.having("article", **{"class": "workload"})) == 4

    # every workload has its four plots, each a line of as many points as the series has
    plots = dom.having("svg", **{"class": "plot"})
    assert sorted(p["data-plot"] for p in plots) == sorted(list(PLOT_COLOURS) * 4)
    lines = dom.having("polyline", **{"class": "series"})
    assert [len(line["points"].split()) for line in lines] == [int(p["data-points"]) for p in plots]
    assert all(int(p["data-points"]) >= 20 for p in plots)  # 40 s recordings at 1 s steps
    references = dom.having("line", **{"class": "reference"})
    assert len(references) == 8  # CPU limit and GPU memory capacity of each workload

    # the applied change: before, after and the verdict
    (change,) = dom.having("div", **{"class": "change"})
    assert change["data-outcome"] == "Verified"
    assert ["gpuBusyP95", "0.22", "0.71"] in dom.rows

    screenshot = tmp_path / "report.png"
    subprocess.run(
        [*browser, f"--screenshot={screenshot}", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    print(f"screenshot of the HTML report: {screenshot}")
    pixels = _pixels(screenshot.read_bytes())
    assert pixels[0] == 1280
    drawn = _colour_counts(pixels)
    assert all(count > 150 for count in drawn.values()), drawn
