"""Range answers decoded as typed arrays: the same samples as the JSON decoding, garbage refused."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpu_rightsizer.adapters.incremental import Family, IncrementalReader
from gpu_rightsizer.adapters.prom_answers import (
    AnswerError,
    SamplePairs,
    decode_matrix,
    decode_result,
    matrix_of,
    samples,
)
from gpu_rightsizer.model.observation import Signal

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "prometheus"
NOW = 1_767_225_600.0


def _old_decoding(body: bytes) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """What the reader did before: prometheus-api-client's JSON, then float() of every pair."""
    rows = json.loads(body)["data"]["result"]
    return [(row["metric"], [(float(t), float(v)) for t, v in row.get("values") or []]) for row in rows]


def _new_decoding(body: bytes) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    out = []
    for series in decode_matrix(body):
        times, values = samples(series)
        out.append((series.metric, list(zip(times, values, strict=True))))
    return out


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _recorded_matrices() -> list[bytes]:
    bodies = []
    for name in ("answers.json", "answers-pod-replaced.json"):
        for answer in json.loads((FIXTURES / name).read_text()).values():
            if isinstance(answer, dict) and answer.get("data", {}).get("resultType") == "matrix":
                bodies.append(json.dumps(answer).encode())
    return bodies


def _body(values: list[list[Any]], metric: dict[str, Any] | None = None) -> bytes:
    row = {"metric": metric or {"namespace": "ml", "pod": "p-0"}, "values": values}
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [row]}}).encode()


def test_recorded_range_answers_decode_to_the_same_samples() -> None:
    bodies = _recorded_matrices()
    assert len(bodies) >= 10
    for body in bodies:
        old, new = _old_decoding(body), _new_decoding(body)
        assert [labels for labels, _ in new] == [labels for labels, _ in old]
        assert sum(len(points) for _, points in new) > 0 or not old
        for (_, mine), (_, theirs) in zip(new, old, strict=True):
            assert len(mine) == len(theirs)
            assert all(t1 == t2 and _same(v1, v2) for (t1, v1), (t2, v2) in zip(mine, theirs, strict=True))


def test_nan_infinities_and_odd_numbers_decode_as_float_reads_them() -> None:
    strings = ["NaN", "+Inf", "-Inf", "0", "-0", "1e-07", "0.1", "123456789.123456789", "9.2e18", "5e-324"]
    body = _body([[1767225600 + 60 * i, text] for i, text in enumerate(strings)] + [[1767226500.5, "2"]])
    ((_, new),) = _new_decoding(body)
    ((_, old),) = _old_decoding(body)
    assert [t for t, _ in new] == [t for t, _ in old]
    assert all(_same(a, b) for (_, a), (_, b) in zip(new, old, strict=True))
    assert math.isnan(new[0][1]) and new[1][1] == math.inf and new[2][1] == -math.inf
    # a series without "+Inf" takes the fast path; it must agree with float() too
    plain = _body([[1767225600 + i, repr(0.1 * i + 1e-9 * i * i)] for i in range(500)])
    assert _new_decoding(plain) == _old_decoding(plain)


def test_an_empty_result_and_a_series_without_samples_decode_to_nothing() -> None:
    empty = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
    assert decode_matrix(empty) == []
    no_values = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"a"}}]}}'
    (series,) = decode_matrix(no_values)
    assert series.metric == {"pod": "a"} and [len(part) for part in samples(series)] == [0, 0]


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b"",
        b'{"status":"success","data":{"resultType":"vector","result":[]}}',
        b'{"status":"error","errorType":"bad_data","error":"parse error"}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"values":[]}]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":3},"values":[]}]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":{"metric":{}}}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"2"]]',
    ],
)
def test_a_garbage_answer_is_refused_with_a_message(body: bytes) -> None:
    with pytest.raises(AnswerError, match="not a Prometheus range answer"):
        decode_matrix(body)


