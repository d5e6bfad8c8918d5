"""Streaming reader for the Prometheus text and OpenMetrics exposition formats.

`analyze --openmetrics` reads dumps of any size: a file (plain or gzip, told apart by its magic bytes) is
read one line at a time, so memory follows the number of distinct series, not the file's size, and a gzip
stream stops once it has expanded past `ReadLimits.max_bytes`. Every malformed input ends in one
`OpenMetricsError` that names the file, the line and what is wrong; nothing else escapes.

Two formats, one grammar for sample lines (`name{label="value",...} value [timestamp]`): a text whose
last line is `# EOF` is OpenMetrics, with timestamps in seconds; any other is the Prometheus text format,
whose timestamps are milliseconds. As the format is known only at the end, a file is read twice: `scan`
learns the format and the time range, `samples` then yields the samples with timestamps in seconds.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

#: (metric name, labels, value, timestamp in seconds or None)
ParsedSample = tuple[str, dict[str, str], float, float | None]

_GZIP_MAGIC = b"\x1f\x8b"
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
#: Sample timestamps outside these seconds are not a recording of a real cluster (and would overflow a
#: datetime): 1970-01-01 up to 2100-01-01.
TIMESTAMP_MIN = 0.0
TIMESTAMP_MAX = 4_102_444_800.0
_MS_PER_SECOND = 1000.0
#: Distinct series whose parsed labels are remembered; past it the cache starts over (bounded memory).
_SERIES_CACHE = 100_000


class OpenMetricsError(ValueError):
    """The file cannot be read as OpenMetrics or Prometheus text."""


@dataclass(frozen=True)
class ReadLimits:
    """What reading one file may cost."""

    max_bytes: int = 4 * 2**30  # text after decompression
    max_line_bytes: int = 2**20


# --- lines --------------------------------------------------------------------------------------------
class _Bounded(io.RawIOBase):
    """A byte stream that fails once more than `limit` bytes came out of it (a gzip bomb stops there)."""

    def __init__(self, inner: BinaryIO, limit: int, origin: str, compressed: bool) -> None:
        self.inner, self.limit, self.origin, self.compressed = inner, limit, origin, compressed
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        try:
            data = self.inner.read(len(buffer))
        except (OSError, EOFError, zlib.error) as error:
            raise OpenMetricsError(f"{self.origin}: broken gzip stream: {error}") from error
        self.total += len(data)
        if self.total > self.limit:
            what = "expands to" if self.compressed else "has"
            raise OpenMetricsError(
                f"{self.origin}: {what} more than {self.limit} bytes of text, the limit for one file"
                + (" (a gzip bomb?)" if self.compressed else "")
            )
        buffer[: len(data)] = data
        return len(data)


@contextlib.contextmanager
def open_lines(path: Path, limits: ReadLimits) -> Iterator[Iterator[tuple[int, str]]]:
    """(line number, line without its end) of a plain or gzipped text file, read incrementally."""
    origin = str(path)
    try:
        raw: BinaryIO = path.open("rb")
    except OSError as error:
        raise OpenMetricsError(f"{origin}: cannot read: {error.strerror or error}") from error
    with contextlib.ExitStack() as stack:
        stack.enter_context(raw)
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        inner: BinaryIO = raw
        if compressed:
            inner = cast("BinaryIO", stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")))
        reader = io.BufferedReader(_Bounded(inner, limits.max_bytes, origin, compressed), buffer_size=1 << 16)
        yield _decoded_lines(reader, origin, limits.max_line_bytes)


def _decoded_lines(
    reader: BinaryIO | io.BufferedReader, origin: str, max_line: int
) -> Iterator[tuple[int, str]]:
    number = 0
    while True:
        chunk = reader.readline(max_line + 1)
        if not chunk:
            return
        number += 1
        if len(chunk) > max_line and not chunk.endswith(b"\n"):
            raise OpenMetricsError(f"{origin}:{number}: line longer than {max_line} bytes")
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as error:
            raise OpenMetricsError(
                f"{origin}:{number}: not UTF-8 text ({error.reason} at byte {error.start})"
            ) from error
        yield number, text.rstrip("\r\n")


def _text_lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.split("\n"), start=1):
        yield number, line.rstrip("\r")


# --- one line -----------------------------------------------------------------------------------------
class _Parser:
    """Parses sample and metadata lines; remembers each series' parsed labels."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.series: dict[str, tuple[str, dict[str, str]]] = {}
        self.types: dict[str, int] = {}  # family → line of its TYPE
        self.eof_line: int | None = None
        self.samples = 0

    def fail(self, number: int, what: str) -> OpenMetricsError:
        return OpenMetricsError(f"{self.origin}:{number}: {what}")

    def line(self, number: int, line: str) -> tuple[str, dict[str, str], str, str | None] | None:
        """(name, labels, value text, timestamp text) of a sample line; None for any other line."""
        if not line.strip():
            return None
        if self.eof_line is not None:
            raise self.fail(number, f"content after '# EOF' (line {self.eof_line})")
        if line[0] in " \t":
            line = line.lstrip()
        if line.startswith("#"):
            self._comment(number, line)
            return None
        end = self._series_end(number, line)
        prefix = line[:end]
        known = self.series.get(prefix)
        if known is None:
            known = self._parse_series(number, prefix)
            if len(self.series) >= _SERIES_CACHE:
                self.series.clear()
            self.series[prefix] = known
        fields = line[end:].split()
        if "#" in fields:  # OpenMetrics exemplar: "value [timestamp] # {labels} value [timestamp]"
            fields = fields[: fields.index("#")]
        if not 1 <= len(fields) <= 2:
            raise self.fail(number, f"expected a value and an optional timestamp after {prefix[:80]!r}")
        self.samples += 1
        return known[0], known[1], fields[0], fields[1] if len(fields) == 2 else None

    def _comment(self, number: int, line: str) -> None:
        parts = line.split(None, 3)
        if line.rstrip() == "# EOF":
            self.eof_line = number
        elif len(parts) >= 3 and parts[1] == "TYPE":
            family = parts[2]
            if family in self.types:
                raise self.fail(
                    number,
                    f"Clashing name: second TYPE line for {family} (first on line {self.types[family]})",
                )
            self.types[family] = number

    def _series_end(self, number: int, line: str) -> int:
        """Index just past the series (name and label block) at the start of a sample line."""
        brace = line.find("{")
        space = line.find(" ")
        if brace < 0 or (0 <= space < brace):
            if space < 0:
                raise self.fail(number, f"no value after the series {line[:80]!r}")
            return space
        close = line.rfind("}")
        if close > brace and "#" not in line:
            # no exemplar, and values and timestamps hold no '}': the last one closes the label block (a
            # '}' inside a label value that is not closed fails when the block is parsed)
            return close + 1
        index, quoted = brace + 1, False
        while index < len(line):
            char = line[index]
            if quoted:
                if char == "\\":
                    index += 1
                elif char == '"':
                    quoted = False
            elif char == '"':
                quoted = True
            elif char == "}":
                return index + 1
            index += 1
        raise self.fail(number, "Invalid labels: no closing '}'")

    def _parse_series(self, number: int, prefix: str) -> tuple[str, dict[str, str]]:
        brace = prefix.find("{")
        name = prefix if brace < 0 else prefix[:brace]
        labels: dict[str, str] = {}
        if brace >= 0:
            quoted = self._labels(number, prefix[brace + 1 : -1], labels)
            if quoted is not None:
                if name:
                    raise self.fail(number, "Invalid labels: a second metric name")
                name = quoted
        if not (_METRIC_NAME.fullmatch(name) or (brace == 0 and name)):
            raise self.fail(number, f"invalid metric name {name!r}")
        return name, labels

    def _labels(self, number: int, block: str, labels: dict[str, str]) -> str | None:
        """Fill `labels` from the inside of a label block; returns a metric name quoted there, if any."""
        name: str | None = None
        index = 0
        while index < len(block):
            while index < len(block) and block[index] in " \t":
                index += 1
            if index >= len(block):
                break
            if block[index] == '"':  # a quoted metric name (UTF-8 names): {"my.metric", label="v"}
                text, index = self._quoted(number, block, index)
                if name is not None:
                    raise self.fail(number, "Invalid labels: a second metric name")
                name = text
            else:
                match = _LABEL_NAME.match(block, index)
                if match is None:
                    raise self.fail(
                        number, f"Invalid labels: bad label name at {block[index : index + 20]!r}"
                    )
                key, index = match.group(), match.end()
                if block[index : index + 1] != "=":
                    raise self.fail(number, f"Invalid labels: expected '=' after {key}")
                if block[index + 1 : index + 2] != '"':
                    raise self.fail(number, f"Invalid labels: the value of {key} is not quoted")
                value, index = self._quoted(number, block, index + 1)
                if key in labels:
                    raise self.fail(number, f"Invalid labels: {key} given twice")
                labels[key] = value
            while index < len(block) and block[index] in " \t":
                index += 1
            if index < len(block):
                if block[index] != ",":
                    raise self.fail(number, f"Invalid labels: expected ',' at {block[index : index + 20]!r}")
                index += 1
        return name

    def _quoted(self, number: int, block: str, index: int) -> tuple[str, int]:
        """The unescaped string starting at the quote `block[index]`, and the index past its end."""
        out: list[str] = []
        index += 1
        while index < len(block):
            char = block[index]
            if char == "\\":
                escaped = block[index + 1 : index + 2]
                if escaped not in _ESCAPES:
                    raise self.fail(number, f"Invalid labels: unknown escape '\\{escaped}'")
                out.append(_ESCAPES[escaped])
                index += 2
            elif char == '"':
                return "".join(out), index + 1
            else:
                out.append(char)
                index += 1
        raise self.fail(number, "Invalid labels: unterminated string")


