"""Run the operator: watch GPU pods, keep one GPURecommendation per workload current.

`--role recommender` (default) only reads workloads and writes GPURecommendations and Events;
`--role actuator` also patches workloads under `Apply` policies, with leader election on a
coordination.k8s.io Lease so that exactly one actuator acts at a time (any number may run).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_rightsizer.config import OperatorConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `gpu-rightsizer run` (each also readable from a GPURS_* environment variable)."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", help="watch only this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch all namespaces (default)")
    parser.add_argument("--prometheus-url", help="Prometheus base URL (env GPURS_PROMETHEUS_URL)")
    parser.add_argument(
        "--prometheus-token-file", help="file holding a bearer token (env GPURS_PROMETHEUS_TOKEN_FILE)"
    )
    parser.add_argument(
        "--prometheus-ca-file", help="CA bundle for Prometheus TLS (env GPURS_PROMETHEUS_CA_FILE)"
    )
    parser.add_argument(
        "--prometheus-insecure", action="store_true", help="skip TLS verification (testing only)"
    )
    parser.add_argument(
        "--prometheus-timeout", help="seconds per query, e.g. 60s (env GPURS_PROMETHEUS_TIMEOUT; default 30s)"
    )
    parser.add_argument(
        "--prometheus-compression",
        help="none or gzip: how Prometheus' answers travel (env GPURS_PROMETHEUS_COMPRESSION; default none, "
        "which spares Prometheus the compressing; gzip for a store across a metered link)",
    )
    parser.add_argument(
        "--prometheus-step",
        help="query step, e.g. 30s (env GPURS_PROMETHEUS_STEP; default: the window / 60, 1-60 s)",
    )
    parser.add_argument(
        "--prometheus-label",
        action="append",
        metavar="MATCHER",
        help="extra label matcher for every query, e.g. cluster=prod (repeatable; env GPURS_PROMETHEUS_LABELS, "
        "separated by ';')",
    )
    parser.add_argument(
        "--trusted-gpu-target",
        action="append",
        metavar="MATCHERS",
        help="scrape target whose GPU series are believed, as matchers on its target labels, e.g. "
        "namespace=gpu-operator,service=nvidia-dcgm-exporter (repeatable; 'any' for every target, which "
        "blocks automatic actions; env GPURS_TRUSTED_GPU_TARGETS, separated by ';'; default: the GPU "
        "Operator's dcgm-exporter; docs/clusters.md)",
    )
    parser.add_argument(
        "--gpu-honor-labels",
        action="store_true",
        help="GPU exporters are scraped with honorLabels: true: no GPU series' identity is proof, so no "
        "automatic action (env GPURS_GPU_HONOR_LABELS=true)",
    )
    parser.add_argument("--interval", help="analysis interval, e.g. 5m (env GPURS_INTERVAL; default 5m)")
    parser.add_argument("--window", help="observation window, e.g. 1h (env GPURS_WINDOW; default 1h)")
    parser.add_argument(
        "--full-window-reads",
        action="store_true",
        help="query each whole window every cycle instead of only the new interval "
        "(env GPURS_FULL_WINDOW_READS=true; for comparison and debugging)",
    )
    parser.add_argument(
        "--state-dir",
        help="directory where the streaming windows are saved, so a restart reads only the time since "
        "instead of the whole window (env GPURS_STATE_DIR; default: not saved)",
    )
    parser.add_argument(
        "--state-save-interval",
        help="least time between two saves of a window's state, e.g. 5m; also saved on shutdown "
        "(env GPURS_STATE_SAVE_INTERVAL; default 5m)",
    )
    parser.add_argument("--role", choices=["recommender", "actuator", "all"], help="what this process does")
    parser.add_argument(
        "--metrics-port", type=int, help="port of the operator's own /metrics (default 9090; 0 = off)"
    )
    parser.add_argument("--metrics-address", help="address of the operator's own /metrics (default 0.0.0.0)")
    parser.add_argument(
        "--liveness", help="kopf liveness endpoint URL (default http://0.0.0.0:8080/healthz; 'off' disables)"
    )
    parser.add_argument(
        "--lease-name", help="Lease the actuators elect a leader on (default gpu-rightsizer-actuator)"
    )
    parser.add_argument(
        "--lease-namespace",
        help="namespace of that Lease (env GPURS_LEASE_NAMESPACE or POD_NAMESPACE; default default)",
    )
    parser.add_argument(
        "--lease-seconds", type=int, help="lease duration: a dead leader is replaced after it (default 15)"
    )
    parser.add_argument(
        "--chunk-pods",
        help="about how many pods' windows a cycle assembles, analyses and writes at a time, whole "
        "namespaces (env GPURS_CHUNK_PODS; default 250): fewer hold less memory",
    )
    parser.add_argument(
        "--total-shards",
        help="recommenders sharing the workloads by namespace hash (env GPURS_TOTAL_SHARDS; default 1)",
    )
    parser.add_argument(
        "--shard",
        help="this recommender's shard, 0..total-1 (env GPURS_SHARD; default: the ordinal ending POD_NAME "
        "when sharded, as a StatefulSet names its pods)",
    )
    parser.add_argument(
        "--gpu-hour-price",
        metavar="PRICE",
        help="price of one GPU for one hour, for GPU models the price map does not name; turns waste and "
        "savings into money in status.cost and the metrics (env GPURS_GPU_HOUR_PRICE; default: no money)",
    )
    parser.add_argument(
        "--gpu-prices",
        metavar="FILE",
        help="YAML or JSON map of GPU model to price per GPU-hour, e.g. 'NVIDIA-H100-80GB-HBM3: 2.5' "
        "(env GPURS_GPU_PRICES_FILE)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")


#: Loggers that speak per request or per handled event (urllib3's retries, kopf's "Handler ...
#: succeeded"); at INFO they bury the operator's own lines. Their errors and warnings still show.
QUIET_LOGGERS = {"urllib3": logging.ERROR, "kopf.objects": logging.WARNING}


def quiet_libraries(*, verbose: bool = False) -> None:
    """Raise the chatty libraries' log levels (kopf's per-event lines stay with --verbose)."""
    for name, level in QUIET_LOGGERS.items():
        if not (verbose and name.startswith("kopf")):
            logging.getLogger(name).setLevel(level)


def run(args: argparse.Namespace) -> int:
    """Start kopf with the handlers of the chosen role; returns when the operator stops."""
    import kopf
    from prometheus_client import start_http_server

    from gpu_rightsizer.config import OperatorConfig

    try:
        config = OperatorConfig.from_args(args)
    except ValueError as error:
        print(f"gpu-rightsizer run: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    quiet_libraries(verbose=args.verbose)
    import_wings(config)
    if config.metrics_port:
        start_http_server(config.metrics_port, addr=config.metrics_address)
    kopf.run(
        standalone=config.standalone,
        peering_name=None if config.standalone else config.peering_name,
        clusterwide=config.all_namespaces,
        namespaces=config.namespaces,
        liveness_endpoint=config.liveness_endpoint,
    )
    return 0


def import_wings(config: OperatorConfig) -> None:
    """Register the kopf handlers of the wings this process runs, after the shared startup's: each
    wing's handlers register when its module is imported, so an actuator imports no recommender
    watch (and a recommender no lease)."""
    from gpu_rightsizer.runtime import startup

    startup.CONFIG = config
    if startup.runs(config, "recommender"):
        from gpu_rightsizer.recommender import wiring as recommender  # noqa: F401
    if startup.runs(config, "actuator"):
        from gpu_rightsizer.actuator import wiring as actuator  # noqa: F401
