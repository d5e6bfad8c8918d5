"""How `analyze` and `explain` reach Prometheus: a URL, or discovery through the kubeconfig.

`--prometheus URL` (or PROMETHEUS_URL) wins. Without it the kubeconfig's cluster (`--kubeconfig`,
`--context`) is searched for a Prometheus Service by the usual labels
(`adapters.prometheus_discovery.SELECTORS`), reached through the API server's service proxy by
default (`--prometheus-access`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_rightsizer.adapters.prometheus import PrometheusConfig


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The Prometheus connection and discovery options (the URL itself is the caller's)."""
    from gpu_rightsizer.adapters.prometheus_discovery import ACCESS_MODES

    auth = parser.add_argument_group("Prometheus connection")
    auth.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig to find Prometheus with when no URL is given (default: KUBECONFIG, ~/.kube/config)",
    )
    auth.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    auth.add_argument(
        "--prometheus-namespace",
        default=None,
        help="look for the Prometheus Service only in this namespace (default: every namespace)",
    )
    auth.add_argument(
        "--prometheus-access",
        choices=ACCESS_MODES,
        default="proxy",
        help="how to reach a discovered Prometheus: proxy (default) through the API server's service "
        "proxy as the kubeconfig user; service: its cluster DNS name (from a pod); endpoint: the "
        "first ready address of its EndpointSlice (when this machine routes to pod addresses)",
    )
    auth.add_argument("--bearer-token", default=None, help="bearer token (env PROMETHEUS_BEARER_TOKEN)")
    auth.add_argument("--bearer-token-file", default=None, help="file holding the bearer token")
    auth.add_argument("--username", default=None, help="basic-auth user (env PROMETHEUS_USERNAME)")
    auth.add_argument("--password", default=None, help="basic-auth password (env PROMETHEUS_PASSWORD)")
    auth.add_argument("--ca-file", default=None, help="CA bundle to verify the server's TLS certificate")
    auth.add_argument(
        "--insecure-skip-tls-verify", action="store_true", help="do not verify TLS certificates"
    )
    auth.add_argument("--timeout", type=float, default=30.0, help="seconds per query (default 30)")
    auth.add_argument(
        "--prometheus-label",
        dest="prometheus_labels",
        metavar="MATCHER",
        action="append",
        default=[],
        help='extra label matcher for every query, e.g. cluster=prod or cluster=~"prod-.*" (multi-cluster '
        "stores: Thanos, Mimir, VictoriaMetrics); repeatable",
    )
    auth.add_argument("--max-concurrency", type=int, default=4, help="queries in flight at once (default 4)")


def prometheus_config(args: argparse.Namespace, progress: Callable[[str], None]) -> PrometheusConfig:
    """The connection `args` ask for: the URL when given, else the discovered Service.

    Raises `PrometheusNotFoundError` (discovery), `MatcherError` (labels), OSError (token file)."""
    from gpu_rightsizer.adapters.prometheus import PrometheusConfig
    from gpu_rightsizer.config import parse_matchers, parse_trusted_targets

    token = args.bearer_token or os.environ.get("PROMETHEUS_BEARER_TOKEN")
    if args.bearer_token_file:
        with open(args.bearer_token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
    url = args.prometheus or os.environ.get("PROMETHEUS_URL")
    ca_file = args.ca_file
    client_cert: tuple[str, str] | None = None
    insecure = args.insecure_skip_tls_verify
    if not url:
        from gpu_rightsizer.adapters.prometheus_discovery import find_prometheus, kube_client, reach

        api = kube_client(args.kubeconfig, args.context)
        service = find_prometheus(api, args.prometheus_namespace)
        reached = reach(api, service, args.prometheus_access)
        progress(f"found Prometheus {service.describe()}; reaching it at {reached.url}")
        url = reached.url
        if reached.kube is not None:  # the API server authenticates the request, not Prometheus
            token = token or reached.kube.bearer_token
            ca_file = ca_file or reached.kube.ca_file
            client_cert = reached.kube.client_cert
            insecure = insecure or not reached.kube.verify
    texts = list(getattr(args, "trusted_gpu_targets", []) or [])
    return PrometheusConfig(
        url=url,
        bearer_token=token,
        username=args.username or os.environ.get("PROMETHEUS_USERNAME"),
        password=args.password or os.environ.get("PROMETHEUS_PASSWORD"),
        ca_file=ca_file,
        client_cert=client_cert,
        insecure=insecure,
        timeout_seconds=args.timeout,
        max_concurrency=max(1, args.max_concurrency),
        extra_matchers=parse_matchers(list(getattr(args, "prometheus_labels", []) or [])),
        trusted_gpu_targets=parse_trusted_targets(texts) if texts else None,
    )
