"""A real Prometheus (Debian package) on 127.0.0.1: backfilled history and/or live scrape targets.

History is written with `promtool tsdb create-blocks-from openmetrics` *before* the server starts
(blocks added to a running server are only seen after compaction or restart); live data comes from
scrape targets such as the workload-metrics simulator.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpu_rightsizer.testcluster.processes import free_port, log_tail, stop_process

__all__ = ["PrometheusError", "PrometheusServer", "create_blocks", "free_port"]


class PrometheusError(RuntimeError):
    """Prometheus could not be prepared or started."""


def create_blocks(source: Path, data_dir: Path, promtool: Path = Path("/usr/bin/promtool")) -> float:
    """Write TSDB blocks of one OpenMetrics file into `data_dir` with promtool; returns its seconds.

    Several files may go into one directory: their blocks overlap in time, which Prometheus 2.39 and
    newer always accepts (it merges them at query time and compacts them vertically).
    """
    started = time.monotonic()
    result = subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if result.returncode != 0:
        raise PrometheusError(f"promtool backfill of {source} failed: {result.stderr.strip()[-2000:]}")
    return time.monotonic() - started


#: The job and target labels the GPU Operator's ServiceMonitor gives dcgm-exporter's targets under
#: kube-prometheus-stack (the operator's default trusted GPU target matches them).
GPU_OPERATOR_JOB = "nvidia-dcgm-exporter"


def gpu_operator_target_labels(index: int) -> dict[str, str]:
    """Target labels of the `index`-th dcgm-exporter pod, as service discovery sets them."""
    return {
        "namespace": "gpu-operator",
        "service": GPU_OPERATOR_JOB,
        "pod": f"nvidia-dcgm-exporter-{index}",
        "container": "nvidia-dcgm-exporter",
        "endpoint": "gpu-metrics",
    }


@dataclass
class PrometheusServer:
    """One Prometheus process with its own data directory; `start()` then `stop()` (or a `with`)."""

    workdir: Path
    prometheus: Path = Path("/usr/bin/prometheus")
    promtool: Path = Path("/usr/bin/promtool")
    backfill: Sequence[Path] = ()
    scrape_targets: Sequence[str] = ()
    scrape_interval: str = "5s"
    #: More scrape jobs, as Prometheus configuration mappings (e.g. a tenant's own target).
    extra_scrape_configs: Sequence[Mapping[str, object]] = ()
    #: Rules files the server evaluates live (`rule_files`).
    rule_files: Sequence[Path] = ()
    port: int = field(default_factory=free_port)
    #: Start on the TSDB already in `data_dir` (a cached backfill) instead of an empty one.
    keep_data: bool = False
    #: More command-line flags, e.g. `--query.timeout=30s`.
    extra_args: Sequence[str] = ()
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL of the HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        """TSDB directory."""
        return self.workdir / "data"

    def _write_config(self) -> Path:
        scrape_configs: list[Mapping[str, object]] = []
        if self.scrape_targets:
            dcgm = {"source_labels": ["__name__"], "regex": "DCGM_.*"}
            scrape_configs.append(
                {  # kube-state-metrics, cAdvisor and serving series, scraped as kube-prometheus-stack
                    # scrapes kube-state-metrics (honorLabels: true)
                    "job_name": "gpu-workloads",
                    "scrape_interval": self.scrape_interval,
                    # a whole interval, not Prometheus' 10 s: the simulator renders a large fleet's
                    # exposition slowly on a loaded machine, and a timed-out scrape loses every series
                    "scrape_timeout": self.scrape_interval,
                    "honor_labels": True,
                    "static_configs": [{"targets": list(self.scrape_targets)}],
                    "metric_relabel_configs": [{**dcgm, "action": "drop"}],
                }
            )
            scrape_configs.append(
                {  # the DCGM series as kube-prometheus-stack scrapes the GPU Operator's dcgm-exporter
                    # (its ServiceMonitor: honorLabels false, so pod/namespace arrive as exported_*)
                    "job_name": GPU_OPERATOR_JOB,
                    "scrape_interval": self.scrape_interval,
                    "scrape_timeout": self.scrape_interval,
                    "honor_labels": False,
                    "static_configs": [
                        {"targets": [target], "labels": gpu_operator_target_labels(index)}
                        for index, target in enumerate(self.scrape_targets)
                    ],
                    "metric_relabel_configs": [{**dcgm, "action": "keep"}],
                }
            )
        scrape_configs.extend(self.extra_scrape_configs)
        config: dict[str, object] = {
            "global": {"scrape_interval": self.scrape_interval},
            "scrape_configs": scrape_configs,
        }
        if self.rule_files:
            config["rule_files"] = [str(path) for path in self.rule_files]
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _backfill(self) -> None:
        for source in self.backfill:
            seconds = create_blocks(source, self.data_dir, self.promtool)
            print(f"[prometheus] backfilled {source.name} in {seconds:.1f} s", file=sys.stderr)

    def backfill_rules(self, rule_file: Path, start: float, end: float) -> None:
        """Record `rule_file`'s rules over `[start, end]` from the running server's data
        (`promtool tsdb create-blocks-from rules`, at each group's interval), then restart the server
        on the same TSDB so the recorded blocks are read, as if the rules had run all along."""
        out = self.workdir / "rule-blocks"
        shutil.rmtree(out, ignore_errors=True)
        # a group's evaluation offset hashes its file name: the same relative name, the same offset
        shutil.copyfile(rule_file, self.workdir / rule_file.name)
        result = subprocess.run(
            [str(self.promtool), "tsdb", "create-blocks-from", "rules", "--quiet", f"--url={self.url}",
             f"--start={start:.0f}", f"--end={end:.0f}", f"--output-dir={out}", rule_file.name],
            capture_output=True, text=True, check=False, timeout=600, cwd=self.workdir,
        )  # fmt: skip
        if result.returncode != 0:
            raise PrometheusError(
                f"promtool rule backfill of {rule_file} failed: {result.stderr.strip()[-2000:]}"
            )
        self.stop()
        for block in out.iterdir():
            if block.is_dir():
                shutil.move(str(block), self.data_dir / block.name)
        self._launch(timeout=60)

    def start(self, *, timeout: float = 60) -> PrometheusServer:
        """Backfill, start the server and wait until it answers /-/ready (on an empty TSDB unless
        `keep_data`)."""
        if self.data_dir.exists() and not self.keep_data:
            shutil.rmtree(self.data_dir)  # series of an earlier run with the same pod names would mix in
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._backfill()
        return self._launch(timeout=timeout)

    def _launch(self, *, timeout: float) -> PrometheusServer:
        config = self._write_config()
        log = (self.workdir / "prometheus.log").open("ab")  # a restart appends
        self._process = subprocess.Popen(
            [
                str(self.prometheus),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.data_dir}",
                "--storage.tsdb.retention.time=3650d",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-remote-write-receiver",
                "--web.enable-lifecycle",
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_running()
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.3)
        self.stop()
        raise PrometheusError(f"prometheus not ready after {timeout:.0f} s")

    def check_running(self) -> None:
        """Raise PrometheusError, with the end of its log, if the started server has exited."""
        if self._process is not None and self._process.poll() is not None:
            tail = log_tail(self.workdir / "prometheus.log")
            raise PrometheusError(
                f"prometheus exited with code {self._process.returncode}; its log ends:\n{tail}"
            )

    def stop(self) -> None:
        """Terminate the server; safe to call twice."""
        if self._process is None:
            return
        stop_process(self._process)
        self._process = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
