"""`kubectl describe` shows every status and spec field with its camelCase name split into words
(fatih/camelcase, as kubectl's describer does): every name in the CRDs must read as words there.

'memoryUsedMaxGiB' came out as "Memory Used Max Gi B" and 'allocatedGPUs' as "Allocated GP Us".
Names with characters other than letters are printed as they are, and are not checked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_rightsizer.crdgen import build_crds

#: Short words that read as words.
SHORT_WORDS = {"at", "by", "id", "if", "in", "is", "no", "of", "on", "to", "up"}


def kubectl_words(name: str) -> list[str]:
    """`name` split as kubectl describe splits it: runs of one character class, then the last
    capital of an upper-case run moves to the lower-case run after it."""
    runs: list[list[str]] = []
    classes: list[str] = []
    for char in name:
        kind = (
            "lower"
            if char.islower()
            else "upper"
            if char.isupper()
            else "digit"
            if char.isdigit()
            else "other"
        )
        if classes and classes[-1] == kind:
            runs[-1].append(char)
        else:
            classes.append(kind)
            runs.append([char])
    for index in range(len(runs) - 1):
        if classes[index] == "upper" and classes[index + 1] == "lower":
            runs[index + 1].insert(0, runs[index].pop())
    return ["".join(run) for run in runs if run]


def _names(schema: Any) -> Iterator[str]:
    if not isinstance(schema, dict):
        return
    for name, child in (schema.get("properties") or {}).items():
        yield name
        yield from _names(child)
    yield from _names(schema.get("items"))
    yield from _names(schema.get("additionalProperties"))


def _reads_as_words(name: str) -> bool:
    if re.search(r"[^A-Za-z]", name):
        return True  # printed unsplit
    return all(len(word) >= 3 or word.lower() in SHORT_WORDS for word in kubectl_words(name))


def test_the_split_is_kubectls() -> None:
    assert kubectl_words("memoryUsedMaxGiB") == ["memory", "Used", "Max", "Gi", "B"]
    assert kubectl_words("allocatedGPUs") == ["allocated", "GP", "Us"]
    assert kubectl_words("pricePerGPUHour") == ["price", "Per", "GPU", "Hour"]
    assert not _reads_as_words("memoryUsedMaxGiB") and not _reads_as_words("allocatedGPUs")
    assert _reads_as_words("memoryUsedMaxGib") and _reads_as_words("pricePerGPUHour")


@pytest.mark.parametrize("crd", sorted(build_crds()))
def test_every_field_name_reads_as_words_in_kubectl_describe(crd: str) -> None:
    schema = build_crds()[crd]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    unreadable = sorted({name for name in _names(schema) if not _reads_as_words(name)})
    assert unreadable == [], f"kubectl describe splits these badly: {unreadable}"
