"""Dtype rules shared by the fused blocks: matmuls in autocast's dtype, reductions in at least fp32."""

from __future__ import annotations

import torch
from torch import Tensor


def compute_dtype(x: Tensor) -> torch.dtype:
    """The matmul dtype autocast would pick for ``x`` (its own dtype when autocast is off)."""
    dev = x.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """Scores, softmax and log-normalisers run in fp32 for low-precision dtypes, in ``dtype`` otherwise."""
    return torch.promote_types(dtype, torch.float32)
