"""The analysis cycle without a cluster: per-policy observation windows (one metrics batch per distinct
window), policy minSamples and threshold overrides, a failing metrics source, and housekeeping
without one."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY
from tests.unit.fake_source import FakeSource

from gpu_rightsizer.actuator.loop import SourceNotReadyError, scoped_measure
from gpu_rightsizer.adapters.kube import ResolvedWorkload
from gpu_rightsizer.adapters.prometheus import PrometheusSource
from gpu_rightsizer.adapters.source import Scope
from gpu_rightsizer.adapters.source_registry import open_source
from gpu_rightsizer.adapters.windows import WindowSources
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.logic.policy import effective_settings
from gpu_rightsizer.model.crd import GPURightsizingPolicy
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow
from gpu_rightsizer.recommender import cycle
from gpu_rightsizer.runtime import metrics
from gpu_rightsizer.runtime.context import KnownWorkload, OperatorContext

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


class FakeKube:
    """The KubeAdapter calls the cycle makes, over in-memory objects, recording the writes."""

    def __init__(
        self,
        workloads: dict[tuple[str, str], dict[str, Any]],
        namespaces: dict[str, dict[str, str]],
        policies: list[dict[str, Any]],
    ) -> None:
        self.workloads = workloads
        self.namespaces = namespaces
        self.policies = policies
        self.recommendations = {
            key: {
                "metadata": {"namespace": key[0], "name": f"deployment-{key[1]}", "generation": 1},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": key[1]}},
                "status": {"diagnosis": {"primary": "InsufficientData", "confidence": 0.0}},
            }
            for key in workloads
        }
        self.status_patches: list[tuple[str, Mapping[str, Any]]] = []
        self.policy_patches: dict[str, Mapping[str, Any]] = {}
        self.deleted: list[str] = []
        self.events: list[tuple[str, str, str]] = []
        self.created: list[str] = []

    def list_recommendations(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        return [r for (ns, _), r in self.recommendations.items() if not namespaces or ns in namespaces]

    def list_policies(self) -> list[dict[str, Any]]:
        return self.policies

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.workloads.get((namespace, name))

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return self.namespaces.get(namespace, {})

    def hpa_for(self, ref: WorkloadRef) -> None:
        return None

    def get_recommendation(self, ref: WorkloadRef) -> dict[str, Any] | None:
        return self.recommendations.get((ref.namespace, ref.name))

    def patch_recommendation_status(self, ref: WorkloadRef, status: Mapping[str, Any]) -> None:
        self.status_patches.append((ref.key, status))

    def post_event(
        self, ref: WorkloadRef, uid: str, reason: str, message: str, *, warning: bool = False
    ) -> None:
        self.events.append((ref.key, reason, message))

    def delete_recommendation(self, ref: WorkloadRef) -> bool:
        self.deleted.append(ref.key)
        return self.recommendations.pop((ref.namespace, ref.name), None) is not None

    def patch_policy_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.policy_patches[name] = status

    def ensure_recommendation(self, workload: ResolvedWorkload) -> dict[str, Any]:
        key = (workload.ref.namespace, workload.ref.name)
        if key not in self.recommendations:
            self.created.append(workload.ref.key)
            target = {"apiVersion": "apps/v1", "kind": workload.ref.kind, "name": workload.ref.name}
            self.recommendations[key] = {
                "metadata": {"namespace": key[0], "name": f"deployment-{key[1]}", "generation": 1},
                "spec": {"targetRef": target},
            }
        return self.recommendations[key]


def deployment(namespace: str, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"app": name},
            "annotations": annotations or {},
        },
        "spec": {"replicas": 1},
    }


def policy(name: str, namespace: str, observation: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "mode": "Recommend",
    }
    if observation is not None:
        spec["observation"] = observation
    return {"metadata": {"name": name, "generation": 1}, "spec": spec}


def cluster(*policies: dict[str, Any], annotations: dict[str, str] | None = None) -> FakeKube:
    """team-a: 2 workloads, team-b: 1, team-c: 1 (team-c/solo carries `annotations`)."""
    workloads = {
        ("team-a", "one"): deployment("team-a", "one"),
        ("team-a", "two"): deployment("team-a", "two"),
        ("team-b", "three"): deployment("team-b", "three"),
        ("team-c", "solo"): deployment("team-c", "solo", annotations),
    }
    namespaces = {ns: {"kubernetes.io/metadata.name": ns} for ns in ("team-a", "team-b", "team-c")}
    return FakeKube(workloads, namespaces, list(policies))


def memo_for(kube: FakeKube, source: FakeSource | None = None, **config: Any) -> OperatorContext:
    """The operator context a cycle runs with, over the fake cluster and a fake metrics source (none
    when the configuration names no Prometheus)."""
    cfg = OperatorConfig(
        **{"prometheus_url": "http://prometheus.invalid", "window_seconds": 3600.0, **config}
    )
    if source is None and cfg.prometheus_url:
        source = source_over(kube)
    return OperatorContext(config=cfg, kube=kube, source=source, verify_source=source)  # type: ignore[arg-type]


def source_over(kube: FakeKube, **options: Any) -> FakeSource:
    """A fake metrics source with one window per workload of the fake cluster (as it is at each read)."""
    return FakeSource(
        lambda: [WorkloadRef(namespace=ns, kind="Deployment", name=name) for ns, name in kube.workloads],
        **options,
    )


def analysed_windows(kube: FakeKube) -> dict[str, float]:
    """Workload key -> the length of the window its written status says it analysed."""
    found = {}
    for key, body in kube.status_patches:
        window = body.get("window")
        if window is not None:
            start, end = (datetime.fromisoformat(window[k].replace("Z", "+00:00")) for k in ("start", "end"))
            found[key] = (end - start).total_seconds()
    return found


def test_each_policy_window_costs_one_batch_and_governs_its_workloads() -> None:
    kube = cluster(
        policy("short", "team-a", {"window": "10m", "minSamples": 5}),
        policy("defaults", "team-b"),  # sets no window: the operator's --window applies
    )
    fetch = source_over(kube)

    updated = cycle.run_cycle(memo_for(kube, source=fetch), now=NOW)

    assert updated == 4
    assert sorted(fetch.lengths) == [600.0, 3600.0]  # one batch per distinct window, not per workload
    analysed_with = analysed_windows(kube)
    assert analysed_with == {
        "team-a/Deployment/one": 600.0,
        "team-a/Deployment/two": 600.0,
        "team-b/Deployment/three": 3600.0,
        "team-c/Deployment/solo": 3600.0,
    }
    assert {key for key, _ in kube.status_patches} == set(analysed_with)


def test_one_window_when_every_workload_shares_it(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = cluster(policy("same", "team-a", {"window": "1h"}))
    fetch = source_over(kube)
    cycle.run_cycle(memo_for(kube, source=fetch), now=NOW)
    assert fetch.lengths == [3600.0]


def test_observation_seconds_prefers_an_explicit_policy_window() -> None:
    explicit = GPURightsizingPolicy.model_validate(policy("p", "team-a", {"window": "30m"}))
    implicit = GPURightsizingPolicy.model_validate(policy("q", "team-a", {"minSamples": 3}))
    assert cycle.observation_seconds(effective_settings(explicit), 120.0) == 1800.0
    assert cycle.observation_seconds(effective_settings(implicit), 120.0) == 120.0
    assert cycle.observation_seconds(effective_settings(None), 120.0) == 120.0


def test_policy_min_samples_and_thresholds_reach_the_engine() -> None:
    chosen = GPURightsizingPolicy.model_validate(
        policy("p", "team-a", {"window": "30m", "minSamples": 7, "thresholds": {"lowBusy": 0.33}})
    )
    settings = cycle.engine_settings(effective_settings(chosen), 1800.0)
    assert settings.min_samples == 7
    assert settings.low_busy == pytest.approx(0.33)
    assert settings.window_seconds == 1800.0


def test_a_failing_batch_changes_nothing_for_its_workloads_only() -> None:
    kube = cluster(policy("short", "team-a", {"window": "10m"}))
    fetch = source_over(kube, failing=frozenset({600.0}))
    errors_before = metrics.ERRORS.labels("metrics_source")._value.get()

    cycle.run_cycle(memo_for(kube, source=fetch), now=NOW)

    assert metrics.ERRORS.labels("metrics_source")._value.get() == errors_before + 1
    assert metrics.METRICS_SOURCE_UP.labels("600s")._value.get() == 0
    analysed = {key for key, body in kube.status_patches if "diagnosis" in body}
    assert analysed == {"team-b/Deployment/three", "team-c/Deployment/solo"}
    # the failed batch's workloads keep their analysis, and their status says the metrics failed
    stale = {key: body for key, body in kube.status_patches if key.startswith("team-a/")}
    assert set(stale) == {"team-a/Deployment/one", "team-a/Deployment/two"}
    for body in stale.values():
        assert set(body) == {"conditions"}
        condition = next(c for c in body["conditions"] if c["type"] == "MetricsAvailable")
        assert condition["status"] == "False" and condition["reason"] == "QueryFailed"
    patched = analysed
    assert not any(key.startswith("team-a/") for key, _, _ in kube.events)
    assert set(analysed_windows(kube)) == patched


def test_without_a_metrics_source_the_cycle_still_keeps_house(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = cluster(policy("a", "team-a"), annotations={"gpurightsizer.io/ignore": "true"})
    fetch = source_over(kube)

    assert cycle.run_cycle(memo_for(kube, prometheus_url=None), now=NOW) == 0

    assert fetch.calls == []  # never handed to the cycle: no source is configured
    assert kube.status_patches == []
    assert kube.deleted == ["team-c/Deployment/solo"]  # the opted-out workload's recommendation
    assert kube.policy_patches["a"]["matchedWorkloads"] == 2


def test_a_diagnosis_change_event_speaks_plain_words(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = cluster()
    monkeypatch.setattr(cycle, "analyse", _analysis_with("IdleAllocation", "The GPU sat idle."))
    cycle.run_cycle(memo_for(kube), now=NOW)
    messages = {key: message for key, reason, message in kube.events if reason == "DiagnosisChanged"}
    assert messages["team-a/Deployment/one"] == (
        "Diagnosis changed from InsufficientData to IdleAllocation: The GPU sat idle."
    )


def _analysis_with(code: str, summary: str) -> Any:
    from gpu_rightsizer.logic.engine import analyze_window
    from gpu_rightsizer.model.codes import DiagnosisCode
    from gpu_rightsizer.model.result import Analysis

    def fake(
        window: WorkloadWindow,
        settings: Any,
        now: datetime,
        window_seconds: float | None = None,
        capacity: Any = None,
        memory_lookback: Any = None,
        figures: Any = None,
    ) -> Any:
        real = analyze_window(
            window, cycle.engine_settings(settings, window_seconds), now=now, memory_lookback=memory_lookback
        )
        assert isinstance(real, Analysis)
        return real.model_copy(update={"primary": DiagnosisCode(code), "summary": summary})

    return fake


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_statuses_keep_their_last_analysis_until_the_window_is_backfilled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a start, no status is rewritten from part of a window; the cycle says how far it is."""
    kube = cluster(policy("short", "team-a", {"window": "10m"}))
    sources = source_over(kube, backfill_reads=2)
    ctx = memo_for(kube, source=sources)
    durations_before = sample("gpu_rightsizer_query_duration_seconds_count", family="pod") or 0.0

    assert cycle.run_cycle(ctx, now=NOW) == 0
    assert kube.status_patches == []
    assert sample("gpu_rightsizer_workloads_pending_window") == 4
    assert sample("gpu_rightsizer_backfill_progress_ratio", window="600") == pytest.approx(0.5)
    cycle.run_cycle(ctx, now=NOW + timedelta(minutes=5))
    assert kube.status_patches == []

    assert cycle.run_cycle(ctx, now=NOW + timedelta(minutes=10)) == 4  # both windows complete
    assert {key for key, _ in kube.status_patches} == {
        f"{ns}/Deployment/{name}" for ns, name in kube.workloads
    }
    assert sample("gpu_rightsizer_workloads_pending_window") == 0
    assert sample("gpu_rightsizer_backfill_progress_ratio", window="3600") == 1.0
    assert sample("gpu_rightsizer_cycle_samples_fetched", window="3600") == 30
    assert sample("gpu_rightsizer_query_duration_seconds_count", family="pod") == durations_before + 6
    assert sources.kept[-1] == {600.0, 3600.0}


