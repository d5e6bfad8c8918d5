"""A series' identity among a family's keys: one shared label set, whatever strings the answer brings."""

from __future__ import annotations

import gc

import pytest

from gpu_rightsizer.adapters import incremental
from gpu_rightsizer.adapters.incremental import LabelTable, identity_of, shared_labels

KEYS = ("Hostname", "UUID", "gpu", "namespace", "pod", "container")


def _fresh(text: str) -> str:
    """An equal string that is another object, as every decoded answer gives."""
    return "".join(list(text))


def _labels(**values: str) -> dict[str, str]:
    return {_fresh(key): _fresh(value) for key, value in values.items()}


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> LabelTable:
    """A table of its own with a small limit, as the module's for the functions under test."""
    fresh = LabelTable(3)
    monkeypatch.setattr(incremental, "LABELS", fresh)
    return fresh


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
    kept = next(
        values for (keys, values), identity in incremental.LABELS.identities.items() if identity is found
    )
    shared = dict(found)
    assert all(value is shared[key] for key, value in zip(KEYS, kept, strict=True) if value)
    assert all(value is not labels[key] for key, value in zip(KEYS, kept, strict=True) if value)


def test_label_sets_share_their_pairs(table: LabelTable) -> None:
    first = shared_labels([(_fresh("namespace"), _fresh("team-a")), (_fresh("pod"), _fresh("p-1"))])
    second = shared_labels([(_fresh("namespace"), _fresh("team-a")), (_fresh("pod"), _fresh("p-2"))])
    assert first[0] is second[0]
    assert first[1] is not second[1]
    assert len(table.pairs) == 3


def test_a_prune_drops_only_what_nothing_else_holds_and_the_limit_follows(table: LabelTable) -> None:
    held = [identity_of(_labels(Hostname=f"n-{index}", UUID=f"GPU-{index}"), KEYS) for index in range(3)]
    for index in range(3, 10):  # sets nothing keeps: a pod gone, say
        identity_of(_labels(Hostname=f"n-{index}", UUID=f"GPU-{index}"), KEYS)
    gc.collect()
    assert all(table.sets[labels] is labels for labels in held)  # a window's sets are never copied
    assert len(table.sets) <= table.limit
    dropped = table.prune()
    assert dropped > 0
    assert set(table.sets) == set(held)
    assert table.limit == 6  # twice what is held
    assert {pair for labels in held for pair in labels} == set(table.pairs)
    again = identity_of(_labels(Hostname="n-1", UUID="GPU-1"), KEYS)
    assert again is held[1]


def test_with_more_sets_held_than_the_limit_nothing_is_copied_again(table: LabelTable) -> None:
    held = [identity_of(_labels(Hostname=f"n-{index}", UUID=f"GPU-{index}"), KEYS) for index in range(20)]
    for index in range(20):  # the next cycle's answers: every one finds the copy its window holds
        assert identity_of(_labels(Hostname=f"n-{index}", UUID=f"GPU-{index}"), KEYS) is held[index]
    assert len(table.sets) == 20 and table.limit >= 20
