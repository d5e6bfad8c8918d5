"""A reader restored from saved state backfills only the gap since the save; unusable state is refused."""

from __future__ import annotations

import argparse
import asyncio
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf
import pytest
from tests.unit.fake_source import FakeSource
from tests.unit.signals.test_incremental import CPU, GPU, NOW, STEP, WINDOW, FakeTSDB

from gpu_rightsizer.adapters import windows as window_sources
from gpu_rightsizer.adapters.incremental import IncrementalReader, IncrementalSource
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource
from gpu_rightsizer.adapters.state import StateDir
from gpu_rightsizer.adapters.windows import WindowSources
from gpu_rightsizer.adapters.windows import sources_for as window_sources_for
from gpu_rightsizer.commands import run as run_command
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.logic.streaming import StateError
from gpu_rightsizer.recommender import wiring as recommender
from gpu_rightsizer.runtime.context import OperatorContext

FINGERPRINT = "families-v1"


def _reader(tsdb: FakeTSDB) -> IncrementalReader:
    return IncrementalReader(
        tsdb, window_seconds=WINDOW, step_seconds=STEP, families=[GPU, CPU], slice_seconds=900
    )


def _complete(tsdb: FakeTSDB, now: float) -> IncrementalReader:
    reader = _reader(tsdb)
    while not reader.complete:
        reader.read(now)
    return reader


def _points(calls: list[tuple[str, str, float, float, float]]) -> int:
    """Steps asked for, summed over the queries (what a range query costs Prometheus per series)."""
    return sum(round((end - start) / step) + 1 for _, _, start, end, step in calls)


def _figures(reader: IncrementalReader, now: float) -> dict[Any, dict[str, float] | None]:
    return {key: window.figures(now) for key, window in reader.store.series.items()}


def test_a_restored_reader_reads_only_the_gap_and_ends_with_the_same_figures() -> None:
    saved_at, later = NOW, NOW + 600
    uninterrupted = _complete(FakeTSDB(), saved_at)
    data = uninterrupted.save(FINGERPRINT)
    assert data is not None
    uninterrupted.read(later)

    tsdb = FakeTSDB()
    restarted = _reader(tsdb)
    assert restarted.restore(data, now=later, fingerprint=FINGERPRINT) == saved_at
    assert not restarted.complete  # no window until the gap is read: it would end 10 minutes ago
    report = restarted.read(later)
    assert restarted.complete and report.backfilling and report.restored_series == 6
    # one query per family, over (saved last_end, now] only
    assert sorted((what, start, end) for what, _, start, end, _ in tsdb.calls) == [
        (GPU.name, saved_at + STEP, later),
        (CPU.name, saved_at + STEP, later),
    ]
    assert _figures(restarted, later) == _figures(uninterrupted, later)
    cold = FakeTSDB()
    _complete(cold, later)
    print(f"\nsteps asked: cold {_points(cold.calls)}, resumed {_points(tsdb.calls)}")
    assert _points(tsdb.calls) * 5 < _points(cold.calls)


def test_a_long_gap_is_backfilled_in_bounded_slices() -> None:
    saved = _complete(FakeTSDB(), NOW).save(FINGERPRINT)
    assert saved is not None
    tsdb = FakeTSDB()
    reader = _reader(tsdb)
    reader.restore(saved, now=NOW + 2700, fingerprint=FINGERPRINT)
    reader.read(NOW + 2700)
    assert reader.complete
    assert len(tsdb.calls) == 2 * 3  # 45 minutes in slices of at most 15, per family
    assert all(end - start <= 900 for _, _, start, end, _ in tsdb.calls)


def test_state_older_than_the_window_is_refused_and_the_start_stays_cold() -> None:
    saved = _complete(FakeTSDB(), NOW).save(FINGERPRINT)
    assert saved is not None
    tsdb = FakeTSDB()
    reader = _reader(tsdb)
    with pytest.raises(StateError, match="more than the 3600 s window"):
        reader.restore(saved, now=NOW + WINDOW + STEP, fingerprint=FINGERPRINT)
    assert len(reader.store) == 0
    reader.read(NOW + WINDOW + STEP)
    assert min(start for _, _, start, _, _ in tsdb.calls) == math.ceil((NOW + STEP) / STEP) * STEP


def test_state_of_other_families_or_an_incomplete_window_is_not_used() -> None:
    saved = _complete(FakeTSDB(), NOW).save(FINGERPRINT)
    assert saved is not None
    reader = _reader(FakeTSDB())
    with pytest.raises(StateError, match="fingerprint"):
        reader.restore(saved, now=NOW + 60, fingerprint="families-v2")
    assert len(reader.store) == 0
    assert _reader(FakeTSDB()).save(FINGERPRINT) is None  # nothing saved before the backfill is done


def _source(tsdb: FakeTSDB, **config: Any) -> IncrementalSource:
    prometheus = PrometheusSource(PrometheusConfig(url="http://prometheus.invalid", **config))
    prometheus.range_series = tsdb  # type: ignore[method-assign]
    return IncrementalSource(prometheus, window_seconds=WINDOW, step_seconds=STEP)


