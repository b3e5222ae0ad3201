"""Tiny Transformer-XL models and data shared by the Transformer-XL tests (CPU and CUDA)."""

from __future__ import annotations

import math
from collections import Counter
from typing import get_args, get_type_hints

import torch

from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

ATTN = ["relative", "shaw", "absolute_sinusoid", "absolute_learned"]
"""Every ``attn_type`` of Table 2.6, written out so a test can check it against the config."""


DEBUG_MAX_PPL = 5815
"""Valid perplexity recipes/transformer_xl/debug.yaml must beat: between trained (seeds 0-4: 5,743-5,771)
and untrained (5,864); measurements in test_recipe_transformer_xl.py."""


def attn_types() -> tuple[str, ...]:
    """The values the config's ``attn_type`` Literal allows."""
    return get_args(get_type_hints(TransformerXLConfig)["attn_type"])


def tiny(scale: float = 0.3, **kw) -> TransformerXLLMHeadModel:
    """A seeded 2-layer LM in eval mode; ``scale`` adds that much N(0, 1) noise to every weight.

    The 0.02-std init gives nearly uniform predictions (loss ~ log V whatever the model computes);
    larger weights make context, position and precision matter.
    """
    base = dict(n_token=97, cutoffs=[20, 50], div_val=2, d_model=32, n_head=2, d_head=16, d_inner=64, n_layer=2,
                mem_len=24, dropout=0.0, max_klen=64)
    base.update(kw)
    torch.manual_seed(0)
    model = TransformerXLLMHeadModel(TransformerXLConfig(**base)).eval()
    if scale:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(scale * torch.randn_like(p))
    return model


def data(b=3, t=24, v=97, seed=1):
    """Random inputs and targets [b, t]."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, v, (b, t), generator=g), torch.randint(0, v, (b, t), generator=g)


def periodic(b=4, t=12, period=6, alphabet=3, segments=2, seed=0):
    """Rows repeating a random pattern of ``period`` tokens drawn from ``alphabet`` ids below 20.

    Tokens repeat inside a pattern with different successors, so the next token is ambiguous given
    the current one (conditional entropy > 0) but determined by the token ``period`` steps back.
    Returns inputs and targets [b, segments * t] and the conditional entropy H(y | x) in nats of
    the last segment, the best loss a model that looks only at the current token can reach.
    """
    g = torch.Generator().manual_seed(seed)
    symbols = torch.randperm(20, generator=g)[:alphabet]
    patterns = symbols[torch.randint(0, alphabet, (b, period), generator=g)]
    n = segments * t + 1
    seq = patterns.repeat(1, n // period + 1)[:, :n]
    x, y = seq[:, :-1], seq[:, 1:]
    last = list(zip(x[:, -t:].flatten().tolist(), y[:, -t:].flatten().tolist()))
    pairs, firsts = Counter(last), Counter(a for a, _ in last)
    entropy = -sum(c / len(last) * math.log(c / firsts[a]) for (a, _), c in pairs.items())
    return x, y, entropy


@torch.no_grad()
def bf16_deviation(model: TransformerXLLMHeadModel, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """How far bf16 autocast log-probabilities are from fp32, next to how far a wrong computation is.

    Two segments, the second attending over the memory of the first. Returns the mean absolute
    difference per token of bf16 from fp32 (``bf16``), of fp32 without the memory from fp32
    (``no_memory``: what a computation that loses the context would be off by), and the fp32 mean
    loss (``loss``; the uniform distribution gives log V).
    """
    device = next(model.parameters()).device
    x, y = x.to(device), y.to(device)
    half = x.shape[1] // 2

    def log_probs(mems=True):
        first = model(x[:, :half], labels=y[:, :half])
        second = model(x[:, half:], mems=first.mems if mems else None, labels=y[:, half:])
        return torch.cat([first.target_log_probs, second.target_log_probs], 1)

    ref = log_probs()
    with torch.autocast(device.type, dtype=torch.bfloat16):
        low = log_probs()
    assert low.dtype == torch.float32, "log-probabilities are accumulated in fp32"
    return {"bf16": float((low - ref).abs().mean()), "no_memory": float((log_probs(mems=False) - ref).abs().mean()),
            "loss": float(-ref.mean())}
