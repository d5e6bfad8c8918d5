"""The cycle's window sources: one per window length, no batch while backfilling."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from gpu_rightsizer.adapters import windows as window_sources
from gpu_rightsizer.adapters.recording_rules import Detection
from gpu_rightsizer.adapters.source import CycleReport, step_for
from gpu_rightsizer.adapters.windows import WindowSources
from gpu_rightsizer.recommender.cycle import BACKFILL_PAUSE_SECONDS, next_delay

END = datetime(2026, 1, 1, tzinfo=UTC)


class FakeIncremental:
    """Backfills in `cycles` reads, then answers one window per read."""

    made: ClassVar[list[FakeIncremental]] = []

    def __init__(self, source: Any, *, window_seconds: float, step_seconds: float, **_: Any) -> None:
        self.window_seconds, self.step_seconds = window_seconds, step_seconds
        self.reads = 0
        self.report = CycleReport(backfilling=True)
        FakeIncremental.made.append(self)

    @property
    def complete(self) -> bool:
        return self.reads >= 3

    def read(
        self, *, at: datetime, namespace: str | None, budget_seconds: float, **assembly: Any
    ) -> list[str]:
        self.reads += 1
        self.report = CycleReport(backfilling=not self.complete, samples=100 * self.reads)
        self.report.backfill_done, self.report.backfill_total = min(self.reads, 3), 3
        self.report.timed("gpu:DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.2)
        self.report.timed("ksm:kube_pod_info", 0.1)
        return ["window"] if self.complete else []


@pytest.fixture
def sources(monkeypatch: pytest.MonkeyPatch) -> WindowSources:
    FakeIncremental.made.clear()
    monkeypatch.setattr(window_sources, "IncrementalSource", FakeIncremental)
    return WindowSources(object, budget_seconds=5, recorded_series=False)  # type: ignore[arg-type]


def test_no_batch_until_the_window_is_backfilled_then_windows(sources: WindowSources) -> None:
    windows, report = sources.fetch(3600.0, END)
    assert windows is None and report.backfill_progress == pytest.approx(1 / 3)
    assert sources.fetch(3600.0, END)[0] is None
    windows, report = sources.fetch(3600.0, END)
    assert windows == ["window"] and report.samples == 300
    assert len(FakeIncremental.made) == 1  # one source kept across cycles


def test_unused_window_lengths_are_forgotten(sources: WindowSources) -> None:
    sources.fetch(600.0, END)
    sources.fetch(7200.0, END)
    assert sources.keep_only({7200.0}) == [600.0]
    assert set(sources.sources) == {7200.0}
    assert sources.keep_only(set()) == [7200.0]
    assert sources.sources == {}


def test_step_follows_the_window() -> None:
    assert step_for(120.0) == 2.0
    assert step_for(3600.0) == 60.0
    assert step_for(86_400.0) == 60.0
    assert step_for(10.0) == 1.0


class RecordingIncremental(FakeIncremental):
    """A source that takes the families to read from recorded series."""

    def __init__(self, source: Any, *, window_seconds: float, step_seconds: float) -> None:
        super().__init__(source, window_seconds=window_seconds, step_seconds=step_seconds)
        self.source = source
        self.switches: list[dict[str, str]] = []

    def use_recorded(self, recorded: dict[str, str]) -> None:
        self.switches.append(dict(recorded))


def test_recorded_series_are_detected_at_start_then_again_every_so_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rules that come to cover the window are picked up, and rules that go away are left, without a restart."""
    answers = [{}, {"pod:cpu_usage_cores": "{sel}"}, {"pod:cpu_usage_cores": "{sel}"}, {}]
    asked: list[tuple[float, float, float]] = []

    def fake_detect(source: Any, *, now: float, window_seconds: float, step_seconds: float) -> Detection:
        asked.append((now, window_seconds, step_seconds))
        used = answers[len(asked) - 1]
        return Detection(used=used, fallback={} if used else {"pod:cpu_usage_cores": "not found"}, method="x")

    monkeypatch.setattr(window_sources, "IncrementalSource", RecordingIncremental)
    monkeypatch.setattr(window_sources, "detect", fake_detect)
    sources = WindowSources(object, budget_seconds=5)  # type: ignore[arg-type]
    start = END.timestamp()
    for minutes in (0, 1, 15, 30, 45):
        sources.fetch(86_400.0, datetime.fromtimestamp(start + 60 * minutes, tz=UTC))
    made = sources.sources[86_400.0]
    assert isinstance(made, RecordingIncremental)
    assert [now - start for now, _, _ in asked] == [0, 900, 1800, 2700]  # at start, then every 15 min
    assert asked[0][1:] == (86_400.0, 60.0)
    assert made.switches == [{}, {"pod:cpu_usage_cores": "{sel}"}, {}]  # only changes are applied
    assert sources.detections[86_400.0].used == {}


def test_a_failing_detection_leaves_every_family_raw(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(source: Any, **_: Any) -> Detection:
        raise AttributeError("'list' object has no attribute 'get'")

    monkeypatch.setattr(window_sources, "IncrementalSource", RecordingIncremental)
    monkeypatch.setattr(window_sources, "detect", broken)
    sources = WindowSources(object, budget_seconds=5)  # type: ignore[arg-type]
    windows, _ = sources.fetch(3600.0, END)
    assert windows is None  # read (backfilling), not failed
    made = sources.sources[3600.0]
    assert isinstance(made, RecordingIncremental) and made.switches == [{}] and made.reads == 1
    assert "failed" in sources.detections[3600.0].method


def test_cycles_follow_each_other_while_a_window_backfills_then_wait_the_interval(
    sources: WindowSources,
) -> None:
    """A cold start reads back to back (each cycle within its budget) instead of an interval apart."""
    ctx: Any = SimpleNamespace(config=SimpleNamespace(interval_seconds=300.0), source=None)
    assert next_delay(ctx) == 300.0  # full-window reads: nothing to backfill
    ctx.source = sources
    assert next_delay(ctx) == 300.0  # no window in use yet
    sources.fetch(3600.0, END)
    assert next_delay(ctx) == BACKFILL_PAUSE_SECONDS
    sources.fetch(3600.0, END)
    sources.fetch(3600.0, END)
    assert next_delay(ctx) == 300.0  # backfilled: one cycle per interval again
    ctx.config.interval_seconds = 2.0
    sources.fetch(1800.0, END)
    assert next_delay(ctx) == 2.0  # never slower than the interval