def test_the_configured_source_reads_incrementally_unless_whole_windows_are_asked_for() -> None:
    assert isinstance(open_source(OperatorConfig(prometheus_url="http://p.invalid")), WindowSources)
    whole = open_source(OperatorConfig(prometheus_url="http://p.invalid", full_window_reads=True))
    assert isinstance(whole, PrometheusSource)
    assert open_source(OperatorConfig()) is None


def test_the_actuator_reads_whole_windows_of_the_one_workload_it_verifies() -> None:
    kube = cluster()
    source = source_over(kube)
    ref = WorkloadRef(namespace="team-a", kind="Deployment", name="two")

    window = scoped_measure(source)(ref, NOW - timedelta(minutes=10), NOW)

    assert window is not None and window.workload.key == "team-a/Deployment/two"
    assert source.calls == [(600.0, Scope(namespace="team-a", workload="Deployment/two"))]
    with pytest.raises(SourceNotReadyError):  # no source: no figures, never an empty "all fine"
        scoped_measure(None)(ref, NOW - timedelta(minutes=10), NOW)


def test_a_deleted_recommendation_is_made_again_and_analysed_in_the_next_cycle() -> None:
    kube = cluster()
    ctx = memo_for(kube)
    ref = WorkloadRef(namespace="team-b", kind="Deployment", name="three")
    workload = ResolvedWorkload(ref=ref, uid="uid-three", obj=kube.workloads[("team-b", "three")])
    ctx.known[ref.key] = KnownWorkload(workload=workload, pod_spec={})
    del kube.recommendations[("team-b", "three")]  # someone deleted it; no pod changes afterwards

    assert cycle.run_cycle(ctx, now=NOW) == 4

    assert kube.created == ["team-b/Deployment/three"]
    assert "diagnosis" in dict(kube.status_patches)["team-b/Deployment/three"]  # analysed at once


