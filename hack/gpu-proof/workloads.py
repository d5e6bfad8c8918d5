"""Controlled GPU workloads with known bottlenecks, for recording real signals on one GPU.

Each workload pins itself to the CPU set given by --cores (standing in for a pod's CPU limit), warms
up, touches --ready, runs until --duration passes or SIGTERM arrives, and writes its own throughput to
--result as JSON. Run: python workloads.py NAME --cores 0,1 --duration 45 --ready R --result J
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

STOP = False


def _on_term(_signum: int, _frame: Any) -> None:
    global STOP  # noqa: PLW0603
    STOP = True


def _ready(path: str | None) -> None:
    if path:
        Path(path).write_text(str(os.getpid()))


class _Timer:
    """Counts steps after the warm-up and reports steps/s at the end."""

    def __init__(self, duration: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + duration
        self.steps = 0
        self.extra: dict[str, float] = {}

    def running(self) -> bool:
        return not STOP and time.monotonic() < self.deadline

    def result(self) -> dict[str, float]:
        elapsed = time.monotonic() - self.start
        return {"steps": self.steps, "seconds": elapsed, "steps_per_s": self.steps / elapsed, **self.extra}


# --- (1)/(2) training with a CPU-heavy input pipeline ---------------------------------------------------


class HeavyPreprocessDataset(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Synthetic images whose 'decode + augment' costs a fixed amount of CPU time per sample."""

    def __init__(self, cpu_ms_per_sample: float, size: int = 10_000_000) -> None:
        self.cpu_seconds = cpu_ms_per_sample / 1000.0
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        image = rng.integers(0, 255, size=(224, 224, 3), dtype=np.uint8)
        started = time.thread_time()
        work = image[:64, :64].astype(np.float32)
        while time.thread_time() - started < self.cpu_seconds:  # augmentation stand-in: real CPU work
            work = np.tanh(work * 0.5 + 0.1)
        image[0, 0, 0] = int(abs(float(work[0, 0, 0])) * 100) % 255
        return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))), index % 1000


def _worker_init(_worker_id: int) -> None:
    torch.set_num_threads(1)


def _train_resnet(
    loader: torch.utils.data.DataLoader[tuple[torch.Tensor, int]],
    normalise: Any,
    args: argparse.Namespace,
    warm_steps: int,
) -> _Timer:
    """ResNet-50 bf16 training on what `loader` yields; ready after `warm_steps`, then timed."""
    import torchvision

    model = torchvision.models.resnet50(weights=None).cuda().to(memory_format=torch.channels_last)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    timer: _Timer | None = None
    warm = 0
    for images, labels in loader:
        x = normalise(images.cuda(non_blocking=True).float()).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), labels.cuda(non_blocking=True))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        if timer is None:
            warm += 1
            if warm == warm_steps:
                torch.cuda.synchronize()
                _ready(args.ready)
                timer = _Timer(args.duration)
            continue
        timer.steps += 1
        if not timer.running():
            break
    torch.cuda.synchronize()
    assert timer is not None
    return timer


def train_with_loader(args: argparse.Namespace) -> dict[str, float]:
    workers = args.workers or max(1, len(os.sched_getaffinity(0)))
    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        HeavyPreprocessDataset(args.cpu_ms),
        batch_size=args.batch,
        num_workers=workers,
        pin_memory=True,
        persistent_workers=True,
        prefetch_factor=4,
        worker_init_fn=_worker_init,
    )
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
    timer = _train_resnet(loader, lambda x: (x - mean) / std, args, warm_steps=5)
    timer.extra.update({"loader_workers": workers, "batch": args.batch, "cpu_ms_per_sample": args.cpu_ms})
    return timer.result()


# --- (3) tiny inference server -----------------------------------------------------------------------


