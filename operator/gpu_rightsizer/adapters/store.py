"""The GPURecommendations as typed objects: the one place that turns their JSON into models and back.

Why: the recommendation is where the recommender and the actuator meet, and a status read as raw
dicts (`.get("x") or {}` chains) lets every reader interpret a forged or damaged field its own way.
Here a stored object is parsed once into `model.crd.GPURecommendation`; a status that does not parse
is reported as unreadable (`StoredRecommendation.problem`), never half-read. `patch_status` writes
everything but `status.apply`, which belongs to the actuator alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from gpu_rightsizer.adapters.kube import ResolvedWorkload
from gpu_rightsizer.model.crd import (
    GPURecommendation,
    GPURecommendationSpec,
    GPURecommendationStatus,
    TargetRef,
)
from gpu_rightsizer.model.observation import WorkloadRef

LOG = logging.getLogger(__name__)

#: Status fields the recommender writes (all but `apply`, the actuator's).
RECOMMENDER_FIELDS = frozenset(GPURecommendationStatus.model_fields) - {"apply"}


class RecommendationApi(Protocol):
    """The Kubernetes calls the store makes (`adapters.kube.KubeAdapter`, or a fake in tests)."""

    def list_recommendations(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]: ...

    def get_recommendation(self, ref: WorkloadRef) -> dict[str, Any] | None: ...

    def patch_recommendation_status(self, ref: WorkloadRef, status: Mapping[str, Any]) -> Any: ...

    def delete_recommendation(self, ref: WorkloadRef) -> bool: ...

    def ensure_recommendation(self, workload: ResolvedWorkload) -> dict[str, Any]: ...


@dataclass(frozen=True)
class StoredRecommendation:
    """One GPURecommendation as stored, typed."""

    ref: WorkloadRef
    recommendation: GPURecommendation
    #: Why part of the stored status could not be read (None: all of it was, or there is none yet).
    #: The fields that do not parse read as absent (`unreadable` names them); the recommender's next
    #: write replaces what it owns, and an unreadable `apply` is the actuator's to settle.
    problem: str | None = None
    unreadable: frozenset[str] = frozenset()

    @property
    def status(self) -> GPURecommendationStatus:
        """The status as stored (an empty one before the first write)."""
        return self.recommendation.status or GPURecommendationStatus()

    @property
    def has_status(self) -> bool:
        return self.recommendation.status is not None

    @property
    def generation(self) -> int | None:
        value = self.recommendation.metadata.get("generation")
        return value if isinstance(value, int) else None

    @property
    def resource_version(self) -> str | None:
        value = self.recommendation.metadata.get("resourceVersion")
        return str(value) if value is not None else None

    def status_json(self) -> dict[str, Any]:
        """The status as the API server would hand it back (for comparing with a patch). Dumped once
        per stored object (a cycle reads it more than once per workload); callers must not change it."""
        dumped: dict[str, Any] | None = self.__dict__.get("_status_json")
        if dumped is None:
            dumped = self.status.model_dump(mode="json", by_alias=True, exclude_none=True)
            object.__setattr__(self, "_status_json", dumped)
        return dumped


def parse_recommendation(raw: Mapping[str, Any]) -> StoredRecommendation | None:
    """The typed object; None when not even its target can be read (it names no workload)."""
    metadata = raw.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
    try:
        spec = GPURecommendationSpec.model_validate(raw.get("spec"))
    except ValidationError as error:
        LOG.warning("GPURecommendation %s/%s names no readable target: %s", metadata.get("namespace"),
                    metadata.get("name"), _first_error(error))  # fmt: skip
        return None
    ref = ref_of(spec.target_ref, str(metadata.get("namespace") or ""))
    status, problem, unreadable = _parse_status(raw.get("status"))
    recommendation = GPURecommendation(metadata=metadata, spec=spec, status=status)
    return StoredRecommendation(
        ref=ref, recommendation=recommendation, problem=problem, unreadable=unreadable
    )


def _parse_status(raw: Any) -> tuple[GPURecommendationStatus | None, str | None, frozenset[str]]:
    """The status, with the fields that do not parse left out and named (field by field only when
    the whole does not parse, which is rare)."""
    if not raw:
        return None, None, frozenset()
    try:
        return GPURecommendationStatus.model_validate(raw), None, frozenset()
    except ValidationError as error:
        problem = f"status unreadable in part: {_first_error(error)}"
    if not isinstance(raw, Mapping):
        return None, problem, frozenset(GPURecommendationStatus.model_fields)
    kept: dict[str, Any] = {}
    unreadable: set[str] = set()
    aliases = {field.alias or name: name for name, field in GPURecommendationStatus.model_fields.items()}
    for key, value in raw.items():
        try:
            GPURecommendationStatus.model_validate({key: value})
        except ValidationError:
            unreadable.add(aliases.get(key) or str(key))
            continue
        kept[key] = value
    return GPURecommendationStatus.model_validate(kept), problem, frozenset(unreadable)


def ref_of(target: TargetRef, namespace: str) -> WorkloadRef:
    """The workload a recommendation targets."""
    return WorkloadRef(
        namespace=namespace, kind=target.kind, name=target.name, api_version=target.api_version
    )


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


def status_body(status: GPURecommendationStatus, fields: Iterable[str] | None = None) -> dict[str, Any]:
    """The merge patch for `status`: its fields as the API stores them, without `apply` (and only
    `fields`, snake_case model names, when given)."""
    wanted = RECOMMENDER_FIELDS if fields is None else RECOMMENDER_FIELDS & set(fields)
    return status.model_dump(mode="json", by_alias=True, exclude_none=True, include=set(wanted))


class ParsedRecommendations:
    """The last parse of each listed recommendation, with the resourceVersion it was parsed at.

    Why: a steady cycle lists every recommendation but writes only those whose status says something
    new, so most come back exactly as the last cycle parsed them; validating each status into its
    models again was the cycle's largest share of pydantic work. A resourceVersion names one stored
    state of one object (every write changes it), so an object listed at the version it was parsed at
    is that parse. Objects without a resourceVersion are parsed every time. One caller at a time (the
    analysis cycle, which runs one cycle after the other); the parses are read, never changed.
    """

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[str, StoredRecommendation | None]] = {}
        #: Parses reused and made (read by the tests; nothing else counts on them).
        self.reused = 0
        self.parsed = 0

    def parse_all(self, listed: Iterable[Mapping[str, Any]]) -> list[StoredRecommendation | None]:
        """Each listed object typed, reusing the parse of those unchanged since; the parses of objects
        not listed any more are let go."""
        found: list[StoredRecommendation | None] = []
        listed_at: dict[tuple[str, str], tuple[str, StoredRecommendation | None]] = {}
        for raw in listed:
            metadata = raw.get("metadata")
            metadata = metadata if isinstance(metadata, Mapping) else {}
            if metadata.get("resourceVersion") is None:
                found.append(parse_recommendation(raw))
                self.parsed += 1
                continue
            version = str(metadata["resourceVersion"])
            key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
            before = self._kept.get(key)
            if before is not None and before[0] == version:
                parsed = before[1]
                self.reused += 1
            else:
                parsed = parse_recommendation(raw)
                self.parsed += 1
            listed_at[key] = (version, parsed)
            found.append(parsed)
        self._kept = listed_at
        return found

    def __len__(self) -> int:
        return len(self._kept)


class RecommendationStore:
    """Typed reads and apply-free status writes of GPURecommendations."""

    def __init__(self, api: RecommendationApi, parsed: ParsedRecommendations | None = None) -> None:
        self.api = api
        #: Parses kept from the last listing (the cycle's store keeps one for the process's life).
        self.parsed = parsed

    def list(self, namespaces: tuple[str, ...] = ()) -> list[StoredRecommendation]:
        """Every readable recommendation (in `namespaces` when given); unreadable ones are logged."""
        listed = self.api.list_recommendations(namespaces)
        if self.parsed is not None:
            found = self.parsed.parse_all(listed)
        else:
            found = [parse_recommendation(raw) for raw in listed]
        return [stored for stored in found if stored is not None]

    def get(self, ref: WorkloadRef) -> StoredRecommendation | None:
        """The workload's recommendation as stored now, or None."""
        raw = self.api.get_recommendation(ref)
        return None if raw is None else parse_recommendation(raw)

    def patch_status(
        self, ref: WorkloadRef, status: GPURecommendationStatus, fields: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """Merge-patch the recommender's part of the status (never `apply`); returns the body sent."""
        body = status_body(status, fields)
        self.api.patch_recommendation_status(ref, body)
        return body

    def ensure(self, workload: ResolvedWorkload) -> StoredRecommendation | None:
        """The workload's recommendation, created (owned by the workload) when there is none."""
        return parse_recommendation(self.api.ensure_recommendation(workload))

    def delete(self, ref: WorkloadRef) -> bool:
        """Delete the workload's recommendation; False when there was none."""
        return self.api.delete_recommendation(ref)
