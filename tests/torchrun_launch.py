"""Run a test worker script in one process or under torchrun (gloo on CPU), for the DDP tests."""

import os
import socket
import subprocess
import sys
from pathlib import Path


def torchrun(nproc: int) -> list[str]:
    """The arguments of ``python`` that start torchrun with ``nproc`` processes on a free local port."""
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return ["-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
            "--master_port", str(port)]


def launch_worker(worker: Path, args: list[str], nproc: int, data: Path, timeout: int) -> None:
    """Run ``worker args`` with one thread and GENFEAT_DATA=data; nproc > 1: under torchrun on a free local port.
    Asserts a zero exit status and shows the end of stderr otherwise."""
    env = {**os.environ, "PYTHONPATH": str(worker.parent), "OMP_NUM_THREADS": "1", "GENFEAT_DATA": str(data)}
    cmd = [str(worker), *args]
    if nproc > 1:
        cmd = [*torchrun(nproc), *cmd]
    run = subprocess.run([sys.executable, *cmd], env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
