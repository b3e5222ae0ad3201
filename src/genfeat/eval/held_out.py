"""Held-out scoring of any objective: the one loop behind every pretraining method's validation figures.

An objective's ``LossOutput(loss_sum, count, logs)`` is summed over the held-out batches without
gradients into :class:`~genfeat.eval.metrics.Totals`; each method then names its figures from the totals
(``valid_loss``, ``valid_ppl``, ``dev_nll``...), so every loss, accuracy and perplexity is formed the
same way, from one sum and one count.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import Tensor, nn

from ..framework.objective import LossOutput
from ..framework.trainer import to_device
from .metrics import Totals


@torch.no_grad()
def evaluate_objective(model: nn.Module, objective: Callable[[nn.Module, Any], LossOutput], batches: Iterable[Any],
                       limit: int = 0) -> Totals:
    """Sum ``objective(model, batch)`` over the first ``limit`` batches, in eval mode and without gradients.

    The model's train/eval mode is restored afterwards. An objective carrying state across batches
    (a Transformer-XL memory) carries it here too, in batch order.

    Args:
        model: the network the objective scores; batches are moved to the device of its first parameter.
        objective: an :class:`~genfeat.framework.objective.Objective` (any ``(model, batch) -> LossOutput``).
        batches: the held-out batches, in order (read lazily: only the first ``limit`` are drawn).
        limit: how many batches to score (default 0: all).

    Returns:
        :class:`Totals` of this process: ``loss_sum`` and ``count`` summed, ``correct`` the sum of the
        logs' ``correct`` (0 when the objective logs none), ``logs`` the sums of its other logs. Every
        rank scores the batches it is given; a caller that shards them over ranks calls
        :meth:`Totals.all_reduce`.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0 (0: all batches), got {limit}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    totals = Totals()
    try:
        for batch in itertools.islice(batches, limit or None):
            out = objective(model, to_device(batch, device))
            logs = dict(out.logs)
            totals.add(out.loss_sum, out.count, logs.pop("correct", 0.0), logs)
    finally:
        model.train(was_training)
    return totals


def row_batches(tensors: Mapping[str, Tensor], batch_size: int, limit: int = 0) -> Iterator[dict[str, Tensor]]:
    """Consecutive batches of the rows of equally long tensors, those starting within the first ``limit``
    rows (default 0: all). The last batch stays whole, so up to ``batch_size - 1`` rows past ``limit``
    are read: the held-out figures BERT and ELMo have always reported during training.

    Shapes:
        each tensor [n, ...] -> batches {name: [batch_size, ...]}, the last one holding the remainder.
    """
    n = next(iter(tensors.values())).shape[0]
    n = min(n, limit) if limit else n
    for start in range(0, n, batch_size):
        yield {k: v[start:start + batch_size] for k, v in tensors.items()}