def _serving_mlp() -> torch.nn.Module:
    """The served model: six 2048-wide layers, small enough that one request is a sliver of an H200."""
    layers: list[torch.nn.Module] = []
    for _ in range(6):
        layers += [torch.nn.Linear(2048, 2048), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda().eval()


def tiny_inference(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(1)
    model = _serving_mlp()
    # Weights a real server keeps resident (embeddings, other heads), read by no request here.
    resident = torch.ones(int(args.model_gib * 2**28), dtype=torch.float32, device="cuda")
    period = 1.0 / args.rate
    latencies: list[float] = []
    with torch.inference_mode():
        for _ in range(50):
            model(torch.randn(1, 2048, device="cuda")).sum().item()
        _ready(args.ready)
        timer = _Timer(args.duration)
        next_at = time.monotonic()
        while timer.running():
            request = torch.randn(1, 2048)  # arrives on the host, batch 1
            started = time.monotonic()
            model(request.cuda()).argmax().item()
            latencies.append(time.monotonic() - started)
            timer.steps += 1
            if args.requests_file and timer.steps % 20 == 0:
                Path(args.requests_file).write_text(str(timer.steps))
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
    if args.requests_file:
        Path(args.requests_file).write_text(str(timer.steps))
    timer.extra.update(
        {
            "latency_p50_ms": float(np.percentile(latencies, 50) * 1000),
            "latency_p99_ms": float(np.percentile(latencies, 99) * 1000),
            "max_memory_allocated_mib": torch.cuda.max_memory_allocated() / 2**20,
            "max_memory_reserved_mib": torch.cuda.max_memory_reserved() / 2**20,
            "resident_gib": resident.numel() * 4 / 2**30,
            "rate": args.rate,
        }
    )
    return timer.result()


# --- (4) idle process holding memory -------------------------------------------------------------------


def idle_holder(args: argparse.Namespace) -> dict[str, float]:
    hold = torch.ones(args.hold_gib * 2**28, dtype=torch.float32, device="cuda")  # GiB of float32
    torch.cuda.synchronize()
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        time.sleep(0.2)
    timer.extra["held_gib"] = hold.numel() * 4 / 2**30
    return timer.result()


# --- (5) memory-bandwidth-bound loop -------------------------------------------------------------------


def membw(args: argparse.Namespace) -> dict[str, float]:
    n = 2**30  # 4 GiB per fp32 tensor
    a = torch.rand(n, device="cuda")
    b = torch.rand(n, device="cuda")
    c = torch.empty_like(a)
    for _ in range(3):
        torch.add(a, b, alpha=0.5, out=c)
    torch.cuda.synchronize()
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        for _ in range(10):
            torch.add(a, b, alpha=0.5, out=c)  # 12 bytes moved per element, no reuse
            a, c = c, a
        torch.cuda.synchronize()
        timer.steps += 10
    timer.extra["bytes_per_step"] = 12.0 * n
    timer.extra["achieved_tb_per_s"] = timer.steps * 12.0 * n / (time.monotonic() - timer.start) / 1e12
    return timer.result()


# --- (6) pageable host-to-device copy loop -------------------------------------------------------------


def pageable_h2d(args: argparse.Namespace) -> dict[str, float]:
    host = torch.rand(2**28)  # 1 GiB, pageable (not pinned)
    device = torch.empty(2**28, device="cuda")
    device.copy_(host)
    torch.cuda.synchronize()
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        device.copy_(host)  # staged through a driver bounce buffer
        device.mul_(1.0001)
        torch.cuda.synchronize()
        timer.steps += 1
    timer.extra["achieved_gb_per_s"] = timer.steps * host.numel() * 4 / (time.monotonic() - timer.start) / 1e9
    return timer.result()


# --- (7) healthy compute-bound bf16 training -------------------------------------------------------------


def bf16_train(args: argparse.Namespace) -> dict[str, float]:
    width = 8192
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width, bias=False),
        torch.nn.GELU(),
        torch.nn.Linear(width, width, bias=False),
        torch.nn.GELU(),
        torch.nn.Linear(width, width, bias=False),
    ).cuda()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(8192, width, device="cuda")
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
        timer.steps += 1
        if timer.steps % 10 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    flops_per_step = 3 * 2 * 3 * 8192 * width * width
    timer.extra["tflops"] = timer.steps * flops_per_step / (time.monotonic() - timer.start) / 1e12
    return timer.result()


