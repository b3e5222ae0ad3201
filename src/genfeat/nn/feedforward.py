"""Position-wise feed-forward block of the Transformer layer (Vaswani et al. 2017, Eq. 2; thesis §2.1.2):

FF(x) = W2 · drop(ReLU(W1 x + b1)) + b2, applied to every position independently (BERT and XLNet
use GELU in place of ReLU).

The inner activation [n, d_inner] is the largest tensor a layer keeps for its backward pass (four
times the width of everything else at d_inner = 4 d; with GELU autograd keeps two of them, its
input and its output). With ``recompute=True`` the block keeps only its input and recomputes the
inner activation (one [n, d] × [d, d_inner] product) in the backward pass: 4·d_inner (ReLU) or
8·d_inner (GELU) fewer bytes per position and layer in fp32, for about a sixth more feed-forward
arithmetic. Both paths compute the same function with the same dropout mask for the same random
state.

Shapes: x [..., d] -> [..., d]; inside, positions are flattened to n rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .precision import accumulation_dtype, compute_dtype


def _activate(pre: Tensor, activation: str) -> Tensor:
    """act(pre). ReLU runs in place on the product's own buffer (the product's backward does not
    need it, and ReLU's backward reads ReLU's output); GELU (exact, erf form; ``gelu_tanh``: the tanh
    approximation of GPT-1) needs its input for the backward pass, so it runs out of place."""
    if activation == "relu":
        return F.relu(pre, inplace=True)
    return F.gelu(pre, approximate="tanh" if activation == "gelu_tanh" else "none")


def _inner(x: Tensor, w1: Tensor, b1: Tensor, p_drop: float, keep: Tensor | None,
           activation: str = "relu") -> tuple[Tensor, Tensor | None]:
    """drop(act(x W1^T + b1)) [n, d_inner] and the dropout keep-mask (drawn when ``keep`` is None).

    The mask is applied out of place because the activation's backward reads its own output (ReLU)
    or input (GELU).
    """
    inner = _activate(F.linear(x, w1, b1), activation)
    if p_drop > 0:
        if keep is None:
            keep = torch.empty_like(inner, dtype=torch.bool).bernoulli_(1.0 - p_drop)
        inner = (inner * keep).mul_(1.0 / (1.0 - p_drop))
    return inner, keep


class _RecomputedFeedForward(torch.autograd.Function):
    """W2 · drop(act(W1 x + b1)) + b2 on [n, d] rows, saving x and the keep-mask only.

    Matmuls run in autocast's dtype (``compute_dtype``), bias gradients accumulate in at least fp32.
    """

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, p_drop: float, activation: str):
        dtype = compute_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            xc = x.to(dtype)
            inner, keep = _inner(xc, w1.to(dtype), b1.to(dtype), p_drop, None, activation)
            out = F.linear(inner, w2.to(dtype), b2.to(dtype))
        ctx.save_for_backward(xc, w1, b1, w2, keep)
        ctx.p_drop, ctx.x_dtype, ctx.activation = p_drop, x.dtype, activation
        return out

    @staticmethod
    def backward(ctx, dout):
        xc, w1, b1, w2, keep = ctx.saved_tensors
        dtype, p_drop, activation = xc.dtype, ctx.p_drop, ctx.activation
        acc = accumulation_dtype(dtype)
        w1c = w1.to(dtype)
        pre = F.linear(xc, w1c, b1.to(dtype))
        act = _activate(pre, activation)              # ReLU: in place, so ``pre`` is ``act``
        inner = act if keep is None else (act * keep).mul_(1.0 / (1.0 - p_drop))
        dout = dout.to(dtype)
        dw2 = (dout.t() @ inner).to(w2.dtype) if ctx.needs_input_grad[3] else None
        db2 = dout.sum(0, dtype=acc).to(w2.dtype) if ctx.needs_input_grad[4] else None
        active = act.gt_(0) if activation == "relu" else None   # ReLU's derivative, in place
        del inner, act
        # dinner = dout W2, zero where dropout dropped, scaled like the kept ones; then through act
        dinner = dout @ w2.to(dtype)
        if keep is not None:
            dinner.mul_(keep).mul_(1.0 / (1.0 - p_drop))
        if active is not None:
            dpre = dinner.mul_(active)
        else:
            dpre = torch.ops.aten.gelu_backward(dinner, pre, approximate="tanh" if activation == "gelu_tanh" else "none")
        del pre, active, dinner
        dw1 = (dpre.t() @ xc).to(w1.dtype) if ctx.needs_input_grad[1] else None
        db1 = dpre.sum(0, dtype=acc).to(b1.dtype) if ctx.needs_input_grad[2] else None
        dx = (dpre @ w1c).to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
        return dx, dw1, db1, dw2, db2, None, None


class PositionwiseFeedForward(nn.Module):
    """drop(FF(x)): the block with dropout on its inner activation and on its output.

    Args:
        d_model: width d of x.
        d_inner: inner width.
        dropout: dropout on the inner activation.
        recompute: recompute the inner activation in backward instead of storing it (module doc).
        activation: ``relu`` (default), ``gelu`` (exact) or ``gelu_tanh`` (tanh approximation).
    """

    def __init__(self, d_model: int, d_inner: int, dropout: float, recompute: bool = False,
                 activation: str = "relu"):
        super().__init__()
        if activation not in ("relu", "gelu", "gelu_tanh"):
            raise ValueError(f"activation must be 'relu', 'gelu' or 'gelu_tanh', got {activation!r}")
        self.activation = activation
        self.fc1 = nn.Linear(d_model, d_inner)
        self.fc2 = nn.Linear(d_inner, d_model)
        self.drop = nn.Dropout(dropout)
        self.dropout, self.recompute = dropout, recompute

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        p_drop = self.dropout if self.training else 0.0
        if self.recompute and torch.is_grad_enabled():
            out = _RecomputedFeedForward.apply(flat, self.fc1.weight, self.fc1.bias, self.fc2.weight,
                                               self.fc2.bias, p_drop, self.activation)
        else:
            out = self.fc2(_inner(flat, self.fc1.weight, self.fc1.bias, p_drop, None, self.activation)[0])
        return self.drop(out).view(*x.shape[:-1], -1)