def test_a_known_workload_that_is_gone_is_forgotten_not_recreated() -> None:
    kube = cluster()
    ctx = memo_for(kube)
    ref = WorkloadRef(namespace="team-b", kind="Deployment", name="gone")
    ctx.known[ref.key] = KnownWorkload(workload=ResolvedWorkload(ref=ref, uid="u", obj={}), pod_spec={})

    cycle.run_cycle(ctx, now=NOW)

    assert kube.created == [] and ref.key not in ctx.known


def test_a_recreated_workload_gets_its_recommendation_again_from_its_pods() -> None:
    import kopf

    from gpu_rightsizer.recommender import wiring as recommender

    kube = cluster()
    ref = WorkloadRef(namespace="team-b", kind="Deployment", name="three")
    old = ResolvedWorkload(ref=ref, uid="uid-old", obj=kube.workloads[("team-b", "three")])
    ctx = memo_for(kube)
    ctx.known[ref.key] = KnownWorkload(workload=old, pod_spec={})
    del kube.recommendations[("team-b", "three")]  # collected with the old workload
    new = ResolvedWorkload(ref=ref, uid="uid-new", obj=kube.workloads[("team-b", "three")])
    kube.resolve_owner = lambda pod: new  # type: ignore[attr-defined]
    pod = {"metadata": {"name": "three-0", "namespace": "team-b"}, "spec": {"containers": []}}

    recommender.gpu_pod_event(type="ADDED", body=pod, memo=kopf.Memo(context=ctx))  # type: ignore[arg-type]

    assert kube.created == ["team-b/Deployment/three"]
    assert ctx.known[ref.key].workload.uid == "uid-new"
    assert dict(kube.status_patches)["team-b/Deployment/three"]["diagnosis"]["primary"] == "InsufficientData"


