"""Prometheus range answers decoded without a Python object per sample.

Why: a cold start's backfill answers hold every sample of the window for thousands of series. Decoded
as JSON (what prometheus-api-client does), each sample is a list, a float and a string, about 150 bytes
where the answer spends about 35, and the four answers in flight set the recommender's peak memory.
Here the answer is decoded by msgspec with a typed schema: the series' labels become a dict, its
samples stay the answer's own bytes (`msgspec.Raw`, no copy) until the series is ingested, and are
then decoded into two typed arrays, one series at a time.

Garbage (not JSON, not a matrix, a label that is not a string, a sample that is not a [time, "value"]
pair or whose value is not a number) raises `AnswerError` saying what is wrong; nothing is returned.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any, overload

import msgspec


class AnswerError(ValueError):
    """A range answer that is not a well-formed Prometheus matrix."""


class RangeSeries(msgspec.Struct, frozen=True, gc=False):
    """One series of a range answer: its labels, and its samples as the answer sent them."""

    metric: dict[str, str]
    #: The `[[time, "value"], ...]` text of the answer (decoded by `samples`).
    values: msgspec.Raw = msgspec.Raw(b"[]")


class _Matrix(msgspec.Struct, gc=False):
    resultType: str  # noqa: N815 (Prometheus' field name)
    result: list[RangeSeries]


class _Answer(msgspec.Struct, gc=False):
    status: str
    data: _Matrix


_ANSWER = msgspec.json.Decoder(_Answer)
#: Values as numbers straight from their strings ("NaN" and "Inf" too) ...
_NUMBERS = msgspec.json.Decoder(list[tuple[float, float]], strict=False)
#: ... and as strings where that fails ("+Inf", or garbage that `float` then names).
_STRINGS = msgspec.json.Decoder(list[tuple[float, str]])
_TIME, _VALUE = itemgetter(0), itemgetter(1)


def decode_matrix(body: bytes) -> list[RangeSeries]:
    """The series of a `/api/v1/query_range` answer body; `AnswerError` when it is not one."""
    try:
        answer = _ANSWER.decode(body)
    except msgspec.DecodeError as error:
        raise AnswerError(f"not a Prometheus range answer: {error}") from error
    if answer.status != "success" or answer.data.resultType != "matrix":
        raise AnswerError(
            f"not a Prometheus range answer: status {answer.status!r}, result type {answer.data.resultType!r}"
        )
    return answer.data.result


class _AnyData(msgspec.Struct, gc=False):
    resultType: str  # noqa: N815 (Prometheus' field name)
    result: Any


class _AnyAnswer(msgspec.Struct, gc=False):
    status: str
    data: _AnyData


_ANY_ANSWER = msgspec.json.Decoder(_AnyAnswer)


def decode_result(body: bytes) -> Any:
    """The `data.result` of a `/api/v1/query` answer body as plain Python objects (a vector's
    `[{"metric": {...}, "value": [t, "v"]}, ...]`), decoded by msgspec: what prometheus-api-client's
    `custom_query` returns, in a third of the stdlib decoder's time. `AnswerError` when it is not one."""
    try:
        answer = _ANY_ANSWER.decode(body)
    except msgspec.DecodeError as error:
        raise AnswerError(f"not a Prometheus answer: {error}") from error
    if answer.status != "success":
        raise AnswerError(f"not a Prometheus answer: status {answer.status!r}")
    return answer.data.result


def samples(series: RangeSeries) -> tuple[array[float], array[float]]:
    """The series' sample times and values (NaN, +Inf and -Inf as floats), in the answer's order."""
    try:
        pairs: Sequence[tuple[float, Any]] = _NUMBERS.decode(series.values)
    except msgspec.DecodeError:
        try:
            pairs = _STRINGS.decode(series.values)
        except msgspec.DecodeError as error:
            raise AnswerError(f"malformed samples of {series.metric}: {error}") from error
        try:
            return array("d", map(_TIME, pairs)), array("d", map(float, map(_VALUE, pairs)))
        except ValueError as error:
            raise AnswerError(f"a sample of {series.metric} is not a number: {error}") from error
    return array("d", map(_TIME, pairs)), array("d", map(_VALUE, pairs))


class SamplePairs(Sequence[tuple[float, float]]):
    """(time, value) pairs held as one flat `array('d')` `[t0, v0, t1, v1, ...]`: 16 bytes a sample,
    where a list of tuples of floats spends about 100. A pair is built only when it is read."""

    __slots__ = ("_flat",)

    def __init__(self, flat: array[float]) -> None:
        if len(flat) % 2:
            raise AnswerError(f"{len(flat)} numbers are not (time, value) pairs")
        self._flat = flat

    @classmethod
    def of(cls, pairs: Iterable[Sequence[Any]]) -> SamplePairs:
        """From `[time, value]` pairs (numbers or their strings); `AnswerError` if one is not."""
        try:
            return cls(array("d", chain.from_iterable((float(t), float(v)) for t, v in pairs)))
        except (TypeError, ValueError) as error:
            raise AnswerError(f"malformed samples: {error}") from error

    def __len__(self) -> int:
        return len(self._flat) // 2

    @overload
    def __getitem__(self, index: int) -> tuple[float, float]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[float, float]]: ...
    def __getitem__(self, index: int | slice) -> tuple[float, float] | list[tuple[float, float]]:
        if isinstance(index, slice):
            return list(self)[index]
        count = len(self)
        position = index + count if index < 0 else index
        if not 0 <= position < count:
            raise IndexError(index)
        return self._flat[2 * position], self._flat[2 * position + 1]

    def __iter__(self) -> Iterator[tuple[float, float]]:
        numbers = iter(self._flat)
        return zip(numbers, numbers, strict=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable contents, like a list

    def __repr__(self) -> str:
        return f"SamplePairs({list(self)!r})"


def matrix_of(rows: Sequence[Mapping[str, Any]]) -> list[RangeSeries]:
    """PromQL matrix rows (`{"metric": {...}, "values": [[t, "v"], ...]}`, as recorded or faked) as
    `decode_matrix` gives them: through the same decoder, so they are checked the same way."""
    answer = {"status": "success", "data": {"resultType": "matrix", "result": list(rows)}}
    return decode_matrix(msgspec.json.encode(answer))
