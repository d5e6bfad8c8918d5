"""The policies as the recommender reads them, and the status it writes on each (matched workloads,
overlaps, problems)."""

from __future__ import annotations

import logging
from datetime import datetime

from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.logic.policy import (
    count_governed,
    find_overlaps,
    policy_problems,
    readable_policies,
)
from gpu_rightsizer.model.crd import (
    GPURightsizingPolicy,
)
from gpu_rightsizer.model.k8s import stamp
from gpu_rightsizer.runtime import metrics

LOG = logging.getLogger(__name__)


def load_policies(kube: KubeAdapter) -> list[GPURightsizingPolicy]:
    """Every policy the operator can read; unreadable ones are logged and left out (never guessed)."""
    policies, problems = readable_policies(kube.list_policies())
    for problem in problems:
        metrics.ERRORS.labels("policy").inc()
        LOG.warning("%s", problem)
    return policies


def update_policy_statuses(
    kube: KubeAdapter,
    policies: list[GPURightsizingPolicy],
    governed: list[tuple[dict[str, str], dict[str, str]]],
    at: datetime,
) -> None:
    """matchedWorkloads (workloads each policy wins for among `governed`: namespace and workload
    labels), overlaps, problems, observedGeneration."""
    if not policies:
        return
    counts = count_governed(policies, governed)
    overlaps = find_overlaps(policies)
    now = stamp(at)
    for policy in policies:
        problems = policy_problems(policy)
        old = policy.status.model_dump(mode="json", by_alias=True) if policy.status else {}
        old_conditions = {c["type"]: c for c in old.get("conditions", [])}
        ready = "False" if problems else "True"
        previous_ready = old_conditions.get("Ready")
        condition = {
            "type": "Ready",
            "status": ready,
            "reason": "Invalid" if problems else "Active",
            "message": "; ".join(problems)
            or f"governs {counts[policy.name]} workload(s) in {policy.spec.mode.value} mode",
            "lastTransitionTime": previous_ready["lastTransitionTime"]
            if previous_ready and previous_ready.get("status") == ready
            else now,
            "observedGeneration": policy.metadata.get("generation"),
        }
        status = {
            "observedGeneration": policy.metadata.get("generation"),
            "matchedWorkloads": counts[policy.name],
            "overlaps": overlaps.get(policy.name, []),
            "conditions": [condition],
        }
        comparable_old = {
            **{k: old.get(k) for k in status if k != "conditions"},
            "message": (previous_ready or {}).get("message"),
        }
        comparable_new = {
            **{k: status[k] for k in status if k != "conditions"},
            "message": condition["message"],
        }
        if comparable_old == comparable_new and previous_ready and previous_ready.get("status") == ready:
            continue
        try:
            kube.patch_policy_status(policy.name, status)
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("status update of policy %s failed", policy.name)
