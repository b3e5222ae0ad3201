"""Sampling from a Transformer-XL language model with memory reuse (thesis §2.1, "Evaluation Speed").

The context is fed once; afterwards each step feeds only the newest token and attends over the
cached memory, so a step costs O(mem_len) instead of recomputing the whole history.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def check_sampling(context: Tensor, top_k: int, temperature: float, length: int = 0) -> None:
    """Raise ValueError for an empty context, top_k < 1, a temperature <= 0 or a negative length."""
    if context.numel() == 0:
        raise ValueError("generation needs a non-empty context")
    if top_k < 1 or not temperature > 0:   # NaN too
        raise ValueError("top_k must be >= 1 and temperature > 0")
    if length < 0:
        raise ValueError(f"generation needs a length of 0 or more new tokens, got {length}")


def sample_top_k(logits: Tensor, top_k: int, temperature: float, generator: torch.Generator | None) -> Tensor:
    """Draw one token per row among the ``top_k`` largest of ``logits / temperature`` (top_k 1: greedy).

    Shapes: logits (or log-probabilities) [b, V] -> [b, 1] ids.
    """
    top, idx = logits.float().topk(min(top_k, logits.shape[-1]), dim=-1)
    gap = top - top[:, :1]                      # <= 0, the largest 0: dividing cannot overflow to inf
    scaled = torch.where(gap == 0, 0.0, gap / temperature)       # 0 / 0 where the temperature underflows fp32
    scaled = scaled.masked_fill(top == float("-inf"), float("-inf"))   # excluded ids stay out at temperature inf
    return idx.gather(-1, torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=generator))


def left_padding(attention_mask: Tensor, context: Tensor) -> Tensor:
    """The padding of a left-padded batch of prompts, after checking ``attention_mask``.

    Shapes: attention_mask and context [t] or [b, t] (the same) -> [b, t] bool, True at padding.
    Raises ValueError unless the mask has the context's shape, holds only 0 and 1, and every row is
    zeros and then ones with at least one 1 (new tokens follow the last column).
    """
    if attention_mask.shape != context.shape or not ((attention_mask == 0) | (attention_mask == 1)).all():
        raise ValueError(f"generate's attention_mask must be 0/1 of the context's shape {tuple(context.shape)}, "
                         f"got {tuple(attention_mask.shape)}")
    keep = attention_mask.reshape(-1, context.shape[-1]).long()
    if (keep[:, 1:] < keep[:, :-1]).any() or not keep[:, -1].all():
        raise ValueError("generate needs prompts padded on the left (attention_mask 0 ... 0 1 ... 1 in every row, "
                         "at least one 1): the new tokens follow the last column")
    return keep == 0


@torch.no_grad()
def generate(model: nn.Module, context: Tensor, length: int, *, top_k: int = 40, temperature: float = 1.0,
             generator: torch.Generator | None = None, mem_len: int | None = None,
             attention_mask: Tensor | None = None) -> Tensor:
    """Top-k sampling continuing ``context``.

    Args:
        model: a Transformer-XL LM (``model(ids, mems=..., return_log_probs=True)``).
        context: [t] or [b, t] token ids (at least one token).
        length: number of tokens to sample.
        top_k: sample among the k most likely tokens (default 40; 1 is greedy).
        temperature: divide log-probabilities by this before sampling (default 1.0).
        generator: RNG for reproducible samples.
        mem_len: memory length while sampling (default: the model's ``mem_len``, or ``max_klen``
            for a model trained without memory, so samples still see their context).
        attention_mask: [b, t] ([t] for a [t] context) 1 at prompt tokens, 0 at the padding before
            them, for prompts of different lengths in one batch (default all 1): padding is attended by
            no token, so each row samples what its prompt alone would (greedy: the same tokens, up to
            floating-point ties).
    Returns:
        [length] or [b, length] sampled ids (the context is not repeated).
    Raises:
        ValueError: an empty context, a bad top_k / temperature / length, an attention_mask as
            left_padding refuses.
    """
    check_sampling(context, top_k, temperature, length)
    was_training = model.training
    model.eval()
    squeeze = context.dim() == 1
    ids = context[None] if squeeze else context
    ids = ids.to(next(model.parameters()).device)
    pad = None if attention_mask is None else left_padding(attention_mask, context).to(ids.device)
    if mem_len is None:
        mem_len = model.config.mem_len or model.config.max_klen
    # Feed all but the last context token to fill the memory; the last one starts sampling.
    # Nothing is fed twice, so the memory keeps every position (ext_len 0, whatever the model trained with).
    mems, cache = None, model.new_cache() if mem_len > 0 else None
    with torch.no_grad():
        fed = None if pad is None else pad[:, :-1]        # the padding among the positions fed so far
        n = ids.shape[1] - 1
        # one segment, but a learned-position model reads at most max_klen tokens a segment: several, with memory,
        # cut from the right, so that every row of a left-padded batch has the boundaries its prompt alone has
        step = model.config.max_klen if model.config.attn_type == "absolute_learned" else max(n, 1)
        edges = sorted({0, *range(n % step, n + 1, step)})
        for start, end in zip(edges, edges[1:]):
            m = mems[0].shape[1] if mems else 0
            keys = None if fed is None else fed[:, start - m:end]
            mems = model(ids[:, start:end], mems=mems, mem_len=mem_len, ext_len=0, cache=cache,
                         key_padding=keys).mems
        token = ids[:, -1:]
        out = []
        for _ in range(length):
            if fed is not None:
                # keys [memory, token]: the memory holds the last m positions fed; the token is never padding
                m = mems[0].shape[1] if mems else 0
                fed = torch.cat([fed, fed.new_zeros(fed.shape[0], 1)], dim=1)[:, -(m + 1):]
            step = model(token, mems=mems, mem_len=mem_len, ext_len=0, return_log_probs=True, cache=cache,
                         key_padding=fed)
            mems = step.mems
            token = sample_top_k(step.log_probs[:, -1], top_k, temperature, generator)
            out.append(token)
    model.train(was_training)
    result = torch.cat(out, dim=1) if out else ids.new_zeros((ids.shape[0], 0))
    return result[0] if squeeze else result
