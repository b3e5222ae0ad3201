"""In-place softmax over the last dim, shared by the fused attention core and the fused adaptive softmax.

Both normalise freshly computed score buffers they own, so the pass can reuse them: one exp, no
logsumexp temporaries, and the log-normaliser comes back for the backward pass / log-probabilities.
"""

from __future__ import annotations

import torch
from torch import Tensor


def exp_floored_(x: Tensor, allowed: Tensor | None = None) -> Tensor:
    """exp in place of non-positive log-probabilities, with blocked entries set to exactly 0.

    torch's vectorised CPU exp takes a slow path, 4-10× slower, for arguments whose result is not
    a normal float (below about -87.3); flooring at -87 keeps exp on the fast path (entries that far
    below the row maximum get 1.6e-38 instead of less). Blocked entries are then zeroed (times the
    0/1 factor ``allowed``, broadcast over x): leaving them at 1.6e-38 would put denormal numbers
    into the following matrix products, which Intel CPUs execute many times slower.
    """
    x.clamp_min_(-87.0).exp_()
    return x if allowed is None else x.mul_(allowed)


def softmax_(*parts: Tensor, allowed: Tensor | None = None) -> Tensor:
    """softmax over the last dim of ``parts`` joined end to end, in place; returns the log-normaliser [.., 1].

    Each row spans every part (e.g. an adaptive softmax head whose shortlist and cluster logits
    come from separate products), so the parts need not be copied into one buffer. ``allowed``
    (0/1, broadcast over each part) blocks entries; a row with every entry blocked gets all-zero
    probabilities (and a finite log-normaliser).
    """
    top = parts[0].amax(-1, keepdim=True)
    for x in parts[1:]:
        top = torch.maximum(top, x.amax(-1, keepdim=True))
    total = None
    for x in parts:
        row = exp_floored_(x.sub_(top), allowed).sum(-1, keepdim=True)
        total = row if total is None else total.add_(row)
    total.clamp_min_(torch.finfo(total.dtype).tiny)
    for x in parts:
        x.div_(total)
    return total.log_().add_(top)
