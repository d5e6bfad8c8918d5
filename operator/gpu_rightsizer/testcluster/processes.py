"""Local processes of the test cluster and the demo: free ports, liveness, log tails, stopping.

Shared by the cluster (kwokctl's components), Prometheus and the demo's children, so that each of them
reports an exit the same way: at once, with the end of its log.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from pathlib import Path

#: Lines of a log quoted in an error.
LOG_TAIL_LINES = 25


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the kernel picks it among the ephemeral ports)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that are free right now (all held open while picked)."""
    with contextlib.ExitStack() as stack:
        sockets = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)
        ]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def process_running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie, exited but not yet reaped, has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = stat.rpartition(")")[2].split()[:1]
    return state not in (["Z"], ["X"])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty log)"


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate a child process that still runs, then kill it if it lingers."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def exited_child(label: str, process: subprocess.Popen[bytes], log: Path) -> str:
    """A description of a child that has exited, with its log tail; "" while it runs."""
    if process.poll() is None:
        return ""
    return f"the {label} exited with code {process.returncode}; its log ends:\n{log_tail(log)}"
