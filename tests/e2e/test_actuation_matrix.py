"""The actuator's safety matrix on the real local cluster: every case at once, one table at the end.

Each case is a short script (a generator that yields while it waits) in its own namespace with its
own Apply policy, run side by side with the others so the whole matrix costs a few minutes. Most
share one operator; the crash and lease cases start their own processes, with faults injected by
tests/e2e/hooks/sitecustomize.py (never by the operator's code). Pods that never start are made so
by the test writing an image-pull failure into their status, as a kubelet would (`fail_image_pull`).

The printed table has one row per case: (case, expected, seen); the test fails unless every row holds.
"""

from __future__ import annotations

import calendar
import json
import os
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.e2e.conftest import Background, Kube, unique_name
from tests.e2e.test_actuation_e2e import FAST, create, fault, recommendation
from tests.e2e.workloads import gpu_deployment, gpu_statefulset

Script = Iterator[None]
#: Seconds between two rounds over the running cases.
ROUND = 2.0
#: The whole matrix must settle within this time.
MATRIX_TIMEOUT = 900.0
#: How long an applied change may take to be abandoned once no Apply policy selects it: a time that
#: says "not stuck", not how fast (one actuator pass over the matrix's workloads took 29 s on a
#: loaded machine, and the policy's removal is seen one pass later).
ABANDON_WAIT = 240.0


class CaseFailedError(Exception):
    """A case ended differently than expected; the message is what was seen."""


@dataclass
class Case:
    """One row of the matrix."""

    name: str
    expected: str
    script: Callable[[Env, Case], Script]
    shared_operator: bool = True
    namespace: str = ""
    seen: str = "(not reached)"
    ok: bool = False
    processes: list[Background] = field(default_factory=list)


@dataclass
class Env:
    kube: Kube
    url: str
    run_operator: Callable[..., Background]


def until(predicate: Callable[[], Any], timeout: float, what: str) -> Iterator[None]:
    """Yield until `predicate()` is truthy (API errors count as not yet); CaseFailedError on timeout.
    The predicate is asked once more after the deadline: a slow round over the other cases (a loaded
    machine) must not fail a case whose condition came true meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        last = time.monotonic() >= deadline
        try:
            if predicate():
                return
        except Exception:
            pass
        if last:
            raise CaseFailedError(f"timed out waiting for {what}")
        yield


def hold(seconds: float) -> Iterator[None]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        yield


# --------------------------------------------------------------------------------------------------
# Helpers on the cluster
# --------------------------------------------------------------------------------------------------


def apply_status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return (recommendation(kube, namespace, name).get("status") or {}).get("apply") or {}


def policy(
    kube: Kube, namespace: str, *, mode: str = "Apply", actions: tuple[str, ...] = ("cpu",), **safety: Any
) -> None:
    settings = {
        "cooldown": "1h", "verifyFor": "30s", "allowSingleReplica": True,
        "maxChangesPerHour": {"cluster": 100, "perNamespace": 20}, **safety,
    }  # fmt: skip
    kube.apply(
        {
            "apiVersion": "gpurightsizer.io/v1alpha1",
            "kind": "GPURightsizingPolicy",
            "metadata": {"name": f"matrix-{namespace}"},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "mode": mode,
                "actions": list(actions) if mode != "Off" else [],
                # a 1 m window lowers a server's confidence below the default minConfidence (0.6),
                # which would turn the HPA row's automatic bound into advice: lowered as a policy may
                "observation": {"minSamples": 10, "thresholds": {"minConfidence": 0.5}},
                "safety": {k: v for k, v in settings.items() if v is not None},
            },
        }
    )


def template_cpu(
    kube: Kube, namespace: str, kind: str = "deployment", name: str = "trainer"
) -> tuple[str, str]:
    obj = kube.get_json(kind, "-n", namespace, name)
    resources = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    return str(resources["limits"]["cpu"]), str(resources["requests"]["cpu"])


def generation(kube: Kube, namespace: str, kind: str = "deployment", name: str = "trainer") -> int:
    return int(kube.get_json(kind, "-n", namespace, name)["metadata"]["generation"])


def newest_hash(kube: Kube, namespace: str, app: str = "trainer") -> str:
    """pod-template-hash of the Deployment's newest ReplicaSet."""
    sets = kube.get_json("replicasets", "-n", namespace, "-l", f"app={app}")["items"]
    newest = max(sets, key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))
    return str(newest["metadata"]["labels"]["pod-template-hash"])


def first_revision(kube: Kube, namespace: str) -> Iterator[None]:
    """Wait for the trainer Deployment's first ReplicaSet (the revision before any change)."""
    yield from until(lambda: newest_hash(kube, namespace), 60, "the first ReplicaSet")


def changed_revision(kube: Kube, namespace: str, before: str) -> Iterator[None]:
    """Wait until the Deployment controller created the ReplicaSet of a newer revision."""
    yield from until(lambda: newest_hash(kube, namespace) != before, 60, "the new revision's ReplicaSet")