# --- (8) FP32 GEMM training with TF32 off: SM busy, tensor pipes idle ------------------------------------


def fp32_gemm_train(args: argparse.Namespace) -> dict[str, float]:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    width = 8192
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width, bias=False),
        torch.nn.GELU(),
        torch.nn.Linear(width, width, bias=False),
        torch.nn.GELU(),
        torch.nn.Linear(width, width, bias=False),
    ).cuda()
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(4096, width, device="cuda")
    for _ in range(3):
        loss = model(x).pow(2).mean()
        loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        loss = model(x).pow(2).mean()
        loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
        timer.steps += 1
        if timer.steps % 5 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    flops_per_step = 3 * 2 * 3 * 4096 * width * width
    timer.extra["tflops"] = timer.steps * flops_per_step / (time.monotonic() - timer.start) / 1e12
    timer.extra["allow_tf32"] = float(torch.backends.cuda.matmul.allow_tf32)
    return timer.result()


# --- (9) a loop that waits on the host each step: kernels in every second, GPU mostly idle ----------------


def _with_host_wait(step: Any, args: argparse.Namespace, warm_steps: int) -> tuple[_Timer, float]:
    """Warm up, time the GPU step alone (ms), then run it with `--wait-ms` of host wait after each."""
    for _ in range(warm_steps):
        step()
    torch.cuda.synchronize()
    started = time.monotonic()
    for _ in range(20):
        step()
    step_ms = (time.monotonic() - started) / 20 * 1000
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        step()
        time.sleep(args.wait_ms / 1000.0)  # waiting on the host: a queue, a file, a lock, an environment
        timer.steps += 1
    return timer, step_ms