def test_the_fingerprint_follows_the_family_definitions_and_matchers_not_recorded_series() -> None:
    plain = _source(FakeTSDB())
    recorded = _source(FakeTSDB())
    recorded.use_recorded({CPU.name: "gpurs:pod_cpu:rate"})
    assert plain.fingerprint() == recorded.fingerprint()  # recorded series stand for the same samples
    other_cluster = _source(FakeTSDB(), extra_matchers=('cluster="dev"',))
    assert other_cluster.fingerprint() != plain.fingerprint()
    # a longer step widens the rate windows (the step itself is checked by the loader)
    other_step = IncrementalSource(plain.source, window_seconds=WINDOW, step_seconds=120.0)
    assert other_step.fingerprint() != plain.fingerprint()


def test_window_sources_save_when_due_and_load_at_the_next_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level("INFO")
    clock = [0.0]
    start = datetime.fromtimestamp(NOW, tz=UTC)

    def two_families(prometheus: PrometheusSource, **settings: Any) -> IncrementalSource:
        made = IncrementalSource(prometheus, **settings)
        made.source.range_series = FakeTSDB()  # type: ignore[method-assign]
        made.reader.query = made.source.range_series
        made.reader.families = [GPU, CPU]
        return made

    monkeypatch.setattr(window_sources, "IncrementalSource", two_families)

    def sources() -> WindowSources:
        return WindowSources(
            lambda: PrometheusSource(PrometheusConfig(url="http://prometheus.invalid")),
            budget_seconds=60,
            step_seconds=STEP,
            recorded_series=False,
            state=StateDir(tmp_path),
            save_every_seconds=300,
            clock=lambda: clock[0],
        )

    first = sources()
    reader = first.source(WINDOW, start).reader
    assert "no saved state for the 3600 s window" in caplog.text
    assert not first.save(WINDOW)  # nothing to save before the backfill is done
    while not reader.complete:
        reader.read(NOW)
    assert first.save(WINDOW)  # complete and never saved: due
    assert not first.save(WINDOW)  # saved just now
    clock[0] = 301.0
    assert first.save(WINDOW)
    path = StateDir(tmp_path).path(WINDOW)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left

    restored = sources().source(WINDOW, datetime.fromtimestamp(NOW + 300, tz=UTC))
    assert restored.reader.restored_series == len(reader.store) == 6
    assert "restored the 3600 s window" in caplog.text

    cold = sources().source(WINDOW, datetime.fromtimestamp(NOW + 2 * WINDOW, tz=UTC))
    assert cold.reader.restored_series == 0 and len(cold.reader.store) == 0
    assert "more than the 3600 s window" in caplog.text

    path.write_bytes(b"garbage " * 10)
    assert sources().source(WINDOW, start).reader.restored_series == 0
    assert "bad magic" in caplog.text

    later = sources()
    later.source(WINDOW, start)
    assert later.keep_only(set()) == [WINDOW]
    assert not path.exists()  # a window no workload uses any more leaves no state behind


def test_state_flags_and_environment_reach_the_window_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    monkeypatch.setenv("GPURS_STATE_SAVE_INTERVAL", "10m")
    cfg = OperatorConfig.from_args(
        parser.parse_args(["--prometheus-url", "http://p:9090", "--state-dir", "/var/lib/gpu-rightsizer"])
    )
    assert (cfg.state_dir, cfg.state_save_interval_seconds) == ("/var/lib/gpu-rightsizer", 600.0)
    made = window_sources_for(cfg)
    assert made is not None and made.state is not None
    assert (made.state.directory, made.save_every_seconds) == (Path("/var/lib/gpu-rightsizer"), 600.0)
    off = window_sources_for(OperatorConfig.from_args(parser.parse_args(["--prometheus-url", "http://p"])))
    assert off is not None and off.state is None  # no directory: nothing is saved


def test_a_failed_save_is_logged_and_tried_again_after_the_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [0.0]
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the directory should be")
    windows = WindowSources(
        lambda: PrometheusSource(PrometheusConfig(url="http://prometheus.invalid")),
        budget_seconds=60,
        step_seconds=STEP,
        recorded_series=False,
        state=StateDir(blocked),
        clock=lambda: clock[0],
    )
    source = _source(FakeTSDB())
    source.reader.families = [GPU, CPU]
    windows.sources[WINDOW] = source
    while not source.reader.complete:
        source.reader.read(NOW)
    assert not windows.save(WINDOW)
    assert "saving the 3600 s window's state failed" in caplog.text
    caplog.clear()
    clock[0] = 60.0
    assert not windows.save(WINDOW) and not caplog.text  # not every cycle
    assert windows.save_all() == 0 and "failed" in caplog.text  # shutdown tries regardless


def test_shutdown_saves_every_window_after_the_last_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    saved: list[str] = []

    class Windows(FakeSource):
        def save_all(self) -> int:
            saved.append("all")
            return 1

    context = OperatorContext(config=OperatorConfig(), kube=object())  # type: ignore[arg-type]
    context.source = Windows(list)
    memo = kopf.Memo(context=context)
    asyncio.run(recommender.operator_cleanup(memo=memo))
    assert saved == ["all"] and context.stop.is_set()
