"""Find Prometheus in a cluster by the labels its usual installations put on their Service.

A kube-prometheus-stack or prometheus-operator user should not need a port-forward: the CLI reads
the kubeconfig (`--kubeconfig`, `--context`), lists Services by the label selectors below in order,
and reaches the first match through the API server's service proxy
(`/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy`, authenticated as the kubeconfig's user),
through the cluster DNS name when running inside the cluster, or at an address of its
EndpointSlice when the machine can route to pod addresses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

#: (label selector, installation it marks), tried in this order; the first with a Service wins.
#: prometheus-operator's `prometheus-operated` is the governing Service of every `Prometheus`
#: object, so it also finds an operator install whose chart-made Service is missing.
SELECTORS: tuple[tuple[str, str], ...] = (
    ("app=kube-prometheus-stack-prometheus", "kube-prometheus-stack"),
    ("operated-prometheus=true", "prometheus-operator (prometheus-operated)"),
    ("app.kubernetes.io/name=prometheus,app.kubernetes.io/component=server", "prometheus chart"),
    ("app=prometheus,component=server", "prometheus chart (labels before v15)"),
    ("app=prometheus-server", "prometheus-server"),
    ("app=rancher-monitoring-prometheus", "Rancher monitoring"),
    ("app.kubernetes.io/name=prometheus", "Prometheus"),
)

#: How to reach the Service: through the API server, by its cluster DNS name, or at an endpoint.
ACCESS_MODES = ("proxy", "service", "endpoint")
#: Port names Prometheus Services give their HTTP API, most likely first.
_WEB_PORT_NAMES = ("web", "http-web", "http", "http-prometheus", "prometheus")
_PROMETHEUS_PORT = 9090


class PrometheusNotFoundError(RuntimeError):
    """No Service matched, or the one found cannot be reached the way asked."""


@dataclass(frozen=True)
class DiscoveredService:
    """A Prometheus Service: where it is, which port serves the API, which selector found it."""

    namespace: str
    name: str
    port: int
    port_name: str
    scheme: str
    selector: str
    installation: str
    #: `spec.externalName` of an ExternalName Service (a Prometheus outside the cluster, named in
    #: it by DNS), else empty: such a Service has no endpoints, and its name resolves to this host.
    external_name: str = ""

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}:{self.port} ({self.installation}, {self.selector})"

    def proxy_url(self, api_server: str) -> str:
        """The API server's service-proxy base URL for this Service."""
        return (
            f"{api_server.rstrip('/')}/api/v1/namespaces/{self.namespace}/services/"
            f"{self.scheme}:{self.name}:{self.port}/proxy"
        )

    def service_url(self) -> str:
        """The cluster DNS URL (works from a pod in the cluster); an ExternalName Service's own host."""
        if self.external_name:
            return self.external_url()
        return f"{self.scheme}://{self.name}.{self.namespace}.svc:{self.port}"

    def external_url(self) -> str:
        """The host an ExternalName Service names, at the Service's port."""
        host = f"[{self.external_name}]" if ":" in self.external_name else self.external_name
        return f"{self.scheme}://{host}:{self.port}"


@dataclass(frozen=True)
class KubeConnection:
    """What the kubeconfig says about reaching the API server, for a `requests` session."""

    host: str
    ca_file: str | None
    client_cert: tuple[str, str] | None
    bearer_token: str | None
    verify: bool


def kube_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """An API client for `context` of `kubeconfig` (default: KUBECONFIG, ~/.kube/config); in-cluster
    credentials when neither is given and no kubeconfig exists."""
    if kubeconfig is None and context is None:
        try:
            return config.new_client_from_config()  # type: ignore[no-untyped-call,no-any-return]
        except config.ConfigException:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException as error:
                raise PrometheusNotFoundError(
                    "no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a cluster: pass --prometheus "
                    f"URL or --kubeconfig FILE ({error})"
                ) from error
            return client.ApiClient()
    try:
        return config.new_client_from_config(  # type: ignore[no-untyped-call,no-any-return]
            config_file=kubeconfig, context=context
        )
    except (config.ConfigException, OSError) as error:
        where = kubeconfig or "the default kubeconfig"
        raise PrometheusNotFoundError(
            f"cannot use context {context or '(current)'} of {where}: {error}"
        ) from error


def kube_connection(api: client.ApiClient) -> KubeConnection:
    """The API server address and the kubeconfig user's credentials, as the proxy path needs them."""
    settings = api.configuration
    token: str | None = None
    authorization = (settings.api_key or {}).get("authorization") or (settings.api_key or {}).get(
        "BearerToken"
    )
    if authorization:
        token = str(authorization).removeprefix("Bearer ").strip() or None
    cert = (settings.cert_file, settings.key_file) if settings.cert_file and settings.key_file else None
    return KubeConnection(
        host=str(settings.host),
        ca_file=settings.ssl_ca_cert or None,
        client_cert=cert,
        bearer_token=token,
        verify=bool(settings.verify_ssl),
    )


