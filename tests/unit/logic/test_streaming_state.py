"""Saving and loading a streaming store: identical figures after a round trip, bad files refused."""

from __future__ import annotations

import math
import struct
import zlib
from typing import Any

import pytest

from gpu_rightsizer.logic.streaming import (
    STATE_FORMAT,
    STATE_MAGIC,
    StateError,
    StreamingStore,
    dump_store,
    load_store,
)

WINDOW = 3600.0
STEP = 30.0
Key = tuple[str, tuple[tuple[str, str], ...]]


def _key_to_json(key: Key) -> Any:
    return [key[0], [list(pair) for pair in key[1]]]


def _store() -> StreamingStore[Key]:
    """Series of every kind: ratios with a sawtooth floor, an activity floor, negatives, zeros, a
    counter, and one whose old intervals have expired."""
    store: StreamingStore[Key] = StreamingStore(WINDOW, slots=12)
    start = 1_000_000.0
    for pod in range(5):
        labels = (("namespace", "ml"), ("pod", f"train-{pod}"))
        ratio = store.window(("gpu:util", labels), activity_floor=0.05)
        ratio.add((start + i * STEP, (i * (pod + 3)) % 17 / 17) for i in range(200))
        mixed = store.window(("pod:cpu", labels), activity_floor=0.1, sawtooth_floor=None)
        mixed.add((start + i * STEP, [-3.5, 0.0, 1e-9, 2.0, 1e6][i % 5] * (pod + 1)) for i in range(200))
        counter = store.window(("pod:rx", labels), sawtooth_floor=None)
        counter.add_counter((start + i * STEP, float(i * i % 1000)) for i in range(200))
    store.expire(start + 199 * STEP)
    return store


def _dump(store: StreamingStore[Key], **overrides: Any) -> bytes:
    settings: dict[str, Any] = {
        "step_seconds": STEP,
        "fingerprint": "families-v1",
        "key_to_json": _key_to_json,
        "meta": {"last_end": 1_005_970.0},
    }
    settings.update(overrides)
    return dump_store(store, **settings)


def _load(data: bytes, **overrides: Any) -> tuple[StreamingStore[Key], dict[str, Any]]:
    settings: dict[str, Any] = {
        "window_seconds": WINDOW,
        "slots": 12,
        "step_seconds": STEP,
        "fingerprint": "families-v1",
    }
    settings.update(overrides)
    return load_store(data, **settings)


def _same(a: dict[str, float] | None, b: dict[str, float] | None) -> bool:
    """Figures equal to the bit (NaN nowhere expected, but compared as equal if both NaN)."""
    assert a is not None and b is not None
    return a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def test_a_round_trip_keeps_every_series_and_its_figures_exactly() -> None:
    store = _store()
    restored, meta = _load(_dump(store))
    assert meta == {"last_end": 1_005_970.0}
    assert list(restored.series) == list(store.series)
    for key, window in store.series.items():
        again = restored.series[key]
        assert _same(again.figures(), window.figures())
        assert again.summary() == window.summary()
        assert (again.activity_floor, again.sawtooth_floor) == (window.activity_floor, window.sawtooth_floor)
        assert again._last_counter == window._last_counter


def test_a_restored_window_goes_on_as_if_never_saved() -> None:
    store, later = _store(), 1_000_000.0 + 200 * STEP
    restored, _ = _load(_dump(store))
    for target in (store, restored):
        for key, window in target.series.items():
            if key[0] == "pod:rx":
                window.add_counter((later + i * STEP, float(5000 + i)) for i in range(60))
            else:
                window.add((later + i * STEP, 0.25 + (i % 3) / 10) for i in range(60))
        target.expire(later + 60 * STEP)
    for key, window in store.series.items():
        assert _same(restored.series[key].figures(), window.figures())


def test_an_empty_store_round_trips() -> None:
    empty: StreamingStore[Key] = StreamingStore(WINDOW, slots=12)
    restored, _ = _load(_dump(empty))
    assert len(restored) == 0


@pytest.mark.parametrize(
    ("setting", "value", "reason"),
    [
        ("window_seconds", 7200.0, "window_seconds"),
        ("slots", 24, "slots"),
        ("step_seconds", 60.0, "step_seconds"),
        ("fingerprint", "families-v2", "fingerprint"),
    ],
)
def test_state_saved_under_other_settings_is_refused(setting: str, value: Any, reason: str) -> None:
    with pytest.raises(StateError, match=reason):
        _load(_dump(_store()), **{setting: value})


def test_truncated_state_is_refused_at_every_length() -> None:
    data = _dump(_store())
    for length in (0, 10, len(STATE_MAGIC) + 4, len(data) // 2, len(data) - 1):
        with pytest.raises(StateError, match=r"truncated|corrupt"):
            _load(data[:length])


def test_altered_bytes_are_refused() -> None:
    data = bytearray(_dump(_store()))
    data[len(data) // 2] ^= 0x40
    with pytest.raises(StateError, match=r"corrupt|truncated"):
        _load(bytes(data))


def test_another_file_or_format_is_refused() -> None:
    data = _dump(_store())
    with pytest.raises(StateError, match="bad magic"):
        _load(b"PK\x03\x04" + data[4:])
    newer = data[: len(STATE_MAGIC)] + struct.pack("<I", STATE_FORMAT + 1) + data[len(STATE_MAGIC) + 4 :]
    with pytest.raises(StateError, match=f"format {STATE_FORMAT + 1}"):
        _load(newer)


def _rewrite(data: bytes, change: Any) -> bytes:
    """The same file with its uncompressed header and body changed, and a valid checksum: what a
    damaged-but-consistent file, or one written by someone else, looks like."""
    preamble = struct.Struct(f"<{len(STATE_MAGIC)}sIIII")
    magic, version, header_size, _, _ = preamble.unpack_from(data)
    plain = zlib.decompress(data[preamble.size :])
    header, body = change(plain[:header_size], plain[header_size:])
    packed = preamble.pack(magic, version, len(header), len(body), zlib.crc32(header + body))
    return packed + zlib.compress(header + body)


def test_windows_whose_arrays_do_not_hold_together_are_refused() -> None:
    data = _dump(_store())
    # a sample count changed in the first interval (the words start after the doubles)
    doubles = sum(len(w._sums) for w in _store().series.values())

    def bump_count(header: bytes, body: bytes) -> tuple[bytes, bytes]:
        at = doubles * 8 + 4  # the first record's COUNT
        value = int.from_bytes(body[at : at + 4], "little") + 1
        return header, body[:at] + value.to_bytes(4, "little") + body[at + 4 :]

    with pytest.raises(StateError, match="bins do not add up"):
        _load(_rewrite(data, bump_count))
    with pytest.raises(StateError, match="bytes of arrays"):
        _load(_rewrite(data, lambda header, body: (header, body[:-4])))
    with pytest.raises(StateError, match="corrupt header"):
        _load(_rewrite(data, lambda header, body: (b"{not json", body)))