def host_wait(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(1)
    width = 4096
    weights = [torch.randn(width, width, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    x = torch.randn(2048, width, device="cuda", dtype=torch.bfloat16)

    def step() -> float:
        y = x
        for _ in range(args.inner):
            for w in weights:
                y = torch.tanh(y @ w)
        return float(y.float().mean().item())  # the host reads the result, as a training loop logs loss

    timer, gpu_step_ms = _with_host_wait(step, args, warm_steps=10)
    timer.extra.update({"wait_ms": args.wait_ms, "step_ms_without_wait": gpu_step_ms, "inner": args.inner})
    return timer.result()


# --- (10) a loader starved by slow reads: workers wait on throttled storage, CPU near idle ---------------


class SlowReadDataset(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Samples read from a file at a capped rate per worker, as from a slow network filesystem or bucket.

    Each sample is one 150 KiB read (an encoded image) at a random offset; the worker sleeps so that it
    reads no faster than `mib_per_s`, the way a remote read waits on the network, not on the CPU.
    """

    def __init__(self, path: str, mib_per_s: float, sample_bytes: int = 150 * 1024) -> None:
        self.path = path
        self.sample_bytes = sample_bytes
        self.seconds_per_sample = sample_bytes / (mib_per_s * 2**20)
        self.size = os.path.getsize(path) // sample_bytes
        self.fd: int | None = None

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY)
        started = time.monotonic()
        offset = (index * 7919 % self.size) * self.sample_bytes
        data = os.pread(self.fd, self.sample_bytes, offset)
        os.posix_fadvise(self.fd, offset, self.sample_bytes, os.POSIX_FADV_DONTNEED)
        time.sleep(max(0.0, self.seconds_per_sample - (time.monotonic() - started)))
        image = np.frombuffer(data, dtype=np.uint8)[: 3 * 128 * 128].reshape(3, 128, 128)
        return torch.from_numpy(image.copy()), index % 1000


def slow_read_loader(args: argparse.Namespace) -> dict[str, float]:
    path = "/tmp/gpu-proof-shards.bin"
    if not os.path.exists(path) or os.path.getsize(path) < 2**30:
        with open(path, "wb") as shard:
            block = np.random.default_rng(0).integers(0, 255, size=2**24, dtype=np.uint8).tobytes()
            for _ in range(64):
                shard.write(block)
            shard.flush()
            os.fsync(shard.fileno())
    descriptor = os.open(path, os.O_RDONLY)
    os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)  # reads go to the disk, as remote reads would
    os.close(descriptor)
    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        SlowReadDataset(path, args.read_mib_per_s),
        batch_size=args.batch,
        num_workers=args.workers or 4,
        pin_memory=True,
        persistent_workers=True,
        prefetch_factor=2,
        worker_init_fn=_worker_init,
    )
    timer = _train_resnet(loader, lambda x: x / 255, args, warm_steps=2)
    timer.extra.update({"read_mib_per_s_per_worker": args.read_mib_per_s, "workers": args.workers or 4})
    return timer.result()


# --- (11) launch-bound: one Python thread issuing tiny kernels back to back ------------------------------


def launch_bound(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(1)
    x = torch.zeros(4096, device="cuda")
    w = torch.randn(64, 64, device="cuda")
    h = torch.randn(64, 64, device="cuda")
    for _ in range(100):
        x.mul_(0.999).add_(0.001)
    torch.cuda.synchronize()
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        for _ in range(50):  # an unfused optimiser or a small RNN cell: many kernels, each a few blocks
            x.mul_(0.999).add_(0.001)
            h = torch.tanh(h @ w)
        float(x[0].item())
        timer.steps += 1
    timer.extra["kernels_per_step"] = 50 * 4
    return timer.result()


# --- (12) pageable host-to-device copies feeding a training step -----------------------------------------


def h2d_train(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(1)
    batch = torch.rand(2**27)  # 512 MiB of pageable host memory: the batch is built on the host each step
    width = 8192
    w = torch.randn(width, width, device="cuda", dtype=torch.bfloat16)
    device_batch = torch.empty(2**27, device="cuda")
    for _ in range(3):
        device_batch.copy_(batch)
    torch.cuda.synchronize()
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        device_batch.copy_(batch)  # pageable: staged through the driver's bounce buffer, SMs idle
        x = device_batch[: 4096 * width].view(4096, width).to(torch.bfloat16)
        for _ in range(4):
            x = torch.tanh(x @ w)
        torch.cuda.synchronize()
        timer.steps += 1
    return timer.result()


# --- (13) wide GPU phases at low duty: the GPU waits on the host between them -----------------------------


def wide_duty(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(1)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def phase() -> None:
        for _ in range(args.inner):
            torch.matmul(a, b)
        torch.cuda.synchronize()

    timer, phase_ms = _with_host_wait(phase, args, warm_steps=5)
    timer.extra.update({"phase_ms": phase_ms, "wait_ms": args.wait_ms, "inner": args.inner})
    return timer.result()


# --- (14) an idle context holder: a notebook that imported torch and touched the GPU once -----------------


def idle_context(args: argparse.Namespace) -> dict[str, float]:
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    _ready(args.ready)
    timer = _Timer(args.duration)
    while timer.running():
        time.sleep(0.2)
    return timer.result()


# --- (15) GPU out-of-memory: loads, trains a few steps, then asks for more memory than there is -----------


def gpu_oom(args: argparse.Namespace) -> dict[str, float]:
    width = 8192
    model = torch.nn.Linear(width, width, bias=False).cuda()
    x = torch.randn(4096, width, device="cuda")
    _ready(args.ready)
    for _ in range(int(args.steps_before_oom)):
        model(x).sum().backward()
    torch.cuda.synchronize()
    held = []
    while True:  # a batch size too large for the card: each activation buffer 8 GiB until it fails
        held.append(torch.empty(2**31, device="cuda"))
        held[-1].fill_(1.0)


# --- (16) a server whose CPU tokenizer is the bottleneck: requests queue while the GPU is mostly idle -----


def tokenizer_server(args: argparse.Namespace) -> dict[str, float]:
    import collections
    import random

    torch.set_num_threads(1)
    model = _serving_mlp()
    rng = random.Random(0)
    waiting: collections.deque[float] = collections.deque()
    dropped = 0
    with torch.inference_mode():
        for _ in range(20):
            model(torch.randn(8, 2048, device="cuda")).sum().item()
        _ready(args.ready)
        timer = _Timer(args.duration)
        next_arrival = time.monotonic()
        last_write = 0.0
        waits: list[float] = []
        while timer.running():
            now = time.monotonic()
            while next_arrival <= now:  # open-loop Poisson arrivals: clients do not wait for the server
                if len(waiting) < args.max_queue:
                    waiting.append(next_arrival)
                else:
                    dropped += 1  # the gateway rejects once the queue is full (429)
                next_arrival += rng.expovariate(args.rate)
            if not waiting:
                time.sleep(max(0.0, min(0.01, next_arrival - now)))
                continue
            batch = [waiting.popleft() for _ in range(min(args.max_batch, len(waiting)))]
            for _ in batch:  # tokenise on the CPU, one request at a time
                spin = time.thread_time()
                while time.thread_time() - spin < args.tokenize_ms / 1000.0:
                    pass
            model(torch.randn(len(batch), 2048).cuda()).argmax(dim=1).cpu()
            now = time.monotonic()
            waits.extend(now - t for t in batch)
            timer.steps += len(batch)
            if args.requests_file and now - last_write > 0.25:
                Path(args.requests_file).write_text(f"{timer.steps} {len(waiting)}")
                last_write = now
    timer.extra.update(
        {
            "rate": args.rate,
            "tokenize_ms": args.tokenize_ms,
            "dropped": dropped,
            "wait_p50_ms": float(np.percentile(waits, 50) * 1000),
            "wait_p99_ms": float(np.percentile(waits, 99) * 1000),
        }
    )
    return timer.result()


WORKLOADS = {
    "starved-loader": train_with_loader,
    "fed-loader": train_with_loader,
    "tiny-inference": tiny_inference,
    "idle-holder": idle_holder,
    "membw": membw,
    "pageable-h2d": pageable_h2d,
    "bf16-train": bf16_train,
    "fp32-gemm": fp32_gemm_train,
    "host-wait": host_wait,
    "slow-read-loader": slow_read_loader,
    "launch-bound": launch_bound,
    "h2d-train": h2d_train,
    "wide-duty": wide_duty,
    "idle-context": idle_context,
    "gpu-oom": gpu_oom,
    "tokenizer-server": tokenizer_server,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--cores", required=True, help="comma-separated CPU ids (the pod's CPU set)")
    parser.add_argument("--duration", type=float, default=45.0)
    parser.add_argument("--ready")
    parser.add_argument("--result")
    parser.add_argument("--cpu-ms", type=float, default=1.5, help="CPU ms of preprocessing per sample")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s of the inference server")
    parser.add_argument("--requests-file", help="where the inference server keeps its request count")
    parser.add_argument("--hold-gib", type=int, default=20)
    parser.add_argument("--workers", type=int, default=0, help="loader workers (0: one per CPU in the set)")
    parser.add_argument("--model-gib", type=float, default=0.0, help="GiB the inference server holds")
    parser.add_argument("--wait-ms", type=float, default=50.0, help="host wait per step (host-wait)")
    parser.add_argument(
        "--inner", type=int, default=1, help="GPU work per step, in 4-matmul blocks (host-wait)"
    )
    parser.add_argument("--read-mib-per-s", type=float, default=10.0, help="per loader worker (slow-read)")
    parser.add_argument("--steps-before-oom", type=float, default=20, help="training steps before the OOM")
    parser.add_argument("--tokenize-ms", type=float, default=8.0, help="CPU ms per request (tokenizer)")
    parser.add_argument("--max-queue", type=int, default=256, help="requests the gateway queues")
    parser.add_argument("--max-batch", type=int, default=8, help="requests per GPU batch (tokenizer)")
    args = parser.parse_args()
    os.sched_setaffinity(0, [int(c) for c in args.cores.split(",")])
    signal.signal(signal.SIGTERM, _on_term)
    result = WORKLOADS[args.workload](args)
    result["cores"] = len(os.sched_getaffinity(0))
    text = json.dumps({"workload": args.workload, **result})
    print(text, flush=True)
    if args.result:
        Path(args.result).write_text(text)


if __name__ == "__main__":
    main()
