"""NVML node agent: exports dcgm-exporter-compatible GPU metrics with pod labels.

Pods are found from the kubelet's pod-resources socket (`--pod-resources-socket`, as dcgm-exporter does)
and, for per-process figures on shared GPUs, from the GPU processes' cgroups (`--proc-root`, which needs
the host's PID namespace).

Serve them for Prometheus (`--listen`), or write OpenMetrics files for offline analysis: one snapshot
(`--once --output FILE.om`) or a timestamped recording (`--record 5m --output FILE.om`).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys

from gpu_rightsizer.config import parse_duration

DEFAULT_LISTEN = "127.0.0.1:9400"


def parse_listen(text: str) -> tuple[str, int]:
    """'HOST:PORT' (IPv6 as '[::1]:9400') → (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"--listen wants HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the agent's flags."""
    parser.add_argument(
        "--listen",
        type=parse_listen,
        default=parse_listen(DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"where to serve /metrics (default {DEFAULT_LISTEN}; a DaemonSet uses 0.0.0.0:9400)",
    )
    parser.add_argument(
        "--interval",
        type=parse_duration,
        default=1.0,
        metavar="DURATION",
        help="sampling interval (default 1s)",
    )
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="value of the Hostname label (default $NODE_NAME, else the host name)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="take one snapshot, write it to --output, exit")
    mode.add_argument(
        "--record",
        type=parse_duration,
        metavar="DURATION",
        help="sample for DURATION, write to --output, exit",
    )
    parser.add_argument("--output", "-o", metavar="FILE.om", help="OpenMetrics file for --once/--record")
    parser.add_argument(
        "--process-cpu",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="export each container's busiest-process CPU from /proc (default on; needs the host's PIDs)",
    )
    parser.add_argument(
        "--proc-root", default="/proc", help="the host's /proc (e.g. /host/proc in a pod without hostPID)"
    )
    parser.add_argument(
        "--pod-resources-socket",
        metavar="PATH",
        default=None,
        help="the kubelet's pod-resources socket (usually /var/lib/kubelet/pod-resources/kubelet.sock): "
        "name the pod of each GPU from the kubelet, as dcgm-exporter does, without hostPID or API access",
    )
    parser.add_argument(
        "--kubernetes",
        action="store_true",
        help="name the pods found through processes (--proc-root, needs hostPID) from the API server "
        "(pods of --node-name); without it those carry only pod_uid",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def run(args: argparse.Namespace) -> int:
    """Run the agent until stopped (serve mode) or until the snapshot/recording is written."""
    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if (args.once or args.record) and not args.output:
        print("error: --once and --record need --output FILE.om", file=sys.stderr)
        return 2

    from pathlib import Path

    from gpu_rightsizer.adapters.nvml import PynvmlLibrary
    from gpu_rightsizer.agent.cgroups import PidPodMapper, PodDirectory
    from gpu_rightsizer.agent.runner import AgentRunner

    directory: PodDirectory | None = None
    if args.kubernetes:
        from gpu_rightsizer.agent.kube_directory import KubernetesPodDirectory

        directory = KubernetesPodDirectory(node_name=args.node_name)
    mapper = PidPodMapper(proc_root=Path(args.proc_root), directory=directory)
    device_pods = None
    pod_resources = None
    if args.pod_resources_socket:
        from gpu_rightsizer.agent.pod_resources import open_directory

        pod_resources = open_directory(Path(args.pod_resources_socket))
        device_pods = pod_resources.device_pods
    runner = AgentRunner(
        nvml=PynvmlLibrary(),
        resolve=mapper.identity,
        hostname=args.node_name,
        interval=args.interval,
        device_pods=device_pods,
    )
    runner.install_signal_handlers()
    if args.process_cpu:
        from gpu_rightsizer.agent.process_cpu import ProcessCpuTracker

        # Its own PID cache, pruned to the live PIDs each tick (the GPU mapper sees GPU processes only).
        every_process = PidPodMapper(proc_root=Path(args.proc_root), directory=directory)
        runner.process_cpu = ProcessCpuTracker(
            resolve=every_process.identity, proc_root=Path(args.proc_root), retain=every_process.retain
        )
    if pod_resources is not None:
        pod_resources.start(runner.stop_event)  # a slow kubelet never delays a scrape or a tick
    try:
        if args.once:
            return runner.snapshot_to_file(Path(args.output))
        if args.record:
            return runner.record_to_file(Path(args.output), args.record)
        return runner.serve(args.listen[0], args.listen[1])
    finally:
        runner.close()
