"""Relative multi-head attention of Transformer-XL (thesis §2.1.3, Eq. 2.3) and its relatives.

A^rel_{i,j} = q_i^T W_{k,E} E_{x_j}   (a) content
            + q_i^T W_{k,R} R_{i-j}   (b) content-dependent position bias
            + u^T W_{k,E} E_{x_j}     (c) global content bias
            + v^T W_{k,R} R_{i-j}     (d) global position bias
computed as (q + u)·k_j + shift((q + v)·r), where r are the projected sinusoid encodings of the
distances k-1, ..., 0 and ``shift`` realigns the [query, distance] scores to [query, key] in linear
cost ("Efficient Computation", §2.1.3).

The block serves XLNet too: queries may come from a separate stream (two-stream attention), the
mask may be any [t, k] or [b, t, k] boolean (True = blocked), and relative segment terms
(q_i + s_bias)·s_{ij} can be added through ``seg_mat``/``seg_embed``.

Axes: b batch, t query length, m memory length, k = m + t key length, h heads, e head width, d model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def sinusoid(pos: Tensor, d: int) -> Tensor:
    """Sinusoid encodings [len(pos), d] of (possibly fractional) positions (Vaswani et al. 2017)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, device=pos.device, dtype=torch.float32) / d))
    angles = pos.float()[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def rel_shift(x: Tensor) -> Tensor:
    """Realign scores indexed by distance to scores indexed by key (linear cost).

    Args:
        x: [..., t, k] where column c of row i holds the score for distance k - 1 - c.
    Returns:
        [..., t, k] where column j of row i holds the score for distance (i + k - t) - j.
        Entries with j beyond the query's own position hold garbage and must be masked.
    """
    *lead, t, k = x.shape
    padded = F.pad(x, (1, 0))  # [..., t, k + 1]
    return padded.view(*lead, k + 1, t)[..., 1:, :].reshape(*lead, t, k)


def causal_mask(t: int, m: int, device, same_length: bool = False, mem_len: int | None = None) -> Tensor:
    """[t, m + t] boolean mask (True = blocked) for segment queries over [memory, segment] keys.

    Query i may attend keys j <= m + i. With ``same_length`` every query sees the same number of
    keys (at most ``mem_len`` before itself and its segment), as in the original evaluation.
    """
    k = m + t
    ones = torch.ones(t, k, dtype=torch.bool, device=device)
    mask = torch.triu(ones, diagonal=1 + m)
    if same_length:
        keep = mem_len if mem_len is not None else m
        shift = t - (k - keep) if k - keep > 0 else t
        mask = mask | torch.tril(ones, diagonal=-shift)
    return mask


class RelativeMultiHeadAttention(nn.Module):
    """Multi-head attention with Transformer-XL relative positions (or Shaw et al. 2018 variants).

    Args:
        d_model: model width d.
        n_head: heads h.
        d_head: head width e.
        dropatt: dropout on attention probabilities (default 0).
        kind: ``relative`` (Dai et al., Eq. 2.3) or ``shaw`` (learned per-distance key
            embeddings plus bias, no global content bias; Shaw et al. 2018).
        max_dist: number of learned distances for ``shaw``.
    The global biases u (``r_w_bias``) and v (``r_r_bias``) are passed in at call time so they can
    be shared across layers or owned per layer.
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropatt: float = 0.0, kind: str = "relative",
                 max_dist: int = 0):
        super().__init__()
        self.n_head, self.d_head, self.kind = n_head, d_head, kind
        self.scale = 1.0 / math.sqrt(d_head)
        self.qkv = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.out = nn.Linear(n_head * d_head, d_model, bias=False)
        self.dropatt = nn.Dropout(dropatt)
        if kind == "relative":
            self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)  # W_{k,R}
        elif kind == "shaw":
            self.r_emb = nn.Parameter(torch.empty(max_dist, n_head, d_head))
            self.r_bias = nn.Parameter(torch.zeros(max_dist, n_head))
        else:
            raise ValueError(f"unknown relative attention kind {kind!r}")

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.n_head, self.d_head).transpose(1, 2)  # [b, h, n, e]

    def forward(self, content: Tensor, pos: Tensor, mask: Tensor | None, r_w_bias: Tensor | None = None,
                r_r_bias: Tensor | None = None, query: Tensor | None = None,
                seg_mat: Tensor | None = None, seg_embed: Tensor | None = None,
                r_s_bias: Tensor | None = None) -> Tensor:
        """Attend from the last t positions (or from ``query``) over all k content positions.

        Args:
            content: [b, k, d] memory followed by the current segment.
            pos: ``relative``: sinusoid encodings [k, d] of distances k-1 .. 0 (clamped);
                ``shaw``: long tensor [k] of distances k-1 .. 0 clamped to max_dist - 1.
            mask: bool [t, k] or [b, t, k], True = blocked; None = attend everywhere.
            r_w_bias, r_r_bias: u and v, [h, e] (required for ``relative``).
            query: [b, t, d] a separate query stream (XLNet's query stream); default: the last t
                content positions.
            seg_mat: [b, t, k, 2] one-hot "same segment / different segment" (XLNet).
            seg_embed: [2, h, e] segment encodings s; r_s_bias: [h, e] segment bias.
        Returns:
            [b, t, d] attention output (before the residual connection).
        """
        b, klen, _ = content.shape
        hd = self.n_head * self.d_head
        # Keys and values over memory + segment, queries only where they are asked for.
        k, v = (self._split(x) for x in F.linear(content, self.qkv.weight[hd:]).chunk(2, dim=-1))
        if query is None:
            query = content[:, klen - (mask.shape[-2] if mask is not None else klen):]
        q = self._split(F.linear(query, self.qkv.weight[:hd]))
        t = q.shape[2]
        if self.kind == "relative":
            r = self.r_net(pos).view(klen, self.n_head, self.d_head).permute(1, 2, 0)  # [h, e, k]
            ac = torch.matmul(q + r_w_bias[:, None, :], k.transpose(-1, -2))          # (a) + (c): [b, h, t, k]
            bd = rel_shift(torch.matmul(q + r_r_bias[:, None, :], r))                 # (b) + (d): [b, h, t, k]
        else:
            r = self.r_emb[pos].permute(1, 2, 0)                                       # [h, e, k]
            ac = torch.matmul(q, k.transpose(-1, -2))
            bd = rel_shift(torch.matmul(q, r) + self.r_bias[pos].t()[None, :, None, :])
        # In place: matmul outputs are not saved for backward, so the sum can reuse ac's storage.
        score = ac.add_(bd)
        if seg_mat is not None:
            ef = torch.einsum("bhte,she->bhts", q + r_s_bias[:, None, :], seg_embed)    # [b, h, t, 2]
            score = score + torch.einsum("bhts,btks->bhtk", ef, seg_mat.to(ef.dtype))
        score = score.mul_(self.scale)
        if mask is not None:
            score = score.masked_fill_(mask if mask.dim() == 2 else mask[:, None], torch.finfo(score.dtype).min)
        prob = torch.softmax(score, dim=-1, dtype=torch.float32).to(v.dtype)
        if self.dropatt.p > 0:
            prob = self.dropatt(prob)
        out = torch.matmul(prob, v).transpose(1, 2).reshape(b, t, self.n_head * self.d_head)
        return self.out(out)


class AbsoluteMultiHeadAttention(nn.Module):
    """Standard multi-head attention over [memory, segment] (the absolute-encoding ablations).

    Shapes: content [b, k, d], mask [t, k] bool (True = blocked) -> [b, t, d].
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropatt: float = 0.0):
        super().__init__()
        self.n_head, self.d_head, self.dropatt = n_head, d_head, dropatt
        self.qkv = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.out = nn.Linear(n_head * d_head, d_model, bias=False)

    def forward(self, content: Tensor, mask: Tensor, t: int) -> Tensor:
        b, klen, _ = content.shape
        q, k, v = (x.view(b, klen, self.n_head, self.d_head).transpose(1, 2)
                   for x in self.qkv(content).chunk(3, dim=-1))
        q = q[:, :, -t:]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask,
                                             dropout_p=self.dropatt if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(b, t, self.n_head * self.d_head))