@pytest.mark.parametrize(
    "values",
    [
        [[1767225600, "abc"]],
        [[1767225600, "1", 3]],
        [[1767225600]],
        [[1767225600, None]],
        [[1767225600, True]],
        [["soon", "1"]],
        [[1767225600, "1"], "x"],
        {"t": 1},
    ],
)
def test_garbage_samples_are_refused_with_a_message(values: Any) -> None:
    (series,) = decode_matrix(_body(values))
    with pytest.raises(AnswerError, match=r"sample|not a number"):
        samples(series)


def test_a_garbage_answer_changes_no_window_and_is_reported() -> None:
    family = Family(
        name="gpu:busy", expression="busy", signal=Signal.GR_ENGINE_ACTIVE, keys=("namespace", "pod")
    )
    answers: list[Any] = []

    def query(what: str, _query: str, start: float, end: float, step: float) -> Any:
        return answers.pop(0)

    def good(start: float, end: float, pod: str = "p-0") -> list[dict[str, Any]]:
        points = [[start + i * 60.0, "0.5"] for i in range(round((end - start) / 60.0) + 1)]
        return [{"metric": {"namespace": "ml", "pod": pod}, "values": points}]

    reader = IncrementalReader(query, window_seconds=3600.0, step_seconds=60.0, families=[family])
    answers.append(matrix_of(good(NOW - 3600.0, NOW)))
    reader.read(NOW)
    assert reader.complete
    before = {key: window.figures(NOW) for key, window in reader.store.series.items()}
    # the next interval: one good series, then one whose sample is not a number
    answers.append(
        matrix_of(
            [
                *good(NOW + 60.0, NOW + 120.0, "p-1"),
                {
                    "metric": {"namespace": "ml", "pod": "p-0"},
                    "values": [[NOW + 60.0, "0.7"], [NOW + 120, "x"]],
                },
            ]
        )
    )
    report = reader.read(NOW + 120.0)
    assert report.chunks_failed == 1 and "not a number" in report.errors[0]
    assert {key: window.figures(NOW) for key, window in reader.store.series.items()} == before
    assert reader.last_end == NOW  # the interval is asked for again next cycle


def test_sample_pairs_read_like_the_list_of_tuples_they_replace() -> None:
    pairs = [[1767225600, "0.5"], [1767225660, "NaN"], [1767225720, "+Inf"]]
    old = [(float(t), float(v)) for t, v in pairs]
    compact = SamplePairs.of(pairs)
    assert len(compact) == 3 and compact[0] == old[0] and compact[-1] == old[-1]
    assert [t for t, _ in compact] == [t for t, _ in old] and compact[2:] == old[2:]
    assert math.isnan(compact[1][1])
    assert SamplePairs.of([]) == [] and not SamplePairs.of([])
    with pytest.raises(IndexError):
        compact[3]
    for garbage in ([[1, "x"]], [[1, "2", 3]], [[1]], [["soon", "1"]]):
        with pytest.raises(AnswerError, match="malformed samples"):
            SamplePairs.of(garbage)


def test_instant_answers_decode_as_the_stdlib_decoder_reads_them() -> None:
    """`decode_result` gives what `json.loads(body)["data"]["result"]` gives (the shape
    prometheus-api-client's `custom_query` returned), for a vector, a matrix and a scalar."""
    bodies = [
        {"resultType": "vector", "result": [{"metric": {"pod": "a"}, "value": [1767225540.5, "NaN"]}]},
        {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1e300"], [2, "+Inf"]]}]},
        {"resultType": "scalar", "result": [1, "3"]},
        {"resultType": "vector", "result": []},
    ]
    for data in bodies:
        body = json.dumps({"status": "success", "data": data}).encode()
        assert decode_result(body) == json.loads(body)["data"]["result"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<html>proxy error</html>",
        b'{"status": "error", "data": {"resultType": "", "result": []}}',
        b"[]",
    ],
)
def test_a_garbage_instant_answer_is_refused_with_a_message(body: bytes) -> None:
    with pytest.raises(AnswerError, match="not a Prometheus answer"):
        decode_result(body)
