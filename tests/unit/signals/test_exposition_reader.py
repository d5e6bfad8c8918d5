"""`analyze --openmetrics` input: streamed, bounded, and a clear error for every malformed input.

Every error names the file and the line and says what is wrong; no input, however broken, ends in a
traceback (a hypothesis property over arbitrary bytes and over mutated valid files).
"""

from __future__ import annotations

import gzip
import math
import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from gpu_rightsizer.adapters import exposition
from gpu_rightsizer.adapters.exposition import OpenMetricsError, ReadLimits, parse_text
from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.commands import analyze
from gpu_rightsizer.model.observation import WorkloadWindow

TS = 1_767_225_600  # 2026-01-01T00:00:00Z
GOOD = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod="a",namespace="ml",UUID="GPU-1"} 0.5 '


def _write(path: Path, text: str, *, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


@pytest.mark.parametrize(
    ("body", "line", "fragment"),
    [
        ('m{a="1" 1 100', 2, "Invalid labels"),
        ("m{a=1} 1 100", 2, "not quoted"),
        ('m{a="x\\q"} 1 100', 2, "unknown escape"),
        ('m{a="1",a="2"} 1 100', 2, "given twice"),
        ('m{="1"} 1 100', 2, "bad label name"),
        ("9m 1 100", 2, "invalid metric name"),
        ("m", 2, "no value"),
        ("m 1 2 3", 2, "expected a value"),
        ("m busy 100", 2, "bad number for the value"),
        ("m 1_000 100", 2, "bad number for the value"),
        ("m 1 soon", 2, "bad number for the timestamp"),
        ("m 1 +Inf", 2, "not a finite number"),
        ("m 1 NaN", 2, "not a finite number"),
        ("m 1 1e300", 2, "between 1970 and 2100"),
        ("m 1 -5", 2, "between 1970 and 2100"),
        (f"m 1 {TS}000", 2, "milliseconds in an OpenMetrics file"),
        ("# TYPE m gauge\nm 1 100", 2, "Clashing name"),
    ],
)
def test_malformed_lines_name_the_file_the_line_and_the_fault(
    tmp_path: Path, body: str, line: int, fragment: str
) -> None:
    path = _write(tmp_path / "bad.om", f"# TYPE m gauge\n{body}\n# EOF\n")
    with pytest.raises(OpenMetricsError, match=re.escape(fragment)) as caught:
        read_openmetrics(path, window_seconds=3600)
    assert str(caught.value).startswith(f"{path}:{line}: ")


def test_content_after_eof_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "late.om", f"# EOF\n{GOOD}{TS}\n# EOF\n")
    with pytest.raises(
        OpenMetricsError, match=rf"{re.escape(str(path))}:2: content after '# EOF' \(line 1\)"
    ):
        read_openmetrics(path)


def test_prometheus_text_timestamps_are_milliseconds(tmp_path: Path) -> None:
    """The Prometheus text format stamps samples in ms, OpenMetrics in seconds."""
    prom = list(parse_text(f"{GOOD}{TS}000\n"))
    om = list(parse_text(f"{GOOD}{TS}\n# EOF\n"))
    assert prom[0][3] == om[0][3] == float(TS)
    path = _write(tmp_path / "scrape.prom", f"{GOOD}{TS}000\n{GOOD}{TS + 60}000\n")
    facts = exposition.scan(path)
    assert (facts.openmetrics, facts.oldest, facts.newest) == (False, float(TS), float(TS + 60))


def test_leading_whitespace_and_blank_lines_are_tolerated() -> None:
    assert [(n, v, t) for n, _, v, t in parse_text(f"\n  {GOOD}{TS}\n\n# EOF\n\n")] == [
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.5, float(TS))
    ]


