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
from ..errors import DataError
from .metrics import Totals


@torch.no_grad()
def score_lm(model: nn.Module, tokens: Tensor, *, tgt_len: int, mem_len: int, clamp_len: int | None = None,
             batch_size: int = 1) -> Tensor:
    """Per-token negative log-likelihoods in nats, in stream order.

    Args:
        model: a Transformer-XL LM (``model(x, mems=, labels=, mem_len=, clamp_len=)``).
        tokens: 1-D token ids.
        tgt_len: segment length.
        mem_len: memory length (0: each segment sees only itself).
        clamp_len: largest relative distance (default None: the model's).
        batch_size: contiguous streams (default 1: the data as one stream).
    Shapes:
        tokens [L] -> [b, L // b - 1] (b = 1: [1, L - 1]).
    """
    if tgt_len < 1 or mem_len < 0 or batch_size < 1:
        raise ValueError(f"tgt_len {tgt_len} and batch_size {batch_size} must be >= 1 and mem_len {mem_len} >= 0")
    if tokens.numel() // batch_size < 2:
        raise DataError(f"{tokens.numel()} tokens in {batch_size} stream(s) leave nothing to predict",
                        "score at least two tokens per stream (fewer streams or more data)")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    mems, parts = None, []
    cache = model.new_cache() if mem_len > 0 else None  # fast cached evaluation: no re-projection of the memory
    for batch in iter_lm_segments(tokens, batch_size, tgt_len):
        # ext_len 0: these segments feed no token twice, so the memory must keep every position
        out = model(batch.input.to(device), mems=mems, labels=batch.target.to(device), mem_len=mem_len,
                    clamp_len=clamp_len, ext_len=0, cache=cache)
        mems = out.mems if mem_len > 0 else None
        parts.append(-out.target_log_probs.float().cpu())
    model.train(was_training)
    return torch.cat(parts, dim=1)


def token_losses(model: nn.Module, tokens: Tensor, context_len: int, *, seg_len: int = 16,
                 clamp_len: int | None = None, batch_size: int = 1) -> Tensor:
    """Per-token losses with context length ``context_len`` (the l_i(c, t) of RECL, §2.1.4).

    Context length c is realised with the memory: segments of ``tgt = min(seg_len, c)`` tokens and a
    memory of ``c - tgt`` positions, so once the memory is full every prediction attends over
    between c - tgt + 1 and c tokens (a sliding window of exactly c would need one forward pass per
    token; this costs one pass over the data per context length, and the first c - tgt tokens of
    each stream see less context). The same positions are scored for every c, so losses at
    different c are aligned token by token.

    Args:
        model: a Transformer-XL LM.
        tokens: 1-D token ids.
        context_len: c, at least 1.
        seg_len: segment length (default 16; smaller makes the window closer to exactly c).
        clamp_len: largest relative distance (default None: the model's).
        batch_size: contiguous streams (default 1).
    Shapes:
        tokens [L] -> [b * (L // b - 1)] flattened stream by stream.
    """
    if context_len < 1:
        raise ValueError(f"context length must be >= 1, got {context_len}")
    tgt = min(seg_len, context_len)
    nll = score_lm(model, tokens, tgt_len=tgt, mem_len=context_len - tgt, clamp_len=clamp_len,
                   batch_size=batch_size)
    return nll.flatten()


def evaluate_lm(model: nn.Module, tokens: Tensor, *, tgt_len: int, mem_len: int, clamp_len: int | None = None,
                batch_size: int = 1) -> dict[str, float]:
    """Score ``tokens`` with memory; see :func:`score_lm` for the arguments.

    Returns:
        ``loss`` (mean nats per predicted token), ``ppl``, ``bpc``, ``tokens`` (predicted),
        ``loss_sum`` and ``seconds``.
    """
    t0 = time.time()
    nll = score_lm(model, tokens, tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len, batch_size=batch_size)
    totals = Totals().add(nll.double().sum(), nll.numel())
    return {**totals.lm(), "seconds": time.time() - t0}
