"""Runtime configuration of `gpu-rightsizer run`, from flags with environment fallbacks.

Environment variables (prefix `GPURS_`) exist so the Helm chart can pass settings without
rewriting the command line, and so credentials never appear in `ps` output.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from gpu_rightsizer.logic.waste import GPUPrices, PriceError
from gpu_rightsizer.model.durations import parse_duration as parse_duration_text

Role = Literal["recommender", "actuator", "all"]


class DurationError(argparse.ArgumentTypeError, ValueError):
    """A command-line duration that does not parse (argparse shows its message as is)."""


def parse_duration(text: str) -> float:
    """Seconds in a command-line duration: the one grammar of `model.durations` ('90s', '30m', '1h30m',
    '7d', '1d12h', '500ms'), or bare seconds ('3')."""
    cleaned = text.strip()
    try:
        total = float(cleaned)
    except ValueError:
        try:
            total = parse_duration_text(cleaned)
        except ValueError:
            raise DurationError(f"invalid duration {text!r} (examples: 90s, 30m, 1h30m, 7d, 1d12h)") from None
    if total <= 0:
        raise DurationError(f"duration must be positive: {text!r}")
    return total


class MatcherError(argparse.ArgumentTypeError, ValueError):
    """A label matcher that does not parse."""


_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"\s*$')
_SIMPLE_MATCHER = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)=([^\"{},]*)$")


def parse_matchers(texts: list[str]) -> tuple[str, ...]:
    """PromQL label matchers from `name=value` or `name=~"regex"` texts, normalised to `name="value"`.

    Like krr's `--prometheus-label`: every query then selects one cluster of a multi-cluster store.
    """
    matchers = []
    for text in texts:
        full, simple = _MATCHER.match(text), _SIMPLE_MATCHER.match(text)
        if full:
            matchers.append(f'{full.group(1)}{full.group(2)}"{full.group(3)}"')
        elif simple:
            matchers.append(f'{simple.group(1)}="{simple.group(2)}"')
        else:
            raise MatcherError(f'invalid label matcher {text!r} (examples: cluster=prod, cluster=~"prod-.*")')
    return tuple(matchers)


#: A trusted GPU scrape target: PromQL matchers on the target's own labels (`adapters.gpu_targets`).
TrustedTarget = tuple[str, ...]
#: The GPU Operator's dcgm-exporter as kube-prometheus-stack scrapes it through the GPU Operator's
#: ServiceMonitor: Service `nvidia-dcgm-exporter` in namespace `gpu-operator` (docs/clusters.md).
DEFAULT_TRUSTED_GPU_TARGETS: tuple[TrustedTarget, ...] = (
    ('namespace="gpu-operator"', 'service="nvidia-dcgm-exporter"'),
)
#: The `--trusted-gpu-target` value that reads every target's GPU series (with a warning).
ANY_TARGET = "any"
_TARGET_MATCHER = re.compile(r'\s*([a-zA-Z_]\w*\s*(?:=~|!=|!~|=)\s*(?:"(?:[^"\\]|\\.)*"|[^",]*))\s*(,|$)')


def parse_trusted_targets(texts: list[str]) -> tuple[TrustedTarget, ...]:
    """Trusted targets from `namespace=gpu-operator,service=nvidia-dcgm-exporter` texts, one per
    target (quote a regex: `pod=~"agent-.*"`); `any` alone means every target (an empty tuple)."""
    if [text.strip() for text in texts] == [ANY_TARGET]:
        return ()
    targets = []
    for text in texts:
        parts, position = [], 0
        for match in _TARGET_MATCHER.finditer(text):
            if match.start() != position:
                break
            parts.append(match.group(1).strip())
            position = match.end()
        if not parts or position != len(text):
            raise MatcherError(
                f"invalid trusted target {text!r} (example: namespace=gpu-operator,service=nvidia-dcgm-exporter)"
            )
        targets.append(parse_matchers(parts))
    return tuple(targets)


def _trusted_targets(texts: list[str]) -> tuple[TrustedTarget, ...]:
    return parse_trusted_targets(texts) if texts else DEFAULT_TRUSTED_GPU_TARGETS


class ShardError(ValueError):
    """A shard setting that cannot be used."""


#: A StatefulSet pod's name ends with its ordinal ("gpu-rightsizer-recommender-2").
_ORDINAL = re.compile(r"-(\d+)$")


def shard_of(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[int, int]:
    """(shard, total shards) from `--shard`/`--total-shards`, else GPURS_SHARD/GPURS_TOTAL_SHARDS, else
    (sharded, no shard given) the ordinal at the end of POD_NAME, as a StatefulSet names its pods."""
    total_text = getattr(args, "total_shards", None) or env.get("GPURS_TOTAL_SHARDS") or "1"
    shard_text = getattr(args, "shard", None)
    if shard_text is None:
        shard_text = env.get("GPURS_SHARD") or None
    try:
        total = int(total_text)
        if shard_text is None and total > 1:
            pod = env.get("POD_NAME", "")
            ordinal = _ORDINAL.search(pod)
            if ordinal is None:
                raise ShardError(
                    f"--total-shards {total} needs --shard (or GPURS_SHARD, or POD_NAME ending in the "
                    f"StatefulSet ordinal; POD_NAME is {pod!r})"
                )
            shard_text = ordinal.group(1)
        shard = int(shard_text or 0)
    except ValueError as error:
        if isinstance(error, ShardError):
            raise
        raise ShardError(f"--shard and --total-shards take whole numbers: {error}") from None
    if total < 1 or not 0 <= shard < total:
        raise ShardError(f"--shard must be in 0..{total - 1} for --total-shards {total}, not {shard}")
    return shard, total


def _optional_count(text: str | None) -> int | None:
    """A positive whole number from a flag or variable; None when not given."""
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"a whole number is needed, not {text!r}") from None
    if value < 1:
        raise ValueError(f"a positive number is needed, not {value}")
    return value


def load_gpu_prices(price: str | None, price_file: str | None) -> GPUPrices:
    """Prices per GPU-hour from `--gpu-hour-price` and a `--gpu-prices` YAML/JSON file (model → price).

    Raises ValueError naming the file and the entry at fault; no price at all is no money, not an error.
    """
    import yaml

    content: object | None = None
    if price_file:
        try:
            with open(price_file, encoding="utf-8") as handle:
                content = yaml.safe_load(handle)
        except (OSError, yaml.YAMLError) as error:
            raise PriceError(f"cannot read the GPU price map {price_file}: {error}") from None
        if content is None:  # an empty file (the chart's default ConfigMap): no per-model price
            content = {}
    try:
        return GPUPrices.parse(price, content)
    except PriceError as error:
        raise PriceError(f"{price_file}: {error}" if price_file else str(error)) from None


def _optional_duration(text: str | None) -> float | None:
    return parse_duration(text) if text else None


#: The answer encodings `--prometheus-compression` takes.
PROMETHEUS_COMPRESSIONS = ("none", "gzip")


class CompressionError(argparse.ArgumentTypeError, ValueError):
    """`--prometheus-compression` / GPURS_PROMETHEUS_COMPRESSION names no known encoding."""


def _compression(text: str) -> str:
    name = text.strip().lower()
    if name not in PROMETHEUS_COMPRESSIONS:
        raise CompressionError(
            f"--prometheus-compression must be one of {', '.join(PROMETHEUS_COMPRESSIONS)}, not {text!r}"
        )
    return name


@dataclass(frozen=True)
class OperatorConfig:
    """Everything `run` needs; immutable once parsed."""

    prometheus_url: str | None = None
    prometheus_token_file: str | None = None
    prometheus_ca_file: str | None = None
    prometheus_insecure: bool = False
    prometheus_timeout_seconds: float = 30.0
    #: How Prometheus' answers travel: "none" (plain, the default) or "gzip" (`PROMETHEUS_COMPRESSIONS`).
    prometheus_compression: str = "none"
    #: Query step; None follows the window (about 60 points, 1-60 s).
    prometheus_step_seconds: float | None = None
    #: Extra label matchers for every query (`cluster="prod"`), for multi-cluster stores.
    prometheus_matchers: tuple[str, ...] = ()
    #: Scrape targets whose GPU series are believed; empty means every target's (with a warning).
    trusted_gpu_targets: tuple[TrustedTarget, ...] = DEFAULT_TRUSTED_GPU_TARGETS
    #: The user declares that GPU exporters are scraped with honorLabels: true.
    gpu_honor_labels: bool = False
    interval_seconds: float = 300.0
    #: The actuator loop's own interval (env GPURS_ACTUATOR_INTERVAL); None: `interval_seconds`.
    actuator_interval_seconds: float | None = None
    window_seconds: float = 3600.0
    #: Re-read every window whole each cycle instead of incrementally (for comparison and debugging).
    full_window_reads: bool = False
    #: Directory where the streaming windows are saved and loaded at start (None: not saved).
    state_dir: str | None = None
    #: Least time between two saves of a window's state (it is also saved on shutdown).
    state_save_interval_seconds: float = 300.0
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = True
    role: Role = "recommender"
    metrics_port: int = 9090
    metrics_address: str = "0.0.0.0"
    liveness_endpoint: str | None = "http://0.0.0.0:8080/healthz"
    standalone: bool = True
    peering_name: str = "gpu-rightsizer"
    lease_name: str = "gpu-rightsizer-actuator"
    lease_namespace: str = "default"
    lease_seconds: int = 15
    #: This recommender's shard and how many there are (kube-state-metrics' `--shard`/`--total-shards`):
    #: it analyses and writes only the workloads of the namespaces that hash to `shard`.
    shard: int = 0
    total_shards: int = 1
    #: About how many pods' windows a cycle assembles, analyses and writes at a time (whole
    #: namespaces); None: the source's default.
    chunk_pods: int | None = None
    #: Prices per GPU-hour that turn waste and savings into money (no price: no money).
    gpu_prices: GPUPrices = field(default_factory=GPUPrices)
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.total_shards < 1 or not 0 <= self.shard < self.total_shards:
            raise ValueError(
                f"--shard must be in 0..{self.total_shards - 1} for --total-shards {self.total_shards}, "
                f"not {self.shard}"
            )

    @property
    def sharded(self) -> bool:
        """Whether several recommenders share the workloads (each writes only its own shard's)."""
        return self.total_shards > 1

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OperatorConfig:
        """Flags first, then GPURS_* environment variables, then defaults."""
        env = os.environ
        namespaces = tuple(args.namespace or [n for n in env.get("GPURS_NAMESPACES", "").split(",") if n])
        role = args.role or env.get("GPURS_ROLE", "recommender")
        if role not in ("recommender", "actuator", "all"):
            raise ValueError(f"--role must be recommender, actuator or all, not {role!r}")
        liveness = args.liveness or env.get("GPURS_LIVENESS") or "http://0.0.0.0:8080/healthz"
        metrics_port = (
            args.metrics_port if args.metrics_port is not None else env.get("GPURS_METRICS_PORT", "9090")
        )
        shard, total_shards = shard_of(args, env)
        return cls(
            shard=shard,
            total_shards=total_shards,
            chunk_pods=_optional_count(getattr(args, "chunk_pods", None) or env.get("GPURS_CHUNK_PODS")),
            prometheus_url=args.prometheus_url or env.get("GPURS_PROMETHEUS_URL") or None,
            prometheus_token_file=args.prometheus_token_file
            or env.get("GPURS_PROMETHEUS_TOKEN_FILE")
            or None,
            prometheus_ca_file=args.prometheus_ca_file or env.get("GPURS_PROMETHEUS_CA_FILE") or None,
            prometheus_insecure=bool(
                args.prometheus_insecure or env.get("GPURS_PROMETHEUS_INSECURE") == "true"
            ),
            prometheus_timeout_seconds=parse_duration(
                getattr(args, "prometheus_timeout", None) or env.get("GPURS_PROMETHEUS_TIMEOUT", "30s")
            ),
            prometheus_compression=_compression(
                getattr(args, "prometheus_compression", None)
                or env.get("GPURS_PROMETHEUS_COMPRESSION")
                or "none"
            ),
            prometheus_step_seconds=_optional_duration(
                getattr(args, "prometheus_step", None) or env.get("GPURS_PROMETHEUS_STEP")
            ),
            prometheus_matchers=parse_matchers(
                list(getattr(args, "prometheus_label", None) or [])
                or [m for m in env.get("GPURS_PROMETHEUS_LABELS", "").split(";") if m.strip()]
            ),
            trusted_gpu_targets=_trusted_targets(
                list(getattr(args, "trusted_gpu_target", None) or [])
                or [t for t in env.get("GPURS_TRUSTED_GPU_TARGETS", "").split(";") if t.strip()]
            ),
            gpu_honor_labels=bool(
                getattr(args, "gpu_honor_labels", False) or env.get("GPURS_GPU_HONOR_LABELS") == "true"
            ),
            interval_seconds=parse_duration(args.interval or env.get("GPURS_INTERVAL", "5m")),
            actuator_interval_seconds=(
                parse_duration(env["GPURS_ACTUATOR_INTERVAL"]) if env.get("GPURS_ACTUATOR_INTERVAL") else None
            ),
            window_seconds=parse_duration(args.window or env.get("GPURS_WINDOW", "1h")),
            full_window_reads=bool(
                getattr(args, "full_window_reads", False) or env.get("GPURS_FULL_WINDOW_READS") == "true"
            ),
            state_dir=getattr(args, "state_dir", None) or env.get("GPURS_STATE_DIR") or None,
            state_save_interval_seconds=parse_duration(
                getattr(args, "state_save_interval", None) or env.get("GPURS_STATE_SAVE_INTERVAL", "5m")
            ),
            namespaces=namespaces,
            all_namespaces=not namespaces,
            role=role,  # type: ignore[arg-type]
            metrics_port=int(metrics_port),
            metrics_address=args.metrics_address or env.get("GPURS_METRICS_ADDRESS", "0.0.0.0"),
            liveness_endpoint=None if liveness == "off" else liveness,
            standalone=True,  # exactly-one-actuator comes from our own Lease, not kopf peering
            lease_name=getattr(args, "lease_name", None)
            or env.get("GPURS_LEASE_NAME", "gpu-rightsizer-actuator"),
            lease_namespace=getattr(args, "lease_namespace", None)
            or env.get("GPURS_LEASE_NAMESPACE")
            or env.get("POD_NAMESPACE")
            or "default",
            lease_seconds=int(getattr(args, "lease_seconds", None) or env.get("GPURS_LEASE_SECONDS", "15")),
            gpu_prices=load_gpu_prices(
                getattr(args, "gpu_hour_price", None) or env.get("GPURS_GPU_HOUR_PRICE") or None,
                getattr(args, "gpu_prices", None) or env.get("GPURS_GPU_PRICES_FILE") or None,
            ),
        )