def fail_image_pull(kube: Kube, namespace: str, label: str, value: str) -> int:
    """Report the pods with `label=value` as a kubelet does when their image cannot be pulled.

    The container waits with ErrImagePull and the pod is not Ready, as a kubelet writes it. The phase
    stays Running: KWOK's pod-ready stage turns every Pending pod Running at once (a kubelet would keep
    it Pending); the actuator reads the container state and readiness, not the phase.
    """
    pods = kube.get_json("pods", "-n", namespace, "-l", f"{label}={value}")["items"]
    failed = 0
    for pod in pods:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp"):
            continue
        failed += 1
        states = [s.get("state") or {} for s in pod["status"].get("containerStatuses") or []]
        if states and (states[0].get("waiting") or {}).get("reason") == "ErrImagePull":
            continue
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "ContainersNotReady"},
                {"type": "ContainersReady", "status": "False", "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
                    "started": False,
                    "state": {"waiting": {"reason": "ErrImagePull", "message": f"pull {c['image']}: not found"}},
                }
                for c in pod["spec"]["containers"]
            ],
        }  # fmt: skip
        kube.kubectl(
            "patch", "pod", "-n", namespace, name, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
    return failed


def change_record(kube: Kube, namespace: str, name: str = "deployment-trainer") -> dict[str, Any]:
    """The actuator's own record (GPURightsizingChange status); {} when there is none."""
    found = kube.kubectl("get", "gpurightsizingchange", "-n", namespace, name, "-o", "json", check=False)
    return (json.loads(found.stdout).get("status") or {}) if found.returncode == 0 else {}


def in_phase(kube: Kube, namespace: str, *phases: str, name: str = "deployment-trainer") -> bool:
    return apply_status(kube, namespace, name).get("phase") in phases


def own_operator(
    env: Env,
    case: Case,
    lease: str,
    name: str,
    extra_env: dict[str, str] | None = None,
    url: str = "",
    extra_args: tuple[str, ...] = (),
) -> Background:
    process = env.run_operator(
        "--role", "all", "--prometheus-url", url or env.url, "-n", case.namespace, "--lease-name", lease, *FAST,
        *extra_args, name=f"{case.name}-{name}", env=extra_env,
    )  # fmt: skip
    case.processes.append(process)
    return process


def trainer(kube: Kube, namespace: str, **options: Any) -> None:
    """The starved trainer Deployment. Its container restarts on a CPU resize (gpu_deployment's
    default), so its CPU raise takes the pod-template path these rows test; the in-place rows pass
    `cpu_resize_policy=None`."""
    create(kube, gpu_deployment("trainer", namespace, scenario="input-cpu-bound", cpu="1", **options))


# --------------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------------


def mode_switch(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns, verifyFor="10m")
    trainer(kube, ns)
    yield from until(lambda: in_phase(kube, ns, "Applied", "RolledOut"), 300, "the change to be applied")
    before = generation(kube, ns)
    policy(kube, ns, mode="Recommend", verifyFor="10m", onDisable="Keep")
    yield from until(lambda: in_phase(kube, ns, "Abandoned"), ABANDON_WAIT, "the change to be abandoned")
    yield from hold(20)
    writes = generation(kube, ns) - before
    state = apply_status(kube, ns, "deployment-trainer")
    case.seen = f"{state.get('state')}/{state.get('phase')}, workload writes after the switch: {writes}"
    case.ok = writes == 0 and "patch" not in state and "left in place unverified" in state.get("reason", "")


def human_edit(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns, verifyFor="10m")
    trainer(kube, ns)
    yield from until(lambda: in_phase(kube, ns, "RolledOut"), 300, "the change to roll out")
    ours, our_hash = template_cpu(kube, ns), newest_hash(kube, ns)
    kube.kubectl(
        "patch", "deployment", "-n", ns, "trainer", "-p",
        json.dumps({"spec": {"template": {"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "6"}}}]}}}}),
    )  # fmt: skip
    yield from until(lambda: newest_hash(kube, ns) != our_hash, 30, "the person's revision")
    bad = newest_hash(kube, ns)
    yield from until(
        lambda: fail_image_pull(kube, ns, "pod-template-hash", bad) >= 0 and in_phase(kube, ns, "Done"),
        180, "the change to be settled as superseded",
    )  # fmt: skip
    yield from hold(10)
    limit, request = template_cpu(kube, ns)
    record = change_record(kube, ns)
    case.seen = (
        f"ours {ours[1]}/{ours[0]}, person set limit 6 (failing); then {record.get('phase')}, limit {limit}, "
        f"request {request}, rollbacks {record.get('rollbacks', 0)}"
    )
    case.ok = (
        (limit, request) == ("6", "4")
        and "superseded" in record.get("reason", "")
        and not record.get("rollbacks")
    )


def crash_during_apply(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns)
    trainer(kube, ns)
    lease = unique_name("lease")
    crashing = own_operator(env, case, lease, "crashing", fault("intent"))
    yield from until(lambda: crashing.process.poll() is not None, 300, "the crash after the intent")
    intent = apply_status(kube, ns, "deployment-trainer")
    untouched = template_cpu(kube, ns) == ("1", "1")
    own_operator(env, case, lease, "restarted")
    yield from until(
        lambda: apply_status(kube, ns, "deployment-trainer").get("state") in ("Verified", "Inconclusive", "RolledBack"),
        300, "the resumed change to settle",
    )  # fmt: skip
    final = apply_status(kube, ns, "deployment-trainer")
    rollouts = len(kube.get_json("replicasets", "-n", ns, "-l", "app=trainer")["items"]) - 1
    same = str(intent.get("changeId")) in final.get("reason", "")
    case.seen = (
        f"exit {crashing.process.returncode} at {intent.get('phase')} (workload untouched: {untouched}); "
        f"then {final.get('state')}, rollouts {rollouts}, same change {same}"
    )
    case.ok = (
        crashing.process.returncode == 17 and intent.get("phase") == "IntentRecorded" and untouched
        and final.get("state") == "Verified" and rollouts == 1 and same
    )  # fmt: skip


def crash_during_rollback(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns, verifyFor="10m")
    trainer(kube, ns)
    yield from first_revision(kube, ns)
    initial = newest_hash(kube, ns)
    lease = unique_name("lease")
    crashing = own_operator(env, case, lease, "crashing", fault("rollback"))
    yield from until(lambda: in_phase(kube, ns, "Applied", "RolledOut"), 300, "the change to be applied")
    yield from changed_revision(kube, ns, initial)
    bad = newest_hash(kube, ns)
    yield from until(
        lambda: fail_image_pull(kube, ns, "pod-template-hash", bad) >= 0 and crashing.process.poll() is not None,
        120, "the crash after the rollback intent",
    )  # fmt: skip
    intent = apply_status(kube, ns, "deployment-trainer")
    still_ours = template_cpu(kube, ns)[0] != "1"
    own_operator(env, case, lease, "restarted")
    yield from until(lambda: in_phase(kube, ns, "RolledBack"), 120, "the rollback to finish")
    settled_generation = generation(kube, ns)
    yield from hold(20)
    limit, request = template_cpu(kube, ns)
    rewrites = generation(kube, ns) - settled_generation
    case.seen = (
        f"exit {crashing.process.returncode} at {intent.get('phase')} (change still in place: {still_ours}); "
        f"then RolledBack, cpu {limit}/{request}, writes after: {rewrites}"
    )
    case.ok = (
        crashing.process.returncode == 17 and intent.get("phase") == "RollbackIntentRecorded" and still_ours
        and (limit, request) == ("1", "1") and rewrites == 0
    )  # fmt: skip


def delayed_renewals(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns)
    trainer(kube, ns)
    lease = unique_name("lease")
    slow = own_operator(env, case, lease, "slow", fault(renew_delay=30))
    yield from until(lambda: "now the leader" in slow.output(), 60, "the slow actuator to lead")
    healthy = own_operator(env, case, lease, "healthy")
    yield from until(lambda: slow.process.poll() is not None, 120, "the slow actuator to exit")
    yield from until(
        lambda: apply_status(kube, ns, "deployment-trainer").get("state") in ("Verified", "Inconclusive", "RolledBack"),
        300, "the change to settle",
    )  # fmt: skip
    final = apply_status(kube, ns, "deployment-trainer")
    rollouts = len(kube.get_json("replicasets", "-n", ns, "-l", "app=trainer")["items"]) - 1
    sent_by_slow = "ChangeApplied" in slow.output() or "applied change" in slow.output()
    case.seen = (
        f"slow exit {slow.process.returncode} ({'lost the lease' in slow.output()}); healthy leads "
        f"({'now the leader' in healthy.output()}): {final.get('state')}, rollouts {rollouts}, slow wrote: {sent_by_slow}"
    )
    case.ok = (
        slow.process.returncode == 3 and "now the leader" in healthy.output() and final.get("state") == "Verified"
        and rollouts == 1 and not sent_by_slow
    )  # fmt: skip


def blocked_case(
    reason: str, setup: Callable[[Kube, str], None], name: str = "deployment-trainer"
) -> Callable[[Env, Case], Script]:
    """A case whose change must be Blocked with `reason`, the workload untouched."""

    def script(env: Env, case: Case) -> Script:
        kube, ns = env.kube, case.namespace
        setup(kube, ns)
        yield from until(
            lambda: reason in apply_status(kube, ns, name).get("reason", ""),
            300,
            f"a Blocked reason with {reason!r}",
        )
        yield from hold(10)
        state = apply_status(kube, ns, name)
        cpu = template_cpu(kube, ns)
        case.seen = f"{state.get('state')}: {state.get('reason', '')[:90]}; cpu {cpu[0]}"
        case.ok = state.get("state") == "Blocked" and reason in state.get("reason", "") and cpu == ("1", "1")

    return script


def pdb_setup(kube: Kube, ns: str) -> None:
    policy(kube, ns)
    trainer(kube, ns, replicas=2)
    create(kube, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-both", "namespace": ns},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "trainer"}}},
    })  # fmt: skip


def single_replica_setup(kube: Kube, ns: str) -> None:
    policy(kube, ns, allowSingleReplica=None)
    trainer(kube, ns)


def controller_owned_setup(kube: Kube, ns: str) -> None:
    policy(kube, ns)
    create(kube, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llm", "namespace": ns}})
    uid = kube.get_json("configmap", "-n", ns, "llm")["metadata"]["uid"]
    manifest = gpu_deployment("trainer", ns, scenario="input-cpu-bound", cpu="1")
    manifest["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "llm", "uid": uid, "controller": True}
    ]
    create(kube, manifest)


def argocd_setup(kube: Kube, ns: str) -> None:
    """Created as Argo CD's client-side apply does: Update operations as field manager argocd-controller."""
    import yaml

    policy(kube, ns)
    manifest = gpu_deployment("trainer", ns, scenario="input-cpu-bound", cpu="1")
    kube.kubectl(
        "create", "--field-manager=argocd-controller", "-f", "-", input_text=yaml.safe_dump(manifest)
    )


def changed_trainer(kube: Kube, ns: str) -> Generator[None, None, tuple[float, str]]:
    """A trainer under an Apply policy (verifyFor 10m) until our change made its new revision; returns
    when the change was seen applied (monotonic) and the new revision's pod-template-hash."""
    policy(kube, ns, verifyFor="10m")
    trainer(kube, ns)
    yield from first_revision(kube, ns)
    initial = newest_hash(kube, ns)
    yield from until(lambda: in_phase(kube, ns, "Applied", "RolledOut"), 300, "the change to be applied")
    applied_at = time.monotonic()
    yield from changed_revision(kube, ns, initial)
    return applied_at, newest_hash(kube, ns)


def image_never_pulls(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    applied_at, bad = yield from changed_trainer(kube, ns)
    yield from until(
        lambda: fail_image_pull(kube, ns, "pod-template-hash", bad) >= 0 and in_phase(kube, ns, "RolledBack"),
        300, "the rollback",
    )  # fmt: skip
    seconds = time.monotonic() - applied_at
    state = apply_status(kube, ns, "deployment-trainer")
    cpu = template_cpu(kube, ns)
    case.seen = (
        f"RolledBack {seconds:.0f} s after the change: {state.get('reason', '')[40:120]}; cpu {cpu[0]}"
    )
    case.ok = "ErrImagePull" in state.get("reason", "") and seconds < 180 and cpu == ("1", "1")


def statefulset_rollback(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns, verifyFor="10m")
    create(kube, gpu_statefulset("trainer", ns, scenario="input-cpu-bound", cpu="1"))
    name = "statefulset-trainer"

    def update_revision() -> str:
        return str(kube.get_json("statefulset", "-n", ns, "trainer")["status"].get("updateRevision") or "")

    yield from until(update_revision, 60, "the first revision")
    initial = update_revision()
    yield from until(
        lambda: in_phase(kube, ns, "Applied", "RolledOut", name=name), 300, "the change to be applied"
    )
    yield from until(lambda: update_revision() != initial, 60, "the new revision")
    bad = update_revision()
    yield from until(
        lambda: fail_image_pull(kube, ns, "controller-revision-hash", bad) >= 0
        and in_phase(kube, ns, "RolledBack", name=name),
        300, "the rollback",
    )  # fmt: skip

    def recovered() -> dict[str, Any] | None:
        sts = kube.get_json("statefulset", "-n", ns, "trainer")
        pod = kube.get_json("pod", "-n", ns, "trainer-0")
        fresh = pod["metadata"]["labels"].get("controller-revision-hash") == sts["status"].get(
            "updateRevision"
        )
        running = pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
        return (
            pod
            if fresh and running and pod["metadata"]["labels"].get("controller-revision-hash") != bad
            else None
        )

    yield from until(recovered, 120, "trainer-0 to run the restored revision")
    pod = kube.get_json("pod", "-n", ns, "trainer-0")
    cpu = pod["spec"]["containers"][0]["resources"]["limits"]["cpu"]
    case.seen = f"RolledBack; stuck pod replaced: trainer-0 {pod['status']['phase']} with cpu {cpu}"
    case.ok = cpu == "1"


def policy_deleted(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns, verifyFor="10m")
    trainer(kube, ns)
    yield from until(lambda: in_phase(kube, ns, "Applied", "RolledOut"), 300, "the change to be applied")
    before = generation(kube, ns)
    kube.kubectl("delete", "gpurightsizingpolicy", f"matrix-{ns}")
    yield from until(lambda: in_phase(kube, ns, "Abandoned"), ABANDON_WAIT, "the change to be abandoned")
    yield from hold(20)
    writes = generation(kube, ns) - before
    state = apply_status(kube, ns, "deployment-trainer")
    case.seen = f"{state.get('state')}/{state.get('phase')}, workload writes after the delete: {writes}"
    case.ok = writes == 0 and "left in place unverified" in state.get("reason", "")


def forged_status(env: Env, case: Case) -> Script:
    """Review-2 H-A: status.apply written by someone else (a forged rollback to 8 GPUs, a forged
    intent for 0 replicas). The actuator's state lives in its own record: neither is carried out."""
    kube, ns = env.kube, case.namespace
    policy(kube, ns, verifyFor="10m")
    trainer(kube, ns, replicas=2)
    yield from until(lambda: in_phase(kube, ns, "Applied", "RolledOut"), 300, "the ordinary change")
    before = generation(kube, ns)
    gpu = "containers[main].resources.limits[nvidia.com/gpu]"

    def patch_text(change: str, target: dict[str, str], previous: dict[str, str], **extra: str) -> str:
        note = json.dumps({"changeId": change, "at": "2026-01-01T00:00:00+00:00", "actions": [],
                           "target": target, "previous": previous, "baseline": {}, **extra})  # fmt: skip
        return json.dumps({"metadata": {"annotations": {"gpurightsizer.io/previous": note}}})

    for forged in (
        {"phase": "RollbackIntentRecorded", "policy": f"matrix-{ns}", "changeId": "c-handmade",
         "patch": patch_text("c-handmade", {gpu: "1"}, {gpu: "8"}),
         "rollback": patch_text("c-undo", {gpu: "8"}, {gpu: "1"}, rollbackOf="c-handmade")},
        {"phase": "IntentRecorded", "state": "Pending", "policy": f"matrix-{ns}", "changeId": "c-zero",
         "patch": patch_text("c-zero", {"replicas": "0"}, {"replicas": "2"})},
    ):  # fmt: skip
        kube.kubectl(
            "patch", "gpurecommendation", "-n", ns, "deployment-trainer", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"apply": forged}}),
        )  # fmt: skip
        yield from hold(15)
    deployment = kube.get_json("deployment", "-n", ns, "trainer")
    limits = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    writes = generation(kube, ns) - before
    case.seen = f"gpu {limits.get('nvidia.com/gpu')}, replicas {deployment['spec']['replicas']}, workload writes: {writes}"
    case.ok = str(limits.get("nvidia.com/gpu")) == "1" and deployment["spec"]["replicas"] == 2 and writes == 0


def forged_record(env: Env, case: Case) -> Script:
    """A change record the policy does not allow (replicas 0 under actions [memory]): refused with an
    Event and a condition, no write. (Who may write a record at all: test_helm_install, by impersonation.)
    The policy leaves out cpu so that the actuator never starts the trainer's own change, whose record
    would otherwise exist before the forged one is created."""
    kube, ns = env.kube, case.namespace
    policy(kube, ns, actions=("memory",))
    trainer(kube, ns, replicas=2)
    yield from until(lambda: recommendation(kube, ns, "deployment-trainer"), 120, "the recommendation")
    uid = kube.get_json("deployment", "-n", ns, "trainer")["metadata"]["uid"]
    note = json.dumps({"changeId": "c-zero", "at": "2026-01-01T00:00:00+00:00", "actions": ["replicas"],
                       "target": {"replicas": "0"}, "previous": {"replicas": "2"}, "baseline": {}})  # fmt: skip
    create(kube, {
        "apiVersion": "gpurightsizer.io/v1alpha1", "kind": "GPURightsizingChange",
        "metadata": {"name": "deployment-trainer", "namespace": ns},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"}, "workloadUid": uid},
    })  # fmt: skip
    kube.kubectl(
        "patch", "gpurightsizingchange", "-n", ns, "deployment-trainer", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": "IntentRecorded", "state": "Pending", "policy": f"matrix-{ns}",
                                     "changeId": "c-zero", "appliedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                     "patch": json.dumps({"metadata": {"annotations": {"gpurightsizer.io/previous": note}}})}}),
    )  # fmt: skip
    yield from until(lambda: "refused" in change_record(kube, ns).get("reason", ""), 120, "the refusal")

    def refusal_events() -> str:
        return str(
            kube.kubectl(
                "get", "events", "-n", ns, "--field-selector", "reason=ChangeRefused", "-o", "name"
            ).stdout
        ).strip()

    # the Event is posted after the record's status: on a loaded machine it can come a pass later
    yield from until(refusal_events, 60, "the ChangeRefused event")
    record = change_record(kube, ns)
    replicas = kube.get_json("deployment", "-n", ns, "trainer")["spec"]["replicas"]
    events = refusal_events()
    condition = next((c for c in record.get("conditions") or [] if c.get("type") == "RecordValid"), {})
    case.seen = f"{record.get('phase')}: {record.get('reason', '')[:70]}; RecordValid {condition.get('status')}; replicas {replicas}"
    case.ok = replicas == 2 and condition.get("status") == "False" and bool(events)


def error_storm(env: Env, case: Case) -> Script:
    """Review-2 H-B under f2_storm: 300 runs in the in-memory fake (too many for the real cluster)."""
    from tests.unit.operator.test_actuator_boundary import storm_run

    outcomes = [storm_run(seed) for seed in range(300)]
    yield
    left = sum(1 for cpu, _, _ in outcomes if cpu == "4")
    rolled_back = sum(1 for _, _, state in outcomes if state == "RolledBack")
    case.seen = (
        f"in-memory fake: {rolled_back}/300 rolled back, {left} landed changes abandoned or unverified"
    )
    case.ok = left == 0 and rolled_back >= 250


def recreated_workload(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns, verifyFor="10m")
    trainer(kube, ns)
    yield from until(lambda: in_phase(kube, ns, "Applied", "RolledOut"), 300, "the change to be applied")
    old = change_record(kube, ns).get("changeId")
    kube.kubectl("delete", "deployment", "-n", ns, "trainer", "--wait=true")
    trainer(kube, ns)
    uid = kube.get_json("deployment", "-n", ns, "trainer")["metadata"]["uid"]
    yield from until(
        lambda: "recreated" in json.dumps(change_record(kube, ns).get("history") or []), 120, "the refusal"
    )
    record = change_record(kube, ns)
    spec = kube.get_json("gpurightsizingchange", "-n", ns, "deployment-trainer")["spec"]
    cpu = template_cpu(kube, ns)
    case.seen = f"old change {old} refused on the new uid (record bound to it: {spec['workloadUid'] == uid}); now {record.get('phase')}, cpu {cpu[0]}"
    case.ok = (spec["workloadUid"] == uid and record.get("changeId") != old) or cpu == ("1", "1")


def argocd_hpa(env: Env, case: Case) -> Script:
    """Review-2 H-E: the HPA's bounds are Argo CD's (server-side apply, manager argocd-controller)."""
    import yaml

    kube, ns = env.kube, case.namespace
    policy(kube, ns, actions=("replicas",))
    create(
        kube,
        gpu_deployment("serve", ns, scenario="under-replicated", cpu="4", replicas=2, product="NVIDIA-H200"),
    )
    hpa = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "serve", "namespace": ns},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve"},
                 "minReplicas": 2, "maxReplicas": 2,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]},
    }  # fmt: skip
    kube.kubectl(
        "apply",
        "--server-side",
        "--field-manager=argocd-controller",
        "-f",
        "-",
        input_text=yaml.safe_dump(hpa),
    )
    yield from until(
        lambda: "'argocd-controller'" in apply_status(kube, ns, "deployment-serve").get("reason", ""), 300,
        "the field-owner refusal",
    )  # fmt: skip
    yield from hold(10)
    state = apply_status(kube, ns, "deployment-serve")
    bounds = kube.get_json("hpa", "-n", ns, "serve")["spec"]
    case.seen = f"{state.get('state')}: {state.get('reason', '')[:80]}; HPA {bounds['minReplicas']}-{bounds['maxReplicas']}"
    case.ok = state.get("state") == "Blocked" and bounds["maxReplicas"] == 2


