"""torchrun / DDP set-up: gloo on CPU; on CUDA nccl for CUDA tensors and gloo for CPU ones."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from ..errors import ConfigError, GenfeatError

T = TypeVar("T")


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def refuse_several_processes(what: str, why: str) -> None:
    """Refuse, with one clear error before any work, to run ``what`` under torchrun (several processes, WORLD_SIZE
    > 1), where it would fail on the DDP wrapper or train wrongly: ``why`` says which."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(f"{what} does not run under torchrun (several processes): {why}",
                          "run it as one process (genfeat run, no torchrun); --train.device cuda puts it on one GPU")


def init_distributed(device: torch.device) -> DistInfo:
    """Join the process group torchrun set up in the environment (no-op for a single process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        torch.cuda.set_device(local_rank)    # nccl's own collectives (barrier) then use this rank's GPU, not GPU 0
    if not dist.is_initialized():
        # on GPUs the small CPU tensors of all_reduce_sum (loss sums, counts) go through gloo: nccl reduces
        # CUDA tensors only
        backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    return DistInfo(rank=rank, world=world, local_rank=local_rank)


def on_rank_0(work: Callable[[], T], what: str, info: DistInfo) -> T | None:
    """Run ``work`` on rank 0 alone while the other ranks wait for its outcome (they return None), for what rank 0
    writes into OUT and the others read next or must not end before (one process: ``work()``).

    Rank 0 shares whether ``work`` succeeded, an interrupt or any error too, before it raises that error; a barrier
    would leave the waiting ranks with a gloo error (connection closed) once rank 0 has exited.

    Args:
        what: the work, for the other ranks' error: ``failed to train the tokenizer into 'OUT/tokenizer'``.
    Raises:
        GenfeatError: on the other ranks, when ``work`` failed on rank 0.
    """
    if not info.enabled:
        return work()
    failed = torch.zeros(1)
    try:
        result = work() if info.is_main else None
    except BaseException:
        failed.fill_(1)
        with contextlib.suppress(RuntimeError):  # a rank already gone: rank 0's own error is the one to report
            dist.broadcast(failed, src=0)
        raise
    dist.broadcast(failed, src=0)
    if failed.item():
        raise GenfeatError(f"rank 0 of {info.world} {what}, which rank {info.rank} waits for",
                           "fix the cause of the error rank 0 printed on its stderr (torchrun's, where no --redirects "
                           "sent it to a log)")
    return result


def leave_distributed() -> None:
    """After a successful run under torchrun: free the DDP reducers of finished trainers, meet the other ranks at a
    barrier, and have the process group destroyed when the interpreter exits (not now: a later run in this process,
    as the DDP tests make, keeps using it; a group destroyed and joined again hung the second rendezvous).

    A DDP reducer still alive while the interpreter shuts down aborted its rank about 1 run in 10 on a loaded
    2-core VM ("terminate called without an active exception", SIGABRT; torchrun then reports the finished run
    as failed); freeing the reducers first never did in 90 runs. The barrier waits for every rank: torchrun ends
    the others when one fails, other launchers only at the process group's timeout.
    """
    if not free_reducers():
        return
    dist.barrier()
    _destroy_at_exit()


def free_reducers() -> bool:
    """In a process group: collect the garbage, so that the DDP reducers of trainers that are gone but sit in
    reference cycles go now, not at interpreter shutdown (a local step, safe after an error too). Returns whether
    a process group is joined."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    gc.collect()
    return True


@functools.cache
def _destroy_at_exit() -> None:
    atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())


def all_reduce_sum(values: list[float], info: DistInfo | None = None) -> list[float]:
    """Sum floats across ranks (exact loss sums and counts in logs and evaluation).

    Without ``info``, sums over the initialised process group, if any.
    """
    enabled = info.enabled if info is not None else dist.is_available() and dist.is_initialized()
    if not enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()
