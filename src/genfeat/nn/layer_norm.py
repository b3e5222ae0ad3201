"""Layer normalisation (Ba et al. 2016) whose backward pass reads its output instead of its input.

y = gamma * xhat + beta with xhat = (x - mean(x)) * rstd, rstd = 1 / sqrt(var(x) + eps), over the
last axis. Autograd's layer norm keeps its input x for the backward pass. In a post-LN Transformer
layer the output y is kept anyway (it is the next sub-layer's input, which that sub-layer's first
product keeps), so this module keeps y and the per-row rstd instead and recovers
xhat = (y - beta) / gamma in backward (as the "memory-efficient" layer norms of Apex do): one
[rows, d] tensor less per normalisation. The gradients are then

    dgamma = sum_rows(dy * xhat),  dbeta = sum_rows(dy),
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * gamma.

Recovering xhat divides by gamma, so when some |gamma| is below ``min_gain`` the module falls back
to autograd's layer norm (which keeps x): gradients are never computed from a division by ~0. It
also falls back under autocast (which runs layer norm in fp32 and would keep the fp32 output in
place of a narrower input) and without gradients.

Shapes: x [..., d] -> [..., d].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class _OutputLayerNorm(torch.autograd.Function):
    """layer_norm(x) over the last axis, saving the output, gamma, beta and rstd."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float):
        d = x.shape[-1]
        y, _, rstd = torch.native_layer_norm(x, (d,), weight, bias, eps)
        ctx.save_for_backward(y, weight, bias, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        y, weight, bias, rstd = ctx.saved_tensors
        xhat = (y - bias).div_(weight)
        # aten's fused backward with xhat as the input, mean 0 and rstd 1 gives dgamma, dbeta and
        # dx / rstd (its xhat is then the recovered one); one scaling by the true rstd finishes dx
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            dy.contiguous(), xhat, (y.shape[-1],), torch.zeros_like(rstd), torch.ones_like(rstd), weight, bias,
            [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]])
        return dx.mul_(rstd) if dx is not None else None, dw, db, None


class OutputSavingLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` (same parameters, state-dict names and forward values) that keeps its output,
    not its input, for the backward pass (module doc). Elementwise affine only.

    Args:
        normalized_shape: width d of the last axis.
        eps: added to the variance.
        min_gain: below this |gamma| anywhere the module keeps its input like ``nn.LayerNorm``.
    """

    def __init__(self, normalized_shape: int, eps: float = 1e-5, min_gain: float = 1e-3):
        super().__init__(normalized_shape, eps=eps)
        self.min_gain = min_gain

    def forward(self, x: Tensor) -> Tensor:
        keep_input = (not torch.is_grad_enabled() or torch.is_autocast_enabled(x.device.type)
                      or bool((self.weight.abs() < self.min_gain).any()))
        if keep_input:
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return _OutputLayerNorm.apply(x, self.weight, self.bias, self.eps)