def _number(parser: _Parser, number: int, text: str, what: str) -> float:
    """A value or timestamp as the formats spell it: decimal or exponent, NaN, +Inf, -Inf."""
    try:
        if "_" in text:  # float() reads '1_000'; the formats do not
            raise ValueError(text)
        return float(text)
    except ValueError:
        raise parser.fail(number, f"bad number for the {what}: {text[:40]!r}") from None


def _timestamp(parser: _Parser, number: int, text: str, scale: float) -> float:
    raw = _number(parser, number, text, "timestamp")
    if not math.isfinite(raw):
        raise parser.fail(number, f"the timestamp {text!r} is not a finite number")
    seconds = raw / scale
    if not TIMESTAMP_MIN <= seconds < TIMESTAMP_MAX:
        hint = " (milliseconds in an OpenMetrics file?)" if scale == 1.0 and seconds > TIMESTAMP_MAX else ""
        raise parser.fail(number, f"the timestamp {text} is not between 1970 and 2100{hint}")
    return seconds


# --- whole files ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileFacts:
    """What a first pass over a file learned: its format, and the time range of its samples."""

    openmetrics: bool
    samples: int
    oldest: float | None  # seconds; None when no sample has a timestamp
    newest: float | None
    untimestamped: bool  # some samples carry no timestamp (a live scrape)

    @property
    def kind(self) -> str:
        return "OpenMetrics" if self.openmetrics else "Prometheus text format"


