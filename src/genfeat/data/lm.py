"""Language-model batching as in the original Transformer-XL (thesis §2.1, "Segment-Level Recurrence").

The corpus is cut into ``batch_size`` contiguous streams (row r holds tokens
[r*L, (r+1)*L) of the corpus), and each stream into consecutive segments of ``tgt_len`` tokens, so
the memory of segment s is exactly the context of segment s+1. For the no-recurrence ablation
:class:`LMShuffledStream` draws segments in random order.

Axes: b batch (streams), t segment length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch import Tensor

from ..errors import ConfigError
from ..framework.stream import derived_seed


@dataclass
class LMBatch:
    input: Tensor
    """[b, t] token ids (with ext_len > 0: [b, ext_len + t], the first ext_len scored by nobody)."""
    target: Tensor
    """[b, t'] next-token ids, aligned with the last t' inputs."""
    new_epoch: bool = False
    """True when memory must not carry over from the previous batch."""


def _streams(tokens: Tensor, batch_size: int) -> Tensor:
    """[b, L]: the corpus as b contiguous rows (the remainder is dropped, as in the original)."""
    n = tokens.numel() // batch_size
    if n < 2:
        raise ConfigError(f"{tokens.numel()} tokens are too few for {batch_size} streams",
                          "use a smaller batch size or a larger corpus")
    return tokens[: n * batch_size].view(batch_size, n)


class LMOrderedStream:
    """Endless, resumable, shardable iterator over consecutive segments (the Stream protocol).

    Args:
        tokens: 1-D token ids of the training split.
        batch_size: global number of streams b.
        tgt_len: tokens predicted per segment t.
        ext_len: previous tokens re-fed as extended context without loss (default 0).
        drop_last_partial: skip each epoch's last segment when it is shorter than ``tgt_len``
            (default False: it is used, as in the original).
    """

    def __init__(self, tokens: Tensor, batch_size: int, tgt_len: int, ext_len: int = 0, *,
                 drop_last_partial: bool = False):
        if batch_size < 1 or tgt_len < 1 or ext_len < 0:
            raise ConfigError(f"batch_size={batch_size}, tgt_len={tgt_len}, ext_len={ext_len} are out of range",
                              "batch_size and tgt_len must be >= 1 and ext_len >= 0")
        self.data = _streams(tokens, batch_size)
        self.batch_size, self.tgt_len, self.ext_len = batch_size, tgt_len, ext_len
        steps = self.data.shape[1] - 1
        self.n_batches = steps // tgt_len if drop_last_partial else (steps + tgt_len - 1) // tgt_len
        if self.n_batches == 0:
            raise ConfigError(f"streams of {steps + 1} tokens hold no full segment of {tgt_len}",
                              "use a shorter tgt_len, a smaller batch size, or drop_last_partial=False")
        self.epoch, self.index = 0, 0
        self.rows = slice(0, batch_size)

    def __iter__(self) -> Iterator[LMBatch]:
        return self

    def __next__(self) -> LMBatch:
        if self.index >= self.n_batches:
            self.epoch += 1
            self.index = 0
        start = self.index * self.tgt_len
        end = min(start + self.tgt_len, self.data.shape[1] - 1)
        begin = max(0, start - self.ext_len)
        rows = self.data[self.rows]
        batch = LMBatch(rows[:, begin:end].long(), rows[:, start + 1:end + 1].long(), new_epoch=self.index == 0)
        self.index += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])

    def shard(self, rank: int, world: int) -> None:
        if self.batch_size % world:
            raise ConfigError(f"batch_size {self.batch_size} is not divisible by the {world} processes",
                              "make the global batch size a multiple of the number of processes")
        per = self.batch_size // world
        self.rows = slice(rank * per, (rank + 1) * per)


class LMShuffledStream(LMOrderedStream):
    """Segments in a seeded random order each epoch; every batch starts without memory.

    Used for the no-recurrence ablation: consecutive batches are unrelated, so carrying memory
    across them would be wrong (``new_epoch`` is True on every batch).
    """

    def __init__(self, tokens: Tensor, batch_size: int, tgt_len: int, seed: int = 0, *,
                 drop_last_partial: bool = False):
        super().__init__(tokens, batch_size, tgt_len, drop_last_partial=drop_last_partial)
        self.seed = seed
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> Tensor:
        return torch.randperm(self.n_batches, generator=torch.Generator().manual_seed(derived_seed(self.seed, epoch)))

    def __next__(self) -> LMBatch:
        if self.index >= self.n_batches:
            self.epoch += 1
            self.index = 0
            self._order = self._permutation(self.epoch)
        saved = self.index
        self.index = int(self._order[saved])
        batch = super().__next__()
        self.index = saved + 1
        batch.new_epoch = True
        return batch

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._order = self._permutation(self.epoch)


def iter_lm_segments(tokens: Tensor, batch_size: int, tgt_len: int) -> Iterator[LMBatch]:
    """Every token after the first of each stream, exactly once as a target, in order.

    With ``batch_size`` 1 the data is one stream and every token after the first is predicted;
    with b > 1 the corpus is cut into b rows (dropping the remainder) like the original evaluation.
    """
    data = _streams(tokens, batch_size) if batch_size > 1 else tokens.view(1, -1)
    length = data.shape[1] - 1
    for start in range(0, length, tgt_len):
        end = min(start + tgt_len, length)
        yield LMBatch(data[:, start:end].long(), data[:, start + 1:end + 1].long(), new_epoch=start == 0)