def paused_setup(kube: Kube, ns: str) -> None:
    policy(kube, ns)
    trainer(kube, ns, replicas=2)
    kube.kubectl("rollout", "pause", "deployment/trainer", "-n", ns)


def recreate_setup(kube: Kube, ns: str) -> None:
    policy(kube, ns)
    manifest = gpu_deployment("trainer", ns, scenario="input-cpu-bound", cpu="1", replicas=3)
    manifest["spec"]["strategy"] = {"type": "Recreate"}
    create(kube, manifest)
    create(kube, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "two-of-three", "namespace": ns},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "trainer"}}},
    })  # fmt: skip


def garbage_at_verify_end(env: Env, case: Case) -> Script:
    """Review-2 M-A: a proxy in front of the real Prometheus answers garbage for 6 s from the end of
    verifyFor; the good change must still be Verified (before: rolled back or Inconclusive)."""
    kube, ns = env.kube, case.namespace
    proxy = GarbageProxy(env.url)
    policy(kube, ns, verifyFor="30s")
    trainer(kube, ns)
    own_operator(env, case, unique_name("lease"), "proxied", url=proxy.url)
    yield from until(lambda: change_record(kube, ns).get("rolledOutAt"), 300, "the rollout")
    rolled_out = change_record(kube, ns)["rolledOutAt"]
    end = calendar.timegm(time.strptime(rolled_out, "%Y-%m-%dT%H:%M:%SZ")) + 30
    yield from until(lambda: time.time() >= end - 1, 60, "the end of verifyFor")
    proxy.garbage_until = time.time() + 6
    failed = 0
    while not in_phase(kube, ns, "Verified", "RolledBack", "Inconclusive", "Done"):
        failed = max(failed, int(change_record(kube, ns).get("failedReads") or 0))
        if time.time() > end + 180:
            break
        yield
    proxy.close()
    record = change_record(kube, ns)
    case.seen = f"garbage answers {proxy.garbled}; failed reads retried {failed}; then {record.get('phase')}, cpu {template_cpu(kube, ns)[0]}"
    case.ok = record.get("phase") == "Verified" and proxy.garbled > 0


