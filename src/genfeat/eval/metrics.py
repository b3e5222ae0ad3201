"""Perplexity, bits per character and accuracy, computed exactly from summed losses and counts."""

from __future__ import annotations

import math


def perplexity(loss_sum: float, count: float) -> float:
    """exp(mean negative log-likelihood in nats)."""
    return math.exp(loss_sum / count)


def bits_per_token(loss_sum: float, count: float) -> float:
    """Mean negative log-likelihood in bits (bits per character on character-level data)."""
    return loss_sum / count / math.log(2)


def lm_summary(loss_sum: float, count: float) -> dict[str, float]:
    """``loss`` (nats per predicted token), ``ppl`` and ``bpc`` of a summed loss."""
    if count <= 0:
        raise ValueError("no predicted tokens")
    return {"loss": loss_sum / count, "ppl": perplexity(loss_sum, count), "bpc": bits_per_token(loss_sum, count)}
