"""Language-model evaluation with memory (thesis §2.1 "Evaluation Speed"; Table 2.6 eval lengths).

The data are scored as ``batch_size`` contiguous streams (one by default), every token after the
first of each stream is predicted once, and the memory carries context across segments, so the
attention length at evaluation is ``tgt_len + mem_len`` and may differ from training.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from ..data.lm import iter_lm_segments
from .metrics import lm_summary


@torch.no_grad()
def score_lm(model: nn.Module, tokens: Tensor, *, tgt_len: int, mem_len: int, clamp_len: int | None = None,
             batch_size: int = 1) -> Tensor:
    """Per-token negative log-likelihoods, [b, L-1] in stream order.

    Args:
        model: a Transformer-XL LM.
        tokens: 1-D token ids.
        tgt_len: segment length.
        mem_len: memory length (0: each segment sees only itself).
        clamp_len: largest relative distance (None: the model's).
        batch_size: contiguous streams (1: the data as one stream).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    mems, parts = None, []
    for batch in iter_lm_segments(tokens, batch_size, tgt_len):
        out = model(batch.input.to(device), mems=mems, labels=batch.target.to(device), mem_len=mem_len,
                    clamp_len=clamp_len)
        mems = out.mems if mem_len > 0 else None
        parts.append(-out.target_log_probs.float().cpu())
    model.train(was_training)
    return torch.cat(parts, dim=1)


def evaluate_lm(model: nn.Module, tokens: Tensor, *, tgt_len: int, mem_len: int, clamp_len: int | None = None,
                batch_size: int = 1) -> dict[str, float]:
    """Mean loss (nats per predicted token), ppl, bpc, token count, loss sum and seconds."""
    t0 = time.time()
    nll = score_lm(model, tokens, tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len, batch_size=batch_size)
    loss_sum = float(nll.double().sum())
    count = nll.numel()
    return {**lm_summary(loss_sum, count), "loss_sum": loss_sum, "tokens": count, "seconds": time.time() - t0}