def test_a_known_workload_keeps_only_what_its_first_status_needs() -> None:
    import kopf

    from gpu_rightsizer.recommender import wiring as recommender

    kube = cluster()
    ref = WorkloadRef(namespace="team-b", kind="Deployment", name="three")
    owner = {**kube.workloads[("team-b", "three")], "spec": {"replicas": 2, "template": {"spec": {}}}}
    kube.resolve_owner = lambda pod: ResolvedWorkload(ref=ref, uid="uid-3", obj=owner)  # type: ignore[attr-defined]
    del kube.recommendations[("team-b", "three")]
    gpu = {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}
    pod = {
        "metadata": {"name": "three-0", "namespace": "team-b"},
        "spec": {
            "containers": [{"name": "main", "image": "trainer:1", "env": [{"name": "A"}], "resources": gpu}],
            "volumes": [{"name": "token", "projected": {"sources": []}}],
        },
    }
    ctx = memo_for(kube)

    recommender.gpu_pod_event(type="ADDED", body=pod, memo=kopf.Memo(context=ctx))  # type: ignore[arg-type]

    known = ctx.known[ref.key]
    assert known.pod_spec == {"containers": [{"name": "main", "resources": gpu}]}
    assert known.workload.obj["spec"] == {"replicas": 2}  # the slim copy: no pod template
    allocation = dict(kube.status_patches)["team-b/Deployment/three"]["allocation"]
    assert (allocation["gpuCount"], allocation["replicas"]) == (1, 2)
