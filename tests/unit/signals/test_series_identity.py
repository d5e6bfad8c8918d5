"""A series' identity among a family's keys: one shared label set, whatever strings the answer brings."""

from __future__ import annotations

from gpu_rightsizer.adapters import incremental
from gpu_rightsizer.adapters.incremental import identity_of, shared_labels

KEYS = ("Hostname", "UUID", "gpu", "namespace", "pod", "container")


def _fresh(text: str) -> str:
    """An equal string that is another object, as every decoded answer gives."""
    return "".join(list(text))


def _labels(**values: str) -> dict[str, str]:
    return {_fresh(key): _fresh(value) for key, value in values.items()}


def test_an_identity_is_its_non_empty_keys_in_key_order_and_one_object_every_answer() -> None:
    first = identity_of(
        _labels(pod="p-1", UUID="GPU-1", Hostname="n-1", gpu="0", namespace="", job="dcgm"), KEYS
    )
    assert first == (("Hostname", "n-1"), ("UUID", "GPU-1"), ("gpu", "0"), ("pod", "p-1"))
    again = identity_of(_labels(Hostname="n-1", UUID="GPU-1", gpu="0", pod="p-1", instance="x"), KEYS)
    assert again is first
    assert shared_labels(first) is first
    assert identity_of(_labels(Hostname="n-1", UUID="GPU-1", gpu="0", pod="p-2"), KEYS) != first


def test_keys_given_as_a_list_find_the_same_identity() -> None:
    labels = _labels(Hostname="n-9", UUID="GPU-9", gpu="3")
    assert identity_of(labels, list(KEYS)) is identity_of(labels, KEYS)


def test_the_lookup_keeps_the_shared_strings_not_the_answers() -> None:
    found = identity_of(_labels(Hostname="n-7", UUID="GPU-7", gpu="11", pod="p-7"), KEYS)
    labels = _labels(Hostname="n-7", UUID="GPU-7", gpu="11", pod="p-7")  # the next answer's strings
    assert identity_of(labels, KEYS) is found
    kept = next(values for (keys, values), identity in incremental._IDENTITIES.items() if identity is found)
    shared = dict(found)
    assert all(value is shared[key] for key, value in zip(KEYS, kept, strict=True) if value)
    assert all(value is not labels[key] for key, value in zip(KEYS, kept, strict=True) if value)


def test_the_tables_are_bounded_and_cleared_together(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(incremental, "MAX_SHARED_LABEL_SETS", 3)
    incremental._LABEL_SETS.clear()
    incremental._IDENTITIES.clear()
    for index in range(10):
        identity_of(_labels(Hostname=f"n-{index}", UUID=f"GPU-{index}"), KEYS)
        assert len(incremental._LABEL_SETS) <= 3 and len(incremental._IDENTITIES) <= 3
    latest = identity_of(_labels(Hostname="n-9", UUID="GPU-9"), KEYS)
    assert latest == (("Hostname", "n-9"), ("UUID", "GPU-9"))
