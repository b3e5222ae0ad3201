"""Data streams: infinite, resumable batch sources that objectives are paired with."""

from __future__ import annotations

from typing import Any, Iterator, Protocol, runtime_checkable

from ..errors import ConfigError


def derived_seed(*parts: int) -> int:
    """A seed for the random draws that ``parts`` name (a run's seed and an epoch, or a role), mixed by numpy's
    SeedSequence: draws of other parts are unrelated. Adding them instead (seed + epoch) makes seed s + 1's first
    epoch seed s's second, so a run's seeds would share their data orders shifted by an epoch.

    Args:
        parts: integers >= 0.
    Returns:
        An integer in [0, 2**63), for ``torch.Generator.manual_seed`` or ``random.Random``.
    """
    import numpy as np

    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


@runtime_checkable
class Stream(Protocol):
    """An endless source of batches whose position can be saved and restored exactly.

    ``next(stream)`` returns the next batch (cycling over epochs); ``state_dict()`` returns a
    JSON-serialisable position such that ``load_state_dict`` followed by ``next`` yields the
    same batch the original stream would have yielded next. ``shard(rank, world)`` restricts
    the stream to this rank's part of every global batch (for torchrun/DDP).
    """

    def __next__(self) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def shard(self, rank: int, world: int) -> None: ...


class TensorStream:
    """Endless minibatches over aligned tensors (examples on dim 0), reshuffled each epoch.

    The order of epoch ``e`` is a permutation drawn from ``derived_seed(seed, e)``, so the position
    ``(epoch, index)`` alone restores the stream exactly. Under DDP every global batch of
    ``batch_size`` examples is split into contiguous per-rank slices.

    With ``drop_last=False`` every example is seen exactly once per epoch, also when sharded: the
    short last batch of r < batch_size examples is dealt out in contiguous slices whose sizes
    differ by at most one (the first ``r % world`` ranks get one more); the trainer's item-weighted
    normalisation (counts summed over ranks) still weighs each of the r examples the same. A short
    batch with fewer examples than ranks would leave a rank without any, so :meth:`shard` refuses it.

    Args:
        tensors: mapping name -> tensor with the same first dimension n.
        batch_size: global batch size (default 32); the last partial batch of an epoch is dropped
            when ``drop_last`` (default True), so every step sees ``batch_size`` examples.
        shuffle: reshuffle every epoch (default True); False keeps the stored order.
        seed: base seed of the shuffles (default 0).
        field: the recipe field that sets ``batch_size``, as the error for one larger than the data names it.
    Raises:
        ConfigError: ``batch_size`` above the number of examples with ``drop_last`` (no whole batch).
    Yields:
        dict name -> tensor of shape [batch_size / world, ...] (the short last batch of an epoch
        without ``drop_last``: [r / world rounded up or down, ...]).
    """

    def __init__(self, tensors: dict[str, Any], batch_size: int = 32, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = True, field: str = "batch_size"):
        import torch

        sizes = {name: t.shape[0] for name, t in tensors.items()}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"tensors must share their first dimension, got {sizes}")
        self.tensors = tensors
        self.n = next(iter(sizes.values()))
        if self.n == 0:
            raise ValueError("TensorStream needs at least one example")
        self.batch_size = min(batch_size, self.n) if not drop_last else batch_size
        if drop_last and batch_size > self.n:
            raise ConfigError(f"{field} {batch_size} is larger than the {self.n} examples it draws from",
                              f"set {field} to {self.n} or less")
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.index = 0
        self.rank, self.world = 0, 1
        self._torch = torch
        self._order = self._permutation(0)

    def _permutation(self, epoch: int):
        torch = self._torch
        if not self.shuffle:
            return torch.arange(self.n)
        g = torch.Generator().manual_seed(derived_seed(self.seed, epoch))
        return torch.randperm(self.n, generator=g)

    def _batches_per_epoch(self) -> int:
        full, rest = divmod(self.n, self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, Any]:
        if self.index >= self._batches_per_epoch():
            self.epoch += 1
            self.index = 0
            self._order = self._permutation(self.epoch)
        ids = self._order[self.index * self.batch_size:(self.index + 1) * self.batch_size]
        self.index += 1
        ids = ids.tensor_split(self.world)[self.rank]
        return {name: t[ids] for name, t in self.tensors.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._permutation(self.epoch)

    def shard(self, rank: int, world: int) -> None:
        if self.batch_size % world:
            raise ConfigError(f"batch_size {self.batch_size} is not divisible by the {world} processes",
                              "make the global batch size a multiple of the number of processes")
        rest = self.n % self.batch_size
        if not self.drop_last and 0 < rest < world:
            raise ConfigError(f"the last batch of each epoch holds {rest} of the {self.n} examples, fewer than the "
                              f"{world} processes, so a process would get none",
                              "drop the short batch (drop_last) or pick a batch size that leaves no remainder "
                              f"or one of at least {world}")
        self.rank, self.world = rank, world