class GarbageProxy:
    """Forwards to Prometheus; while `garbage_until` is in the future, every answer is HTML garbage."""

    def __init__(self, upstream: str) -> None:
        import http.server
        import threading
        import urllib.request

        self.garbage_until = 0.0
        self.garbled = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if time.time() < outer.garbage_until:
                    outer.garbled += 1
                    body = b"<html>502 Bad Gateway</html>"
                    self.send_response(200)
                else:
                    with urllib.request.urlopen(upstream + self.path, timeout=30) as answer:
                        body = answer.read()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def policy_off_mid_change(env: Env, case: Case) -> Script:
    """Review-2 M-C: the policy is set to Off while the change's pods cannot start: with onDisable's
    default (Finish) the failing change is rolled back, and its history stays in the change record."""
    kube, ns = env.kube, case.namespace
    _, bad = yield from changed_trainer(kube, ns)
    policy(kube, ns, mode="Off", verifyFor="10m")
    yield from until(
        lambda: fail_image_pull(kube, ns, "pod-template-hash", bad) >= 0
        and change_record(kube, ns).get("phase") == "RolledBack",
        180, "the rollback under Off",
    )  # fmt: skip
    settled = generation(kube, ns)
    yield from hold(20)
    record = change_record(kube, ns)
    outcomes = [h.get("outcome") for h in record.get("history") or []]
    case.seen = (
        f"history {outcomes}, cpu {template_cpu(kube, ns)[0]}, writes after: {generation(kube, ns) - settled}"
    )
    case.ok = (
        outcomes[-1:] == ["RolledBack"]
        and template_cpu(kube, ns) == ("1", "1")
        and generation(kube, ns) == settled
    )