def _scan_lines(lines: Iterator[tuple[int, str]], origin: str) -> FileFacts:
    parser = _Parser(origin)
    oldest: tuple[float, int, str] | None = None
    newest: tuple[float, int, str] | None = None
    untimestamped, last = False, None
    for number, line in lines:
        if line.strip():
            last = line
        parsed = parser.line(number, line)
        if parsed is None:
            continue
        _number(parser, number, parsed[2], "value")
        if parsed[3] is None:
            untimestamped = True
            continue
        raw = _number(parser, number, parsed[3], "timestamp")
        if not math.isfinite(raw):
            raise parser.fail(number, f"the timestamp {parsed[3]!r} is not a finite number")
        if oldest is None or raw < oldest[0]:
            oldest = (raw, number, parsed[3])
        if newest is None or raw > newest[0]:
            newest = (raw, number, parsed[3])
    if last is None:
        raise OpenMetricsError(f"{origin}: the file is empty")
    openmetrics = last.rstrip() == "# EOF"
    scale = 1.0 if openmetrics else _MS_PER_SECOND
    for extreme in (oldest, newest):  # the format decides the unit: check the range now
        if extreme is not None:
            _timestamp(parser, extreme[1], extreme[2], scale)
    return FileFacts(
        openmetrics=openmetrics,
        samples=parser.samples,
        oldest=oldest[0] / scale if oldest else None,
        newest=newest[0] / scale if newest else None,
        untimestamped=untimestamped,
    )


def _sample_lines(lines: Iterator[tuple[int, str]], origin: str, facts: FileFacts) -> Iterator[ParsedSample]:
    parser = _Parser(origin)
    scale = 1.0 if facts.openmetrics else _MS_PER_SECOND
    for number, line in lines:
        parsed = parser.line(number, line)
        if parsed is None:
            continue
        name, labels, value, timestamp = parsed
        yield (
            name,
            labels,
            _number(parser, number, value, "value"),
            _timestamp(parser, number, timestamp, scale) if timestamp is not None else None,
        )


def scan(path: Path, limits: ReadLimits | None = None) -> FileFacts:
    """First pass over a file: validate every line, learn the format and the time range."""
    with open_lines(path, limits or ReadLimits()) as lines:
        return _scan_lines(lines, str(path))


def samples(path: Path, facts: FileFacts, limits: ReadLimits | None = None) -> Iterator[ParsedSample]:
    """Every sample of a scanned file, timestamps in seconds, one line at a time."""
    with open_lines(path, limits or ReadLimits()) as lines:
        yield from _sample_lines(lines, str(path), facts)


def samples_of(path: Path, names: frozenset[str], limits: ReadLimits | None = None) -> Iterator[ParsedSample]:
    """The samples of the metrics in `names` only (both passes streamed; e.g. node series for capacity)."""
    bounds = limits or ReadLimits()
    facts = scan(path, bounds)
    for sample in samples(path, facts, bounds):
        if sample[0] in names:
            yield sample


def parse_text(text: str, origin: str = "<text>") -> Iterator[ParsedSample]:
    """Every sample of a text already in memory (OpenMetrics when it ends in `# EOF`)."""
    facts = _scan_lines(_text_lines(text), origin)
    return _sample_lines(_text_lines(text), origin, facts)
