"""The output layer tied to the input word embeddings: logits = h Eᵀ + b (Press & Wolf 2017; the LM heads
of BERT, XLNet (thesis §2.2) and GPT-1).

The word-embedding table E [V, d] is used twice, by the lookup at the input and by this product at the
output, so autograd sums two dense [V, d] gradients for it. ``F.linear``'s weight gradient is a
transposed view of the [d, V] product, which autograd cannot add into in place: every step then allocates
and writes a third [V, d] tensor (at V = 32,000, d = 256: 33 MB; 15-43 ms of a 490 ms XLNet step on 2
cores, docs/BENCHMARKS.md). :func:`tied_logits` computes the same function with a weight gradient that
is one contiguous [V, d] product, into which autograd adds the lookup's gradient in place.

Shapes: h [..., d], weight [V, d], bias [V] or None -> logits [..., V].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .precision import compute_dtype


class _TiedLogits(torch.autograd.Function):
    """h [n, d] -> h Eᵀ + b [n, V]; gradients: dh = g E, dE = gᵀ h (contiguous [V, d]), db = Σ_n g."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype) -> Tensor:
        ctx.save_for_backward(h, weight)
        ctx.dtype, ctx.has_bias = dtype, bias is not None
        with torch.autocast(h.device.type, enabled=False):
            return F.linear(h.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))

    @staticmethod
    def backward(ctx, g: Tensor):
        h, weight = ctx.saved_tensors
        g = g.to(ctx.dtype)
        grad_h = g.mm(weight.to(ctx.dtype)).to(h.dtype) if ctx.needs_input_grad[0] else None
        grad_w = g.t().mm(h.to(ctx.dtype)).to(weight.dtype) if ctx.needs_input_grad[1] else None
        grad_b = g.sum(0, dtype=weight.dtype) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_h, grad_w, grad_b, None


def tied_logits(h: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(h, weight, bias)`` for a weight that is also an embedding table (module doc).

    Under autocast the product runs in autocast's dtype, as ``F.linear`` would; the gradients of the
    weight and the bias are returned in their own (fp32) dtype."""
    flat = h.reshape(-1, h.shape[-1])
    return _TiedLogits.apply(flat, weight, bias, compute_dtype(h)).view(*h.shape[:-1], weight.shape[0])