def test_exemplars_and_quoted_names_are_read(tmp_path: Path) -> None:
    text = (
        '# TYPE rpc_total counter\nrpc_total{code="200"} 7 100 # {trace_id="a}b"} 1 100\n'
        '{"my.metric", le="x # y"} 2 100\n# EOF\n'
    )
    assert [(n, lab, v, t) for n, lab, v, t in parse_text(text)] == [
        ("rpc_total", {"code": "200"}, 7.0, 100.0),
        ("my.metric", {"le": "x # y"}, 2.0, 100.0),
    ]


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(OpenMetricsError, match="cannot read"):
        read_openmetrics(tmp_path / "absent.om")
    (tmp_path / "bin.om").write_bytes(b"# TYPE m gauge\nm \xff 1\n")
    with pytest.raises(OpenMetricsError, match=r"bin\.om:2: not UTF-8"):
        read_openmetrics(tmp_path / "bin.om", window_seconds=60)
    with pytest.raises(OpenMetricsError, match=r"long\.om:1: line longer than 64 bytes"):
        read_openmetrics(
            _write(tmp_path / "long.om", "m" * 100 + " 1\n"), limits=ReadLimits(max_line_bytes=64)
        )
    whole = gzip.compress(f"{GOOD}{TS}\n# EOF\n".encode() * 50)
    (tmp_path / "cut.om.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(OpenMetricsError, match="broken gzip stream"):
        read_openmetrics(tmp_path / "cut.om.gz")


def test_gzip_expansion_is_bounded(tmp_path: Path) -> None:
    """A small gzip that expands past the limit stops there (about 1000:1 for deflate)."""
    bomb = tmp_path / "bomb.om.gz"
    with gzip.open(bomb, "wb") as out:
        for _ in range(64):
            out.write(b"#" * 2**20 + b"\n")
    assert bomb.stat().st_size < 2**20
    with pytest.raises(OpenMetricsError, match="expands to more than 8388608 bytes"):
        read_openmetrics(bomb, limits=ReadLimits(max_bytes=8 * 2**20, max_line_bytes=2**21))
    plain = _write(tmp_path / "plain.om", f"{GOOD}{TS}\n" * 100 + "# EOF\n")
    with pytest.raises(OpenMetricsError, match="has more than 1000 bytes"):
        read_openmetrics(plain, limits=ReadLimits(max_bytes=1000))


def test_gzipped_and_plain_files_read_the_same(tmp_path: Path) -> None:
    text = "".join(f"{GOOD.replace('0.5', str(i / 100))}{TS + 60 * i}\n" for i in range(60)) + "# EOF\n"
    plain = read_openmetrics(_write(tmp_path / "a.om", text))
    packed = read_openmetrics(_write(tmp_path / "a.om.gz", text, gz=True))  # the name does not matter
    renamed = read_openmetrics(_write(tmp_path / "b.om", text, gz=True))
    assert plain == packed == renamed and plain


def test_memory_follows_the_window_not_the_file(tmp_path: Path) -> None:
    """20 MB of samples outside the window (or of series nobody reads) cost next to nothing."""
    lines = [
        f'other_metric{{shard="{i % 500}",pod="p{i % 500}"}} {i} {TS - 86_400 + i}\n' for i in range(400_000)
    ]
    path = tmp_path / "large.om"
    path.write_text("".join(lines) + f"{GOOD}{TS}\n# EOF\n")
    assert path.stat().st_size > 20 * 2**20
    tracemalloc.start()
    try:
        read_openmetrics(path, window_seconds=600)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_samples_of_some_metrics_from_a_gzipped_file(tmp_path: Path) -> None:
    text = (
        f'kube_node_labels{{node="n1"}} 1 {TS}\n{GOOD}{TS}\nkube_node_labels{{node="n2"}} 1 {TS + 1}\n# EOF\n'
    )
    path = _write(tmp_path / "nodes.om", text, gz=True)
    got = list(exposition.samples_of(path, frozenset({"kube_node_labels"})))
    assert [(n, lab["node"], t) for n, lab, _, t in got] == [
        ("kube_node_labels", "n1", float(TS)),
        ("kube_node_labels", "n2", float(TS + 1)),
    ]


def test_absurd_at_is_an_argument_error() -> None:
    for text in ("inf", "1e300", "nan"):
        with pytest.raises(Exception, match="invalid time") as caught:
            analyze.parse_time(text)
        assert type(caught.value).__name__ == "ArgumentTypeError"


def _read_or_error(path: Path) -> list[WorkloadWindow] | OpenMetricsError:
    try:
        return read_openmetrics(path, window_seconds=3600)
    except OpenMetricsError as error:
        return error


# --- fuzzing -----------------------------------------------------------------------------------------------
_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(data=hs.binary(max_size=400), gz=hs.booleans())
def test_arbitrary_bytes_never_escape_as_anything_but_a_clear_error(
    tmp_path: Path, data: bytes, gz: bool
) -> None:
    path = tmp_path / "fuzz.om"
    path.write_bytes(gzip.compress(data) if gz else data)
    outcome = _read_or_error(path)
    if isinstance(outcome, OpenMetricsError):
        assert str(outcome).startswith(str(path))
    else:
        assert isinstance(outcome, list)


_VALID = (
    "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio.\n# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
    + "".join(
        f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{pod="a",namespace="ml",UUID="GPU-1"}} 0.{i} {TS + 60 * i}\n'
        for i in range(9)
    )
    + '# TYPE kube_pod_owner gauge\nkube_pod_owner{namespace="ml",pod="a",owner_kind="Job",owner_name="j"} 1 '
    + f"{TS}\n# EOF\n"
)
_PIECES = [
    "{",
    "}",
    '"',
    "\\",
    ",",
    "=",
    " ",
    "\n",
    "#",
    "# EOF",
    "NaN",
    "+Inf",
    "-Inf",
    "1e999",
    "0x1",
    "é",
    "\x00",
    "1767225600000",
]


@_FUZZ
@given(
    cuts=hs.lists(
        hs.tuples(hs.integers(0, len(_VALID)), hs.integers(0, 6), hs.sampled_from(_PIECES)),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_files_read_or_fail_with_file_and_line(
    tmp_path: Path, cuts: list[tuple[int, int, str]]
) -> None:
    text = _VALID
    for position, drop, piece in cuts:
        at = min(position, len(text))
        text = text[:at] + piece + text[at + drop :]
    path = tmp_path / "mutated.om"
    path.write_text(text, encoding="utf-8")
    outcome = _read_or_error(path)
    if isinstance(outcome, OpenMetricsError):
        assert re.match(rf"{re.escape(str(path))}(:\d+)?: \S", str(outcome)), str(outcome)
    else:
        for window in outcome:
            assert math.isfinite(window.start.timestamp()) and window.start <= window.end