def policy_off_across_restart(env: Env, case: Case) -> Script:
    """The policy is set to Off while the change's pods cannot start, and kube-apiserver restarts at
    that moment (same etcd and port). The actuator's passes fail while it is away; afterwards the
    failing change is rolled back once (onDisable Finish), and nothing is lost: the change record's
    history keeps every earlier entry and gains this one, and the recommendation stays for as long
    as the change is in flight (an Off policy removes it only once the change has settled)."""
    kube, ns = env.kube, case.namespace
    # a lease that outlives the restart: this row is about the change, not about a failover
    own_operator(env, case, unique_name("lease"), "restart", extra_args=("--lease-seconds", "90"))
    _, bad = yield from changed_trainer(kube, ns)
    before = change_record(kube, ns)
    history_before = before.get("history") or []
    policy(kube, ns, mode="Off", verifyFor="10m")
    fail_image_pull(kube, ns, "pod-template-hash", bad)
    down = kube.cluster.restart_apiserver(down_seconds=5)
    missing_while_in_flight: list[str] = []

    def rolled_back() -> bool:
        fail_image_pull(kube, ns, "pod-template-hash", bad)
        phase = change_record(kube, ns).get("phase")
        listed = kube.kubectl("get", "gpurecommendation", "-n", ns, "-o", "name").stdout.split()
        if phase not in ("RolledBack", "Done", "Abandoned") and not listed:
            missing_while_in_flight.append(str(phase))
        return phase == "RolledBack"

    yield from until(rolled_back, 240, "the rollback under Off after the restart")
    settled = generation(kube, ns)
    yield from hold(20)
    record = change_record(kube, ns)
    history = record.get("history") or []
    outcomes = [entry.get("outcome") for entry in history]
    case.seen = (
        f"API server away {down:.0f} s; {before.get('phase')} -> history {outcomes}, cpu "
        f"{template_cpu(kube, ns)[0]}, writes after: {generation(kube, ns) - settled}, "
        f"recommendation missing in flight: {len(missing_while_in_flight)}"
    )
    case.ok = (
        history[: len(history_before)] == history_before
        and outcomes[len(history_before) :] == ["RolledBack"]
        and history[-1].get("changeId") == before.get("changeId")
        and not missing_while_in_flight
        and template_cpu(kube, ns) == ("1", "1")
        and generation(kube, ns) == settled
    )


def cases() -> list[Case]:
    return [
        Case("mode switch mid-change", "onDisable Keep: Abandoned, no workload write after the switch", mode_switch),
        Case("human edit between apply and rollback", "superseded, not blamed: no rollback, limit 6, request 4", human_edit),
        Case("SIGKILL during apply", "intent recorded, workload untouched; resumed once: Verified, 1 rollout", crash_during_apply, shared_operator=False),
        Case("SIGKILL during rollback", "rollback intent recorded; resumed: RolledBack, cpu 1, never re-applied", crash_during_rollback, shared_operator=False),
        Case("two actuators, one with renewals delayed", "slow one exits (3) without writing; the other applies once", delayed_renewals, shared_operator=False),
        Case("PDB at zero allowance", "Blocked: PodDisruptionBudget, untouched", blocked_case("PodDisruptionBudget keep-both", pdb_setup)),
        Case("single-replica Deployment", "Blocked: replica floor, untouched", blocked_case("replica floor", single_replica_setup)),
        Case("image that never pulls", "RolledBack within 3 minutes: ErrImagePull", image_never_pulls),
        Case("StatefulSet rollback", "RolledBack; the stuck pod replaced with cpu 1", statefulset_rollback),
        Case("controller-owned Deployment", "Blocked: names ConfigMap/llm, untouched", blocked_case("managed by ConfigMap/llm", controller_owned_setup)),
        Case("field owned by simulated Argo CD", "Blocked: conflict with argocd-controller, untouched", blocked_case("'argocd-controller'", argocd_setup)),
        Case("policy deleted mid-verification", "Abandoned, no workload write after the delete", policy_deleted),
        Case("forged status.apply", "neither forgery carried out: gpu 1, replicas 2, no write", forged_status),
        Case("forged change record", "refused: Event, RecordValid False, replicas 2", forged_record),
        Case("lost Applied write, 40 % error storm", "300 fake runs: 0 landed changes abandoned or unverified", error_storm),
        Case("recreated workload", "the old change refused on the new uid; record rebound", recreated_workload),
        Case("HPA field owned by Argo CD", "Blocked: conflict with argocd-controller, HPA 2-2", argocd_hpa),
        Case("paused Deployment", "Blocked: paused, untouched", blocked_case("paused", paused_setup)),
        Case("Recreate Deployment", "Blocked: allowRecreate, untouched", blocked_case("allowRecreate", recreate_setup)),
        Case("garbage Prometheus answer at verifyFor's end", "retried, then Verified", garbage_at_verify_end, shared_operator=False),
        Case("policy set to Off mid-change", "failing change rolled back (onDisable Finish); history kept", policy_off_mid_change),
        *in_place_cases(),
    ]  # fmt: skip


