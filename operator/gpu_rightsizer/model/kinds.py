"""Every workload kind the operator knows, in one table: where it lives in the API and how it behaves.

Why one table: the kinds were listed 14 times (readers, listers, patchers, watched owners, scalable
kinds, template paths, rollout rules), and two copies of "scalable" disagreed. Adding a kind is one
row here; the adapters build their API calls from the row, the recommender and the actuator read
its behaviour from it (the actuator at call time: its plan, gates and verification name no kind). Custom kinds (PyTorchJob, RayCluster, ...) are read through the custom-objects
API and only recommended on; only built-in kinds with a pod template are patched.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PatchType(StrEnum):
    """How a workload is patched: strategic merge for built-in kinds (containers merge by name), JSON
    merge for custom resources (the API server refuses strategic merge there)."""

    STRATEGIC = "strategic"
    MERGE = "merge"


class Rollout(StrEnum):
    """How the actuator tells a rollout is complete, and which pods are the new revision's."""

    #: updatedReplicas and availableReplicas reach spec.replicas; new pods carry the new ReplicaSet's
    #: pod-template-hash.
    DEPLOYMENT = "Deployment"
    #: currentRevision reaches updateRevision; new pods carry controller-revision-hash = updateRevision.
    STATEFULSET = "StatefulSet"
    #: readyReplicas reaches spec.replicas; every pod counts (a ReplicaSet has one revision).
    REPLICASET = "ReplicaSet"
    #: No rollout: the next run (CronJob) or the object itself (Pod) takes the change.
    NONE = "None"


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One kind: its API coordinates, and what the operator may do with it."""

    kind: str
    api_version: str
    plural: str
    #: What it is, for the docs and log lines.
    what: str
    #: The typed client's method suffix (`read_namespaced_<client>`); None: a custom resource.
    client: str | None = None
    #: Path to the pod template (None: no template the actuator can change).
    template_path: tuple[str, ...] | None = None
    #: Has spec.replicas that an HPA or the actuator may set.
    scalable: bool = False
    #: Owns pods and is watched for the owner cache, and listed once per cycle by the recommender.
    owns_pods: bool = False
    #: The actuator may patch it.
    patchable: bool = False
    rollout: Rollout = Rollout.NONE
    #: The label that tells a new revision's pods apart.
    revision_label: str | None = None
    patch_type: PatchType = PatchType.MERGE
    #: Its pods can be given more CPU only by resizing them in place (`pods/resize`): no pod template
    #: the actuator may patch (a Job's is immutable; a trainer's belongs to its operator).
    resized_in_place: bool = False
    #: Patched through its pod template, but a CPU or memory raise its running pods take without a
    #: restart is made by resizing them in place (a template change would restart every pod), and so
    #: is every change when the workload is annotated `gpurightsizer.io/resize: InPlace`.
    resize_opt_in: bool = False
    #: The status field counting replicas that serve (a Deployment's availableReplicas waits out
    #: minReadySeconds; the others report readyReplicas).
    ready_status: str = "readyReplicas"
    #: spec.paused holds its rollouts: a change would wait until a person resumes it.
    pausable: bool = False
    #: spec.strategy.type may be Recreate, which stops every replica at once.
    recreate_strategy: bool = False
    #: The kind of the objects that carry its revisions (a Deployment's ReplicaSets), listed to tell
    #: the newest revision's pods (`revision_label`) from the old ones.
    revision_sets: str | None = None
    #: After a rollback its controller does not replace a pod of the failed revision that never
    #: became ready (a StatefulSet's ordered rollout, kubernetes#67250): the actuator deletes it.
    replaces_stuck_pods: bool = False

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def built_in(self) -> bool:
        return self.client is not None


_TEMPLATE = ("spec", "template")


def _built_in(
    kind: str, api_version: str, plural: str, what: str, client: str, **behaviour: object
) -> WorkloadKind:
    return WorkloadKind(kind, api_version, plural, what, client, patch_type=PatchType.STRATEGIC, **behaviour)  # type: ignore[arg-type]


def _custom(kind: str, api_version: str, plural: str, what: str, **behaviour: object) -> WorkloadKind:
    return WorkloadKind(kind, api_version, plural, what, **behaviour)  # type: ignore[arg-type]


#: Well-known controllers of GPU pods, by kind. Groups and versions as their projects serve them.
KINDS: dict[str, WorkloadKind] = {
    k.kind: k
    for k in (
        _built_in("Pod", "v1", "pods", "a bare pod (or an LWS leader pod owning worker StatefulSets)", "pod",
                  resized_in_place=True),
        _built_in("ReplicaSet", "apps/v1", "replicasets", "ReplicaSet", "replica_set", template_path=_TEMPLATE,
                  scalable=True, owns_pods=True, patchable=True, rollout=Rollout.REPLICASET),
        _built_in("Deployment", "apps/v1", "deployments", "Deployment", "deployment", template_path=_TEMPLATE,
                  scalable=True, owns_pods=True, patchable=True, rollout=Rollout.DEPLOYMENT,
                  revision_label="pod-template-hash", ready_status="availableReplicas", pausable=True,
                  recreate_strategy=True, revision_sets="ReplicaSet", resize_opt_in=True),
        _built_in("StatefulSet", "apps/v1", "statefulsets", "StatefulSet", "stateful_set", template_path=_TEMPLATE,
                  scalable=True, owns_pods=True, patchable=True, rollout=Rollout.STATEFULSET,
                  revision_label="controller-revision-hash", replaces_stuck_pods=True, resize_opt_in=True),
        _built_in("DaemonSet", "apps/v1", "daemonsets", "DaemonSet", "daemon_set", template_path=_TEMPLATE,
                  owns_pods=True, revision_label="controller-revision-hash"),
        _built_in("Job", "batch/v1", "jobs", "Job (also Kueue-managed Jobs: Kueue suspends, never owns them)",
                  "job", template_path=_TEMPLATE, owns_pods=True, resized_in_place=True),
        _built_in("CronJob", "batch/v1", "cronjobs", "CronJob", "cron_job",
                  template_path=("spec", "jobTemplate", "spec", "template"), owns_pods=True, patchable=True),
        _custom("PyTorchJob", "kubeflow.org/v1", "pytorchjobs", "Kubeflow Training Operator PyTorchJob", resized_in_place=True),
        _custom("TFJob", "kubeflow.org/v1", "tfjobs", "Kubeflow Training Operator TFJob", resized_in_place=True),
        _custom("XGBoostJob", "kubeflow.org/v1", "xgboostjobs", "Kubeflow Training Operator XGBoostJob", resized_in_place=True),
        _custom("PaddleJob", "kubeflow.org/v1", "paddlejobs", "Kubeflow Training Operator PaddleJob", resized_in_place=True),
        _custom("MPIJob", "kubeflow.org/v2beta1", "mpijobs", "Kubeflow MPI Operator MPIJob", resized_in_place=True),
        _custom("TrainJob", "trainer.kubeflow.org/v1alpha1", "trainjobs", "Kubeflow Trainer v2 TrainJob", resized_in_place=True),
        _custom("JobSet", "jobset.x-k8s.io/v1alpha2", "jobsets", "JobSet", resized_in_place=True),
        _custom("RayCluster", "ray.io/v1", "rayclusters", "KubeRay RayCluster", resized_in_place=True),
        _custom("RayJob", "ray.io/v1", "rayjobs", "KubeRay RayJob", resized_in_place=True),
        _custom("RayService", "ray.io/v1", "rayservices", "KubeRay RayService"),
        _custom("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "leaderworkersets", "LeaderWorkerSet"),
        _custom("Rollout", "argoproj.io/v1alpha1", "rollouts", "Argo Rollout"),
        _custom("Workflow", "argoproj.io/v1alpha1", "workflows", "Argo Workflow"),
        _custom("InferenceService", "serving.kserve.io/v1beta1", "inferenceservices", "KServe InferenceService"),
        _custom("Service", "serving.knative.dev/v1", "services", "Knative Service"),
        _custom("Configuration", "serving.knative.dev/v1", "configurations", "Knative Configuration"),
        _custom("Revision", "serving.knative.dev/v1", "revisions", "Knative Revision"),
        _custom("Notebook", "kubeflow.org/v1", "notebooks", "Kubeflow Notebook"),
        _custom("ScaledJob", "keda.sh/v1alpha1", "scaledjobs", "KEDA ScaledJob"),
    )
}  # fmt: skip

#: Built-in kinds the typed clients read (Pod included).
BUILT_IN: dict[str, WorkloadKind] = {name: k for name, k in KINDS.items() if k.built_in}
#: Kinds that own pods: watched for the owner cache, listed once per cycle.
POD_OWNERS: tuple[WorkloadKind, ...] = tuple(k for k in KINDS.values() if k.owns_pods)
#: Kinds whose pods the actuator resizes in place (never through a template).
IN_PLACE_KINDS: frozenset[str] = frozenset(name for name, k in KINDS.items() if k.resized_in_place)
#: Kinds the actuator may patch.
PATCHABLE_KINDS: frozenset[str] = frozenset(name for name, k in KINDS.items() if k.patchable)


def is_scalable(name: str) -> bool:
    """Whether the kind has spec.replicas (read from the table at call time, like every check below)."""
    row = KINDS.get(name)
    return row is not None and row.scalable


def offers_in_place_resize(name: str) -> bool:
    """Whether the kind's pod-template changes may go in place instead (its `resize_opt_in`)."""
    row = KINDS.get(name)
    return row is not None and row.resize_opt_in


def patch_template_path(name: str) -> tuple[str, ...] | None:
    """Path to the pod template of a kind the actuator may patch; None for every other kind."""
    row = KINDS.get(name)
    return row.template_path if row is not None and row.patchable else None


def kind_of(name: str, api_version: str | None = None) -> WorkloadKind | None:
    """The kind's row; None when unknown, or when `api_version`'s group is not the row's (a Knative
    Service is not a core Service)."""
    found = KINDS.get(name)
    if found is None or api_version is None:
        return found
    return found if api_version.rpartition("/")[0] == found.group else None