def _web_port(ports: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The port serving the HTTP API: by name, else 9090, else the first TCP port."""
    tcp = [p for p in ports if (p.get("protocol") or "TCP") == "TCP" and p.get("port")]
    for name in _WEB_PORT_NAMES:
        for port in tcp:
            if port.get("name") == name:
                return port
    for port in tcp:
        if port.get("port") == _PROMETHEUS_PORT or port.get("targetPort") == _PROMETHEUS_PORT:
            return port
    return tcp[0] if tcp else None


def pick_service(
    services_by_selector: Sequence[tuple[str, str, Sequence[Mapping[str, Any]]]],
) -> DiscoveredService | None:
    """The first selector's first Service (by namespace and name) with a TCP port, or None.

    Takes (selector, installation, Services as API dicts) in selector order: pure, so the choice is
    tested on recorded lists."""
    for selector, installation, services in services_by_selector:
        ordered = sorted(
            services,
            key=lambda s: (
                (s.get("metadata") or {}).get("namespace", ""),
                (s.get("metadata") or {}).get("name", ""),
            ),
        )
        for service in ordered:
            metadata = service.get("metadata") or {}
            spec = service.get("spec") or {}
            port = _web_port(spec.get("ports") or [])
            if port is None:
                continue
            name = str(port.get("name") or "")
            scheme = "https" if name.startswith("https") or port.get("appProtocol") == "https" else "http"
            return DiscoveredService(
                namespace=str(metadata.get("namespace", "")),
                name=str(metadata.get("name", "")),
                port=int(port["port"]),
                port_name=name,
                scheme=scheme,
                selector=selector,
                installation=installation,
                external_name=str(spec.get("externalName") or "")
                if spec.get("type") == "ExternalName"
                else "",
            )
    return None


def _not_found(namespace: str | None, api: client.ApiClient) -> str:
    where = f"namespace {namespace}" if namespace else "all namespaces"
    tried = "; ".join(selector for selector, _ in SELECTORS)
    return (
        f"found no Prometheus Service in {where} of {api.configuration.host} (label selectors tried: "
        f"{tried}); pass --prometheus URL, or --prometheus-namespace if it lives elsewhere"
    )


def _plain_items(api: client.ApiClient, listed: Any) -> list[dict[str, Any]]:
    """A typed list answer's items as API dicts (camelCase keys), as the pure pickers take them."""
    return [api.sanitize_for_serialization(item) for item in listed.items]  # type: ignore[no-untyped-call]


def find_prometheus(api: client.ApiClient, namespace: str | None = None) -> DiscoveredService:
    """List Services by each selector in `SELECTORS` order and pick the first match."""
    core = client.CoreV1Api(api)
    for selector, installation in SELECTORS:
        try:
            if namespace:
                answer = core.list_namespaced_service(namespace, label_selector=selector)
            else:
                answer = core.list_service_for_all_namespaces(label_selector=selector)
        except ApiException as error:
            raise PrometheusNotFoundError(
                f"cannot list Services at {api.configuration.host} to find Prometheus: HTTP {error.status} "
                f"{error.reason} (the kubeconfig user needs list on services"
                f"{' in ' + namespace if namespace else ' cluster-wide'})"
            ) from error
        except (HTTPError, OSError) as error:
            raise PrometheusNotFoundError(
                f"cannot reach the API server at {api.configuration.host}: {error}"
            ) from error
        found = pick_service([(selector, installation, _plain_items(api, answer))])
        if found is not None:
            return found
    raise PrometheusNotFoundError(_not_found(namespace, api))


def endpoint_url(api: client.ApiClient, service: DiscoveredService) -> str:
    """`scheme://address:port` of the Service's first ready endpoint (its EndpointSlices)."""
    discovery = client.DiscoveryV1Api(api)
    try:
        slices = discovery.list_namespaced_endpoint_slice(
            service.namespace, label_selector=f"kubernetes.io/service-name={service.name}"
        )
    except ApiException as error:
        raise PrometheusNotFoundError(
            f"cannot list the EndpointSlices of {service.describe()}: HTTP {error.status} {error.reason}"
        ) from error
    except (HTTPError, OSError) as error:
        raise PrometheusNotFoundError(
            f"cannot reach the API server at {api.configuration.host}: {error}"
        ) from error
    url = pick_endpoint(_plain_items(api, slices), service)
    if url is None:
        raise PrometheusNotFoundError(
            f"{service.describe()} has no ready endpoint for port {service.port_name or service.port}"
        )
    return url


def pick_endpoint(slices: Sequence[Mapping[str, Any]], service: DiscoveredService) -> str | None:
    """The first ready address of the EndpointSlices, on the port named like the Service's."""
    for endpoint_slice in sorted(slices, key=lambda s: (s.get("metadata") or {}).get("name", "")):
        ports = endpoint_slice.get("ports") or []
        number = next(
            (int(p["port"]) for p in ports if p.get("port") and (p.get("name") or "") == service.port_name),
            None,
        )
        if number is None:
            continue
        for endpoint in endpoint_slice.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or []:
                host = f"[{address}]" if ":" in address else address
                return f"{service.scheme}://{host}:{number}"
    return None


@dataclass(frozen=True)
class Reached:
    """Where to send PromQL, and with what credentials, for a discovered Service."""

    url: str
    service: DiscoveredService
    #: Credentials of the API server (proxy access) rather than of Prometheus.
    kube: KubeConnection | None


def reach(api: client.ApiClient, service: DiscoveredService, access: str) -> Reached:
    """The URL for `access` (one of ACCESS_MODES)."""
    if access == "proxy":
        connection = kube_connection(api)
        return Reached(url=service.proxy_url(connection.host), service=service, kube=connection)
    if access == "service":
        return Reached(url=service.service_url(), service=service, kube=None)
    if access == "endpoint":
        url = service.external_url() if service.external_name else endpoint_url(api, service)
        return Reached(url=url, service=service, kube=None)
    raise ValueError(f"unknown access {access!r}; one of {', '.join(ACCESS_MODES)}")