def table(rows: list[Case]) -> str:
    widths = [max(len(r.name) for r in rows), max(len(r.expected) for r in rows)]
    lines = [f"{'case':<{widths[0]}} | {'expected':<{widths[1]}} | seen", "-" * (widths[0] + widths[1] + 60)]
    for row in rows:
        mark = "ok  " if row.ok else "FAIL"
        lines.append(f"{row.name:<{widths[0]}} | {row.expected:<{widths[1]}} | {mark} {row.seen}")
    return "\n".join(lines)


def test_actuation_matrix(
    kube: Kube, live_metrics: str, run_operator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    env = Env(kube, live_metrics, run_operator)
    only = os.environ.get("GPURS_MATRIX_CASES")  # a comma-separated subset, to rerun failed rows
    rows = [row for row in cases() if not only or any(part.strip() in row.name for part in only.split(","))]
    for row in rows:
        row.namespace = kube.create_namespace("mx")
    shared = [row.namespace for row in rows if row.shared_operator]
    # without namespaces the shared operator would watch them all, the other rows' included
    operator = (
        run_operator(
            "--role", "all", "--prometheus-url", live_metrics, "--lease-name", unique_name("lease"),
            *FAST, *[arg for ns in shared for arg in ("-n", ns)], name="shared",
        )
        if shared
        else None
    )  # fmt: skip
    drive(env, rows)
    with capsys.disabled():
        print("\n" + table(rows) + "\n")
    details = "".join(diagnostics(kube, row, operator) for row in rows if not row.ok)
    assert all(row.ok for row in rows), "\n" + table(rows) + details


def drive(env: Env, rows: list[Case], timeout: float = MATRIX_TIMEOUT) -> None:
    """Run the rows' scripts side by side, a round every ROUND seconds, until all ended or `timeout`."""
    scripts: dict[str, Script] = {row.name: row.script(env, row) for row in rows}
    deadline = time.monotonic() + timeout
    while scripts and time.monotonic() < deadline:
        for row in rows:
            script = scripts.get(row.name)
            if script is None:
                continue
            try:
                next(script)
            except StopIteration:
                del scripts[row.name]
            except CaseFailedError as failure:
                row.seen = str(failure)
                del scripts[row.name]
            # a broken step, or a fixture's pytest.fail (an operator that did not start), is a
            # failed row, not a crashed matrix
            except (Exception, pytest.fail.Exception) as error:
                row.seen = f"error: {error}"[:200]
                del scripts[row.name]
        time.sleep(ROUND)


def diagnostics(kube: Kube, row: Case, shared: Background | None) -> str:
    """What a failed row's namespace holds, and the tail of the operator log that served it."""
    objects = kube.kubectl(
        "get", "deploy,sts,rs,pods,gpurecommendations", "-n", row.namespace, "-o", "wide", check=False
    ).stdout
    apply = json.dumps(change_record(kube, row.namespace), indent=1)[:1500]
    logs = [p.output()[-1500:] for p in row.processes] or ([shared.output()[-1500:]] if shared else [])
    return f"\n--- {row.name} ({row.namespace}) ---\n{objects}\nchange record: {apply}\n" + "\n".join(logs)


# --------------------------------------------------------------------------------------------------
# In-place resize (pods/resize): Jobs, CRD trainers, bare pods, opted-in Deployments
# --------------------------------------------------------------------------------------------------

PYTORCHJOB_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "names": {"kind": "PyTorchJob", "plural": "pytorchjobs", "singular": "pytorchjob", "listKind": "PyTorchJobList"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}  # fmt: skip


def trainer_pod(
    name: str,
    namespace: str,
    *,
    annotations: dict[str, str] | None = None,
    cpu_resize_policy: str | None = None,
) -> dict[str, Any]:
    """The pod spec of the simulated starved trainer (cpu 1, one H100), as gpu_deployment's template;
    its CPU resizes without a restart unless `cpu_resize_policy` says otherwise."""
    template = gpu_deployment(
        name, namespace, scenario="input-cpu-bound", cpu="1", cpu_resize_policy=cpu_resize_policy
    )["spec"]["template"]
    template["metadata"]["annotations"].update(
        {"sim.gpurightsizer.io/runs": "Forever", **(annotations or {})}
    )
    # the API server allows a RestartContainer resizePolicy only where the pod may restart containers
    template["spec"]["restartPolicy"] = "OnFailure" if cpu_resize_policy == "RestartContainer" else "Never"
    return dict(template)


def starved_job(
    kube: Kube,
    namespace: str,
    name: str = "train",
    cpu_resize_policy: str | None = None,
    **pod_annotations: str,
) -> None:
    template = trainer_pod(name, namespace, annotations=pod_annotations, cpu_resize_policy=cpu_resize_policy)
    # under restartPolicy OnFailure a container restart counts against backoffLimit
    backoff = 6 if cpu_resize_policy == "RestartContainer" else 0
    create(kube, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": backoff, "template": template},
    })  # fmt: skip


def starved_pytorchjob(kube: Kube, namespace: str, name: str = "train") -> None:
    """A PyTorchJob with one worker pod, created as the training operator would (ownerReference)."""
    kube.apply(PYTORCHJOB_CRD)
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/pytorchjobs.kubeflow.org")
    template = trainer_pod(name, namespace)
    create(kube, {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}},
    })  # fmt: skip
    uid = kube.get_json("pytorchjob", "-n", namespace, name)["metadata"]["uid"]
    create(kube, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{name}-worker-0", "namespace": namespace,
            "labels": {**template["metadata"]["labels"], "training.kubeflow.org/replica-type": "worker"},
            "annotations": template["metadata"]["annotations"],
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name, "uid": uid,
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": template["spec"],
    })  # fmt: skip


