"""torchrun / DDP set-up: gloo on CPU, nccl on CUDA."""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def init_distributed(device: torch.device) -> DistInfo:
    """Join the process group torchrun set up in the environment (no-op for a single process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    return DistInfo(rank=rank, world=world, local_rank=local_rank)


def leave_distributed() -> None:
    """Leave the process group together, if one was joined: the ranks meet at a barrier and the group is destroyed.

    Call it once the models wrapped in DistributedDataParallel are dropped. A rank whose interpreter exits while
    a DDP reducer or the group is still alive could abort in their destructors ("terminate called without an
    active exception", SIGABRT), which torchrun reports as a failed run after the outputs were written.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    gc.collect()  # reducers of trainers that are gone but sit in reference cycles
    dist.barrier()
    dist.destroy_process_group()


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
