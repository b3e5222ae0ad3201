"""Run a test worker script in one process or under torchrun (gloo on CPU), or a command as the ranks of a process
group started one by one, for the DDP tests."""

import os
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    """A free local port, for the rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(nproc: int) -> list[str]:
    """The arguments of ``python`` that start torchrun with ``nproc`` processes on a free local port."""
    return ["-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
            "--master_port", str(free_port())]


def launch_ranks(args: list[str], nproc: int, env: dict[str, str], timeout: int) -> list[subprocess.CompletedProcess]:
    """Run ``python args`` as the ``nproc`` ranks of one process group on a free local port, each with the variables
    torchrun sets but started on its own: each rank's exit status and stderr are its own, and no launcher ends the
    other ranks when one fails."""
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank in range(nproc)]
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
        return [subprocess.CompletedProcess(p.args, p.returncode, *output) for p, output in zip(procs, outputs)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def launch_worker(worker: Path, args: list[str], nproc: int, data: Path, timeout: int) -> None:
    """Run ``worker args`` with one thread and GENFEAT_DATA=data; nproc > 1: under torchrun on a free local port.
    Asserts a zero exit status and shows the end of stderr otherwise."""
    env = {**os.environ, "PYTHONPATH": str(worker.parent), "OMP_NUM_THREADS": "1", "GENFEAT_DATA": str(data)}
    cmd = [str(worker), *args]
    if nproc > 1:
        cmd = [*torchrun(nproc), *cmd]
    run = subprocess.run([sys.executable, *cmd], env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