def workload_pods(kube: Kube, namespace: str) -> dict[str, dict[str, Any]]:
    """The namespace's running pods by uid."""
    items = kube.get_json("pods", "-n", namespace)["items"]
    return {p["metadata"]["uid"]: p for p in items if p["status"].get("phase") == "Running"}


def pod_cpu(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(spec, status) CPU limit of the pod's container: what was asked, what the kubelet applied."""
    spec = pod["spec"]["containers"][0]["resources"]["limits"]["cpu"]
    status = ((pod["status"].get("containerStatuses") or [{}])[0].get("resources") or {}).get("limits") or {}
    return str(spec), str(status.get("cpu"))


Settled = tuple[dict[str, Any], set[str], dict[str, dict[str, Any]], list[tuple[str, str]], str]


def resized_and_verified(
    kube: Kube, namespace: str, record: str, template: Callable[[], str]
) -> Generator[None, None, Settled]:
    """The common check: raised in place on the same pods, the template untouched, then Verified."""
    yield from until(lambda: workload_pods(kube, namespace), 90, "the trainer pod to run")
    before = set(workload_pods(kube, namespace))
    yield from until(lambda: in_phase(kube, namespace, "Verified", "RolledBack", "Abandoned", "Done", name=record)
                     or apply_status(kube, namespace, record).get("state") == "Blocked", 600, "the change to settle")  # fmt: skip
    state = apply_status(kube, namespace, record)
    pods = workload_pods(kube, namespace)
    cpus = sorted({pod_cpu(p) for p in pods.values()})
    return state, before, pods, cpus, template()


def in_place_case(kind: str) -> Callable[[Env, Case], Script]:
    def script(env: Env, case: Case) -> Script:
        kube, ns = env.kube, case.namespace
        policy(kube, ns)
        if kind == "Job":
            starved_job(kube, ns)
            record, template = "job-train", lambda: template_cpu(kube, ns, "job", "train")[0]
        elif kind == "PyTorchJob":
            starved_pytorchjob(kube, ns)
            record = "pytorchjob-train"
            template = lambda: str(  # noqa: E731
                kube.get_json("pytorchjob", "-n", ns, "train")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
                ["spec"]["containers"][0]["resources"]["limits"]["cpu"]
            )  # fmt: skip
        else:  # no annotation: a CPU raise its pod takes without a restart goes in place
            trainer(kube, ns, cpu_resize_policy=None)
            record, template = "deployment-trainer", lambda: template_cpu(kube, ns)[0]
        state, before, pods, cpus, cpu_in_template = yield from resized_and_verified(
            kube, ns, record, template
        )
        advice = str(state.get("manifestAdvice") or "")
        case.seen = (
            f"{state.get('state')}; pods recreated: {len(set(pods) ^ before)}; pod cpu spec/status {cpus}; "
            f"template cpu {cpu_in_template}; advice: {advice[:70]}"
        )
        raised = all(spec == status and spec != "1" for spec, status in cpus)
        case.ok = (
            state.get("state") == "Verified" and set(pods) == before and raised and cpu_in_template == "1"
            and ("next run" in advice if kind != "Deployment" else "new pods start" in advice)
        )  # fmt: skip

    return script


def infeasible_resize(env: Env, case: Case) -> Script:
    kube, ns = env.kube, case.namespace
    policy(kube, ns)
    starved_job(kube, ns, **{"sim.gpurightsizer.io/resize": "Infeasible"})
    state, before, pods, cpus, _ = yield from resized_and_verified(kube, ns, "job-train", lambda: "")
    record = change_record(kube, ns, "job-train")
    case.seen = f"{state.get('state')}: {str(state.get('reason'))[:90]}; pod cpu spec/status {cpus}"
    case.ok = (
        state.get("state") == "Blocked" and "Infeasible" in str(state.get("reason")) and cpus == [("1", "1")]
        and set(pods) == before and [h.get("outcome") for h in record.get("history") or []][-1:] == ["Abandoned"]
    )  # fmt: skip


def deferred_resize(env: Env, case: Case) -> Script:
    """The kubelet defers the resize (the node has no room now): the actuator waits one verifyFor
    (30 s), then gives up cleanly: the pod is resized back, its conditions cleared, nothing retried."""
    kube, ns = env.kube, case.namespace
    policy(kube, ns)
    starved_job(kube, ns, **{"sim.gpurightsizer.io/resize": "Deferred"})
    yield from until(lambda: "deferred" in str(apply_status(kube, ns, "job-train").get("reason")), 480,
                     "the resize to be deferred")  # fmt: skip
    waited = apply_status(kube, ns, "job-train")
    state, before, _, _, _ = yield from resized_and_verified(kube, ns, "job-train", lambda: "")
    yield from hold(15)
    pods = workload_pods(kube, ns)
    pending = [c.get("type") for p in pods.values() for c in p["status"].get("conditions") or []
               if c.get("type", "").startswith("PodResize")]  # fmt: skip
    record = change_record(kube, ns, "job-train")
    case.seen = (
        f"{state.get('state')}/{state.get('phase')}: {str(state.get('reason'))[-90:]}; pod cpu spec/status "
        f"{sorted({pod_cpu(p) for p in pods.values()})}; resize conditions {pending}"
    )
    case.ok = (
        "deferred" in str(waited.get("reason")) and state.get("state") == "Skipped"
        and state.get("phase") == "Abandoned" and "not resized within verifyFor" in str(state.get("reason"))
        and sorted({pod_cpu(p) for p in pods.values()}) == [("1", "1")] and set(pods) == before
        and not pending and [h.get("outcome") for h in record.get("history") or []][-1:] == ["Abandoned"]
    )  # fmt: skip


def restarting_resize(env: Env, case: Case) -> Script:
    """A container that restarts on a CPU resize (resizePolicy RestartContainer): the resize counts as
    a restart of the Job's only pod, so the replica floor blocks it; once the policy allows a single
    replica to restart, the same pod is resized, restarted once, and counted as a pod in disruption."""
    kube, ns = env.kube, case.namespace
    policy(kube, ns, allowSingleReplica=False)
    starved_job(kube, ns, cpu_resize_policy="RestartContainer")
    state, before, pods, cpus, _ = yield from resized_and_verified(kube, ns, "job-train", lambda: "")
    blocked = f"{state.get('state')}: {str(state.get('reason'))[:40]}, cpu {cpus}"
    was_blocked = (
        state.get("state") == "Blocked"
        and "replica floor" in str(state.get("reason"))
        and cpus == [("1", "1")]
    )
    policy(kube, ns, allowSingleReplica=True)
    yield from until(lambda: in_phase(kube, ns, "RolledOut", name="job-train"), 300, "the resize to be done")
    pods = workload_pods(kube, ns)
    restarts = [
        int((p["status"].get("containerStatuses") or [{}])[0].get("restartCount") or 0) for p in pods.values()
    ]
    counted = change_record(kube, ns, "job-train").get("replicas")
    cpus = sorted({pod_cpu(p) for p in pods.values()})
    case.seen = f"{blocked}; then pod cpu {cpus}, restarts {restarts}, pods in disruption {counted}"
    case.ok = (
        was_blocked and set(pods) == before and cpus == [("4", "4")] and restarts == [1] and counted == 1
    )


def crash_during_resize_rollback(env: Env, case: Case) -> Script:
    """SIGKILL after the rollback intent of an in-place resize (onDisable RollBack): resumed by the next
    actuator, the pods end at their old size, never resized again."""
    kube, ns = env.kube, case.namespace
    policy(kube, ns, verifyFor="10m")
    starved_job(kube, ns)
    lease = unique_name("lease")
    crashing = own_operator(env, case, lease, "crashing", fault("resize-rollback"))
    yield from until(lambda: in_phase(kube, ns, "RolledOut", name="job-train"), 480, "the resize to be done")
    before = set(workload_pods(kube, ns))
    policy(kube, ns, mode="Recommend", verifyFor="10m", onDisable="RollBack")
    yield from until(lambda: crashing.process.poll() is not None, 120, "the crash after the rollback intent")
    intent = change_record(kube, ns, "job-train")
    still_raised = {pod_cpu(p)[0] for p in workload_pods(kube, ns).values()} != {"1"}
    own_operator(env, case, lease, "restarted")
    yield from until(
        lambda: in_phase(kube, ns, "RolledBack", name="job-train"), 120, "the rollback to finish"
    )
    yield from until(
        lambda: {pod_cpu(p) for p in workload_pods(kube, ns).values()} == {("1", "1")}, 30, "the old size"
    )
    yield from hold(15)
    pods = workload_pods(kube, ns)
    cpus = sorted({pod_cpu(p) for p in pods.values()})
    case.seen = (
        f"exit {crashing.process.returncode} at {intent.get('phase')} (still raised: {still_raised}); then "
        f"{apply_status(kube, ns, 'job-train').get('state')}, pod cpu {cpus}, pods recreated {len(set(pods) ^ before)}"
    )
    case.ok = (
        crashing.process.returncode == 17 and intent.get("phase") == "RollbackIntentRecorded" and still_raised
        and cpus == [("1", "1")] and set(pods) == before
        and apply_status(kube, ns, "job-train").get("state") == "RolledBack"
    )  # fmt: skip


def in_place_cases() -> list[Case]:
    return [
        Case("in-place Job", "Verified; same pods, cpu raised in spec and status; Job template 1; next-run note", in_place_case("Job")),
        Case("in-place PyTorchJob", "Verified; same pod, cpu raised; PyTorchJob template 1; next-run note", in_place_case("PyTorchJob")),
        Case("in-place Deployment", "no annotation: Verified; same pod, cpu raised; template 1; manifest advice", in_place_case("Deployment")),
        Case("in-place Infeasible", "Blocked: Infeasible, resized back to 1, same pod", infeasible_resize),
        Case("in-place Deferred", "waits one verifyFor, then Skipped/Abandoned: resized back to 1, conditions cleared", deferred_resize),
        Case("in-place RestartContainer", "Blocked: replica floor; allowed: same pod raised, 1 restart, 1 pod in disruption", restarting_resize),
        Case("SIGKILL during in-place rollback", "rollback intent recorded; resumed: RolledBack, cpu 1, same pod", crash_during_resize_rollback, shared_operator=False),
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Row "spoofed exported_* series": its own Prometheus, which scrapes a tenant's target as well
# --------------------------------------------------------------------------------------------------
#: After the first analysis, how long the spoofed trainer is watched for a change (a MIG change of
#: believed spoofed figures lands within one or two cycles of 5 s).
SPOOF_WATCH_SECONDS = 25.0
#: Apply states that mean no change was started.
NO_CHANGE = (None, "Advised", "Skipped", "Blocked")

from tests.e2e.test_actuation_e2e import apply_policy, container_resources, operator_args  # noqa: E402
from tests.e2e.test_gpu_spoofing import SpoofedMetrics, spoof_a_busy_trainer, spoofed_metrics  # noqa: E402, F401


def test_matrix_spoofed_exported_series(
    kube: Kube,
    spoofed_metrics: SpoofedMetrics,  # noqa: F811 (the imported session fixture)
    run_operator: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    row = Case(
        "spoofed exported_* series",
        "victim keeps its figures (Healthy), no automatic action, untouched",
        lambda env, case: iter(()),
    )
    namespace = row.namespace = kube.create_namespace("mx-spoof")
    apply_policy(
        kube, f"apply-{namespace}", namespace, ["migProfile"],
        sharingStrategy="mig-mixed", allowedMigProfiles=["1g.18gb", "2g.35gb", "3g.71gb"],
    )  # fmt: skip
    spoof_a_busy_trainer(kube, spoofed_metrics, namespace, product="NVIDIA-H200")
    operator = run_operator(*operator_args(spoofed_metrics.url, namespace), name="spoof")

    def analysed() -> dict[str, Any] | None:
        status = (recommendation(kube, namespace, "deployment-trainer") or {}).get("status") or {}
        enough = (status.get("diagnosis") or {}).get("primary") not in (None, "InsufficientData")
        return status if enough else None

    first = kube.wait_for(analysed, timeout=120, what="an analysis of the trainer with enough samples")
    deadline = time.monotonic() + SPOOF_WATCH_SECONDS
    status = first
    while (
        time.monotonic() < deadline
        and apply_status(kube, namespace, "deployment-trainer").get("state") in NO_CHANGE
    ):
        time.sleep(ROUND)
        status = analysed() or status
    limits = container_resources(kube, namespace, "trainer")["limits"]
    automatic = [a["type"] for a in status.get("actions") or [] if a.get("automatic")]
    apply = apply_status(kube, namespace, "deployment-trainer")
    primary = status["diagnosis"]["primary"]
    gpu_limits = sorted(k for k in limits if k.startswith("nvidia.com/"))
    row.seen = (
        f"{primary}, automatic {automatic or 'none'}; apply {apply.get('state', 'none')}, limits {gpu_limits}"
    )
    row.ok = (
        primary == "Healthy"
        and not automatic
        and apply.get("state") in NO_CHANGE
        and gpu_limits == ["nvidia.com/gpu"]
    )
    with capsys.disabled():
        print("\n" + table([row]) + "\n")
    assert row.ok, "\n" + table([row]) + diagnostics(kube, row, operator)


# --------------------------------------------------------------------------------------------------
# Row "policy set to Off mid-change across a kube-apiserver restart": alone, since the restart
# interrupts every client of the cluster (the shared operator's 6 s lease would lapse)
# --------------------------------------------------------------------------------------------------


def test_matrix_policy_off_across_apiserver_restart(
    kube: Kube, live_metrics: str, run_operator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    row = Case(
        "policy Off mid-change across a kube-apiserver restart",
        "failing change rolled back once after the restart; history kept",
        policy_off_across_restart, shared_operator=False,
    )  # fmt: skip
    row.namespace = kube.create_namespace("mx-restart")
    drive(Env(kube, live_metrics, run_operator), [row], timeout=600)
    with capsys.disabled():
        print("\n" + table([row]) + "\n")
    assert row.ok, "\n" + table([row]) + diagnostics(kube, row, row.processes[0])
