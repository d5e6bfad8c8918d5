"""Generate charts/gpu-rightsizer/values.schema.json (run after changing values.yaml's structure).

The schema is written as Python data so that shared pieces (durations, namespace names, resources) are
defined once; the JSON file is what Helm reads and what is committed. tests/chart checks it is current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpu_rightsizer.model.durations import DURATION_PATTERN

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "charts" / "gpu-rightsizer" / "values.schema.json"

JsonSchema = dict[str, Any]

# The one duration grammar of the CLI, the CRDs and the operator (model/durations.py).
K8S_DURATION = DURATION_PATTERN
# Prometheus duration (used in alert `for:` and scrape intervals).
PROM_DURATION = r"^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: one trusted GPU scrape target: comma-separated label matchers, or "any" (config.parse_trusted_targets)
_TARGET_MATCHER = r'[a-zA-Z_][a-zA-Z0-9_]*\s*((=~|!=|!~|=)"[^"]*"|=[^",]*)'
TRUSTED_TARGET = rf"^(any|{_TARGET_MATCHER}(,\s*{_TARGET_MATCHER})*)$"
QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


def obj(properties: dict[str, JsonSchema], required: list[str] | None = None, **extra: Any) -> JsonSchema:
    schema: JsonSchema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    schema.update(extra)
    return schema


def string(description: str, **extra: Any) -> JsonSchema:
    return {"type": "string", "description": description, **extra}


def boolean(description: str) -> JsonSchema:
    return {"type": "boolean", "description": description}


def duration(description: str, pattern: str = PROM_DURATION) -> JsonSchema:
    return {"type": "string", "description": description, "minLength": 2, "pattern": pattern}


namespace_name: JsonSchema = {
    "type": "string",
    "description": "a Kubernetes namespace name (DNS-1123 label)",
    "minLength": 1,
    "maxLength": 63,
    "pattern": DNS_LABEL,
}
namespace_list: JsonSchema = {"type": "array", "items": namespace_name, "uniqueItems": True}
string_map: JsonSchema = {"type": "object", "additionalProperties": {"type": "string"}}
#: A price per GPU-hour: a number, or its decimal text (`helm --set` passes 2.5 as a string).
price: JsonSchema = {
    "anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}],
    "description": "a price per GPU-hour, e.g. 2.5",
}
#: The `release` label kube-prometheus-stack selects its ServiceMonitors and rules by (a label value).
release_label: JsonSchema = {
    "type": "string",
    "maxLength": 63,
    "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
    "description": "the kube-prometheus-stack release name, or empty for no release label",
}
quantity: JsonSchema = {
    "anyOf": [{"type": "string", "pattern": QUANTITY}, {"type": "number", "minimum": 0}],
    "description": "a Kubernetes quantity such as 100m, 0.5, 256Mi",
}
resource_list: JsonSchema = {
    "type": "object",
    "properties": {"cpu": quantity, "memory": quantity},
    "additionalProperties": quantity,
}
resources: JsonSchema = obj(
    {
        "requests": {**resource_list, "required": ["cpu", "memory"]},
        "limits": {**resource_list, "required": ["memory"]},
    },
    required=["requests", "limits"],
    description="requests (cpu and memory) and limits (at least memory) are required",
)
env_list: JsonSchema = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1}},
    },
}
tolerations: JsonSchema = {"type": "array", "items": {"type": "object"}}
affinity: JsonSchema = {"type": "object"}
pod_ports: JsonSchema = {
    "type": "integer",
    "minimum": 1024,
    "maximum": 65535,
    "description": "ports below 1024 need a capability the non-root containers do not have",
}
seccomp: JsonSchema = obj(
    {"type": {"enum": ["RuntimeDefault", "Localhost"]}, "localhostProfile": {"type": "string"}},
    required=["type"],
    description="Pod Security restricted allows RuntimeDefault or Localhost only",
)


def pod_placement(description_prefix: str) -> dict[str, JsonSchema]:
    return {
        "nodeSelector": {**string_map, "description": f"node labels the {description_prefix} must match"},
        "tolerations": tolerations,
        "affinity": affinity,
        "podAnnotations": string_map,
        "podLabels": string_map,
        "priorityClassName": {"type": "string"},
        "extraEnv": env_list,
        "resources": resources,
    }


def build() -> JsonSchema:
    service_account_name = {"type": "string", "anyOf": [{"maxLength": 0}, {"pattern": DNS_SUBDOMAIN}]}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "gpu-rightsizer chart values",
        **obj(
            {
                "global": {"type": "object", "description": "Helm global values (unused by this chart)"},
                "nameOverride": {"type": "string", "maxLength": 40},
                "fullnameOverride": {"type": "string", "maxLength": 40},
                "image": obj(
                    {
                        "repository": string("image repository", minLength=1),
                        "tag": {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$|^$"},
                        "digest": {
                            "type": "string",
                            "pattern": r"^$|^sha256:[a-f0-9]{64}$",
                            "description": "empty, or sha256: followed by 64 hex digits",
                        },
                        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                    },
                    required=["repository", "pullPolicy"],
                ),
                "imagePullSecrets": {"type": "array", "items": {"type": "string", "pattern": DNS_SUBDOMAIN}},
                "prometheus": obj(
                    {
                        "url": string("Prometheus base URL", minLength=8, pattern=r"^https?://[^\s]+$"),
                        "bearerToken": obj(
                            {
                                "secretName": {
                                    "type": "string",
                                    "anyOf": [{"maxLength": 0}, {"pattern": DNS_SUBDOMAIN}],
                                },
                                "key": {"type": "string", "minLength": 1, "pattern": r"^[-._a-zA-Z0-9]+$"},
                            },
                            required=["secretName", "key"],
                        ),
                        "caCertificate": obj(
                            {
                                "configMapName": {
                                    "type": "string",
                                    "anyOf": [{"maxLength": 0}, {"pattern": DNS_SUBDOMAIN}],
                                },
                                "key": {"type": "string", "minLength": 1, "pattern": r"^[-._a-zA-Z0-9]+$"},
                            },
                            required=["configMapName", "key"],
                        ),
                        "timeout": {"type": "string", "pattern": PROM_DURATION, "minLength": 2},
                        "compression": {"type": "string", "enum": ["none", "gzip"]},
                        "step": {"type": "string", "anyOf": [{"maxLength": 0}, {"pattern": PROM_DURATION}]},
                        "extraMatchers": {
                            "type": "array",
                            "maxItems": 8,
                            "items": {
                                "type": "string",
                                "pattern": r'^[a-zA-Z_][a-zA-Z0-9_]*((=~|!=|!~|=)"[^"]*"|=[^"{},]*)$',
                            },
                        },
                        "trustedGpuTargets": {
                            "type": "array",
                            "maxItems": 8,
                            "items": {"type": "string", "pattern": TRUSTED_TARGET},
                        },
                        "gpuHonorLabels": {"type": "boolean"},
                    },
                    required=["url"],
                ),
                "watch": obj({"namespaces": namespace_list}, required=["namespaces"]),
                "analysis": obj(
                    {
                        "interval": duration("re-analysis interval, e.g. 5m", K8S_DURATION),
                        "window": duration(
                            "observation window, e.g. 24h, 7d or 1d12h (units ms, s, m, h, d, w); at least 5m, which the templates check "
                            "(a schema cannot add up 4m59s)",
                            K8S_DURATION,
                        ),
                    },
                    required=["interval", "window"],
                ),
                "logLevel": {"enum": ["DEBUG", "INFO", "WARNING", "ERROR"]},
                "serviceAccount": obj(
                    {"create": boolean("create the ServiceAccounts"), "annotations": string_map},
                    required=["create"],
                ),
                "rbac": obj({"create": boolean("create RBAC")}, required=["create"]),
                "podSecurityContext": {
                    "type": "object",
                    "description": "pod securityContext; must stay Pod Security restricted",
                    "properties": {
                        "runAsNonRoot": {
                            "const": True,
                            "description": "must be true (Pod Security restricted)",
                        },
                        "runAsUser": {"type": "integer", "minimum": 1, "description": "must not be 0 (root)"},
                        "runAsGroup": {"type": "integer", "minimum": 0},
                        "fsGroup": {"type": "integer", "minimum": 0},
                        "seccompProfile": seccomp,
                    },
                    "required": ["runAsNonRoot", "seccompProfile"],
                },
                "containerSecurityContext": {
                    "type": "object",
                    "description": "container securityContext; must stay Pod Security restricted",
                    "properties": {
                        "allowPrivilegeEscalation": {"const": False, "description": "must be false"},
                        "privileged": {"const": False, "description": "must be false"},
                        "readOnlyRootFilesystem": {"type": "boolean"},
                        "runAsNonRoot": {"const": True, "description": "must be true"},
                        "runAsUser": {"type": "integer", "minimum": 1},
                        "runAsGroup": {"type": "integer", "minimum": 0},
                        "capabilities": {
                            "type": "object",
                            "properties": {
                                "drop": {"type": "array", "contains": {"const": "ALL"}},
                                "add": {"type": "array", "items": {"const": "NET_BIND_SERVICE"}},
                            },
                            "required": ["drop"],
                        },
                        "seccompProfile": seccomp,
                    },
                    "required": ["allowPrivilegeEscalation", "capabilities"],
                },
                "tmpSizeLimit": {"type": "string", "pattern": QUANTITY},
                "commonLabels": string_map,
                "avoidGPUNodes": boolean("keep the operator pods off GPU nodes (required node affinity)"),
                "recommender": obj(
                    {
                        "serviceAccountName": service_account_name,
                        "shards": {
                            "type": "integer",
                            "minimum": 1,
                            "description": "recommenders sharing the workloads by namespace hash",
                        },
                        **pod_placement("recommender pod"),
                    },
                    required=["resources"],
                ),
                "persistence": obj(
                    {
                        "enabled": boolean(
                            "keep the recommender's streaming windows on a PersistentVolumeClaim"
                        ),
                        "size": {"type": "string", "pattern": QUANTITY, "minLength": 1},
                        "storageClass": {
                            "type": "string",
                            "anyOf": [{"maxLength": 0}, {"pattern": DNS_SUBDOMAIN}],
                        },
                        "saveInterval": duration("least time between two saves of a window", K8S_DURATION),
                    },
                    required=["enabled", "size"],
                ),
                "actuator": obj(
                    {
                        "enabled": boolean("deploy the actuator"),
                        "namespaces": namespace_list,
                        "clusterWide": boolean("grant patch rights in every namespace"),
                        "patchHorizontalPodAutoscalers": boolean("allow patching HPAs"),
                        "resizePodsInPlace": boolean(
                            "allow pods/resize (in-place CPU and memory) in its namespaces"
                        ),
                        "serviceAccountName": service_account_name,
                        "workloadKinds": {
                            "type": "array",
                            "items": {"enum": ["Deployment", "StatefulSet", "CronJob", "ReplicaSet"]},
                            "uniqueItems": True,
                            "description": "kinds the actuator may patch: Deployment, StatefulSet, CronJob, ReplicaSet",
                        },
                        "replicas": {"type": "integer", "minimum": 1, "maximum": 5},
                        "leaderElection": obj(
                            {
                                "leaseName": {
                                    "type": "string",
                                    "minLength": 1,
                                    "maxLength": 253,
                                    "pattern": DNS_SUBDOMAIN,
                                },
                                "leaseDurationSeconds": {"type": "integer", "minimum": 5, "maximum": 600},
                            },
                            required=["leaseName", "leaseDurationSeconds"],
                        ),
                        **pod_placement("actuator pod"),
                    },
                    required=["enabled", "namespaces", "clusterWide", "resources"],
                ),
                "agent": obj(
                    {
                        "enabled": boolean("deploy the NVML agent DaemonSet"),
                        "port": pod_ports,
                        "runtimeClassName": {
                            "type": "string",
                            "anyOf": [{"maxLength": 0}, {"pattern": DNS_SUBDOMAIN}],
                        },
                        "namespace": {"type": "string", "anyOf": [{"maxLength": 0}, {"pattern": DNS_LABEL}]},
                        "podResources": obj(
                            {
                                "enabled": boolean(
                                    "map GPUs to pods through the kubelet's pod-resources socket"
                                ),
                                "hostPath": {"type": "string", "pattern": "^/"},
                            },
                            required=["enabled", "hostPath"],
                        ),
                        "hostPID": boolean("share the host PID namespace"),
                        "runAsUser": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 2147483647,
                            "not": {"const": 65532},
                            "description": "the agent's own uid (not root, not the operator's 65532)",
                        },
                        "profilingAsAdmin": boolean("run as root with CAP_SYS_ADMIN"),
                        "serviceAccountName": service_account_name,
                        "podMonitor": obj(
                            {
                                "enabled": boolean("create a PodMonitor"),
                                "interval": duration("scrape interval"),
                                "labels": string_map,
                            },
                            required=["enabled"],
                        ),
                        **pod_placement("agent pods"),
                    },
                    required=["enabled", "port", "resources"],
                ),
                "service": obj(
                    {
                        "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                        "metricsPort": pod_ports,
                        "healthPort": pod_ports,
                    },
                    required=["type", "metricsPort", "healthPort"],
                ),
                "networkPolicy": obj(
                    {
                        "enabled": boolean("create the NetworkPolicy"),
                        "metricsFrom": {"type": "array", "items": {"type": "object"}},
                        "egress": {"type": "array", "items": {"type": "object"}},
                    },
                    required=["enabled"],
                ),
                "serviceMonitor": obj(
                    {
                        "enabled": {
                            "enum": [True, False, "auto"],
                            "description": "true, false, or auto (when the monitoring.coreos.com/v1 API exists)",
                        },
                        "interval": duration("scrape interval"),
                        "scrapeTimeout": duration("scrape timeout"),
                        "release": release_label,
                        "labels": string_map,
                    },
                    required=["enabled"],
                ),
                "prometheusRule": obj(
                    {
                        "enabled": boolean("create a PrometheusRule"),
                        "release": release_label,
                        "labels": string_map,
                        "additionalAlertLabels": string_map,
                        "idleFor": duration("alert delay for idle GPUs"),
                        "wastedGPUHoursPerDayThreshold": {"type": "number", "exclusiveMinimum": 0},
                        "absentFor": duration("alert delay for an absent operator"),
                        "stalledFor": duration("alert delay for a stalled operator"),
                        "operatorSelector": {"type": "string", "maxLength": 500},
                    },
                    required=["enabled"],
                ),
                "recordingRules": obj(
                    {
                        "enabled": boolean("ship the recording rules of the per-pod aggregates"),
                        "prometheusRule": boolean("as a prometheus-operator PrometheusRule"),
                        "configMap": boolean("as a plain Prometheus rules file in a ConfigMap"),
                        "labels": string_map,
                    },
                    required=["enabled"],
                ),
                "pricing": obj(
                    {
                        "gpuHourPrice": {**price, "description": "price of one GPU-hour; 0 means no price"},
                        "gpuModelPrices": {
                            "type": "object",
                            "additionalProperties": price,
                            "propertyNames": {"minLength": 1, "maxLength": 253},
                            "description": "GPU model -> price per GPU-hour",
                        },
                    },
                ),
                "dashboard": obj(
                    {
                        "enabled": boolean("ship the Grafana dashboard"),
                        "labels": string_map,
                        "annotations": string_map,
                    },
                    required=["enabled"],
                ),
                "defaultPolicy": obj(
                    {
                        "enabled": boolean("create the default policy"),
                        "name": {"type": "string", "anyOf": [{"maxLength": 0}, {"pattern": DNS_SUBDOMAIN}]},
                        "mode": {
                            "enum": ["Off", "Recommend"],
                            "description": "Off or Recommend; create your own policy for Apply",
                        },
                        "priority": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": 1000,
                            "description": "0 to 1000, as the GPURightsizingPolicy CRD allows",
                        },
                    },
                    required=["enabled", "mode"],
                ),
                "dcgmExporter": obj(
                    {
                        "counters": obj(
                            {
                                "enabled": boolean("create the counters ConfigMap"),
                                "name": {
                                    "type": "string",
                                    "anyOf": [{"maxLength": 0}, {"pattern": DNS_SUBDOMAIN}],
                                },
                                "namespace": {
                                    "type": "string",
                                    "anyOf": [{"maxLength": 0}, {"pattern": DNS_LABEL}],
                                },
                            },
                            required=["enabled"],
                        )
                    },
                    required=["counters"],
                ),
            },
            required=["image", "prometheus", "watch", "analysis", "actuator", "agent", "service"],
        ),
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if SCHEMA_PATH.read_text() == render() else 1)
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")
