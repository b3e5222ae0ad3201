"""Perplexity, bits per character and accuracy, computed exactly from summed losses and counts.

Objectives return ``LossOutput(loss_sum, count, logs)``; averaging per-batch means would weight a
short last batch like a full one, so every figure here is formed once from a total sum and a total
count, accumulated in float64 across batches (:class:`Totals`) and ranks (:meth:`Totals.all_reduce`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import DataError
from ..framework.distributed import all_reduce_sum


def _check_count(count: float) -> None:
    if count <= 0:
        raise DataError("no predicted tokens or examples to score",
                        "give evaluation data with at least two tokens (or one labelled example)")


def perplexity(loss_sum: float, count: float) -> float:
    """exp(loss_sum / count): perplexity of a summed negative log-likelihood in nats."""
    _check_count(count)
    return math.exp(loss_sum / count)


def bits_per_token(loss_sum: float, count: float) -> float:
    """loss_sum / count / ln 2: mean negative log-likelihood in bits (bpc on character data)."""
    _check_count(count)
    return loss_sum / count / math.log(2)


def accuracy(correct: float, count: float) -> float:
    """correct / count, from summed correct predictions and a count."""
    _check_count(count)
    return correct / count


def lm_summary(loss_sum: float, count: float) -> dict[str, float]:
    """``loss`` (nats per predicted token), ``ppl`` and ``bpc`` of a summed loss."""
    _check_count(count)
    return {"loss": loss_sum / count, "ppl": perplexity(loss_sum, count), "bpc": bits_per_token(loss_sum, count)}


@dataclass
class Totals:
    """Exact running sums for LM and classification figures.

    Args:
        loss_sum: summed negative log-likelihood in nats (default 0).
        count: number of predicted tokens or examples (default 0).
        correct: number of correct predictions (default 0; only for accuracy).
    """

    loss_sum: float = 0.0
    count: float = 0.0
    correct: float = 0.0

    def add(self, loss_sum: float | torch.Tensor, count: float | torch.Tensor,
            correct: float | torch.Tensor = 0.0) -> Totals:
        """Add one batch (tensors are read as float64); returns self."""
        self.loss_sum += float(torch.as_tensor(loss_sum, dtype=torch.float64))
        self.count += float(count)
        self.correct += float(correct)
        return self

    def merge(self, other: Totals) -> Totals:
        """Sum of two totals (e.g. two shards of the data)."""
        return Totals(self.loss_sum + other.loss_sum, self.count + other.count, self.correct + other.correct)

    def all_reduce(self) -> Totals:
        """Totals summed over all ranks when torch.distributed is initialised, else a copy."""
        return Totals(*all_reduce_sum([self.loss_sum, self.count, self.correct]))

    def lm(self) -> dict[str, float]:
        """``loss``, ``ppl``, ``bpc``, ``loss_sum`` and ``tokens`` of the totals."""
        return {**lm_summary(self.loss_sum, self.count), "loss_sum": self.loss_sum, "tokens": int(self.count)}

    def accuracy(self) -> float:
        """correct / count."""
        return accuracy(self.correct, self.count)
