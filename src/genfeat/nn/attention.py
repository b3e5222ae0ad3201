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
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .precision import accumulation_dtype
from .softmax import exp_floored_, softmax_


def sinusoid(pos: Tensor, d: int) -> Tensor:
    """Sinusoid encodings [len(pos), d] of (possibly fractional) positions (Vaswani et al. 2017)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, device=pos.device, dtype=torch.float32) / d))
    angles = pos.float()[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def rel_shift(scores: Tensor, klen: int, offset: int) -> Tensor:
    """Realign scores indexed by distance to scores indexed by key, as a strided view (no copy).

    Row i of ``scores`` holds the score of query i for distance ``d0 - c`` in column c; query i sits
    at absolute position ``m + i`` and key j at j, so (i, j) needs column ``offset - i + j`` with
    ``offset = d0 - m``. Moving one row down moves one column left, so the whole realignment is the
    view with row stride P - 1 ("Efficient Computation", §2.1.3, without the padded copy).

    Args:
        scores: [..., t, P] contiguous in its last two dims.
        klen: number of keys k.
        offset: ``d0 - m``; ``t - 1`` for causal attention over distances k-1 .. 0.
    Returns:
        [..., t, k] view. Entries whose distance is outside the encoded range (for causal attention,
        keys after the query) read neighbouring rows and must be masked.
    """
    *lead, t, p = scores.shape
    if offset < t - 1 or (t - 1) * (p - 1) + klen - 1 + offset > t * p - 1:
        raise ValueError(f"distances in scores [.., {t}, {p}] do not cover {klen} keys at offset {offset}")
    strides = (*scores.stride()[:-2], p - 1, 1)
    return scores.as_strided((*lead, t, klen), strides, scores.storage_offset() + offset)


def _mask_terms(mask: Tensor | None, dtype: torch.dtype) -> tuple[Tensor | None, Tensor | None]:
    """A boolean mask (True = blocked) as an additive term (0 / -1e30) and a factor (1 / 0) in ``dtype``.

    Broadcast arithmetic with a float [t, k] mask is about ten times faster on CPU than
    ``masked_fill_`` with a broadcast boolean one (measured: 0.1 vs 1 ms per 1M scores, 1 thread).
    """
    if mask is None:
        return None, None
    blocked = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, -1e30)
    return blocked, (~mask).to(dtype)


def _is_prefix(h: Tensor, x: Tensor) -> bool:
    """Whether h [b, n, d] is the view x[:, :n] of x [b, t, d] (n <= t)."""
    return (h.dim() == x.dim() == 3 and h.shape[0] == x.shape[0] and h.shape[1] <= x.shape[1]
            and h.shape[2] == x.shape[2] and h.data_ptr() == x.data_ptr() and h.stride() == x.stride())


def _distance_index(rows: Tensor, klen: int, offset: int) -> Tensor:
    """Column ``offset - p + j`` [b, t, k] of the distance-indexed scores that query row at position p
    (``rows`` [b, t]) needs for key j: ``rel_shift`` for queries at arbitrary positions."""
    return (offset - rows)[:, :, None] + torch.arange(klen, device=rows.device)


def _rel_scores(qu: Tensor, qw: Tensor, k: Tensor, r: Tensor, pos_bias: Tensor | None, bias: Tensor | None,
                blocked: Tensor | None, offset: int, scale: float, rows: Tensor | None = None) -> Tensor:
    """Masked, scaled scores [h, b, t, k] of Eq. 2.3 in at least fp32 (qu, qw already scaled).

    ``blocked`` is the additive mask of ``_mask_terms``: blocked entries end at about -1e30.
    With ``rows`` ([b, t], the queries' positions when they are not the last t in order) distances
    are realigned by a gather (``_distance_index``) instead of the strided view."""
    h, b, t, e = qw.shape
    acc = accumulation_dtype(k.dtype)
    score = torch.matmul(qu, k.transpose(-1, -2)).to(acc)                      # (a) + (c)
    bd = torch.matmul(qw.reshape(h, b * t, e), r.transpose(1, 2)).to(acc)       # (b) + (d) by distance: [h, b*t, P]
    if pos_bias is not None:
        bd.add_(pos_bias[:, None, :], alpha=scale)
    bd = bd.view(h, b, t, -1)
    if rows is None:
        score.add_(rel_shift(bd, k.shape[2], offset))
    else:
        score.add_(bd.gather(3, _distance_index(rows, k.shape[2], offset).expand(h, -1, -1, -1)))
    if bias is not None:
        score.add_(bias, alpha=scale)
    if blocked is not None:
        score.add_(blocked)
    return score


class _RelativeAttentionCore(torch.autograd.Function):
    """softmax(scale * (A^rel + bias), masked) · v with a hand-written backward (Eq. 2.3).

    Keys and values come stacked as one kv [2, h, b, k, e] so that their gradient is written
    into one buffer (separate inputs would be stacked again by autograd's unbind backward).
    Saves q, kv, r, the boolean mask and the rows' log-sum-exp; the [t, k] probabilities and the
    mask's additive and multiplicative forms are recomputed in backward rather than stored (the
    boolean mask is the one tensor every layer shares; its float forms would be two per layer,
    eight times its size), and the distance realignment is a strided view in both passes.
    Inputs use the head-major layout [h, b, ...] so one matmul per head covers the whole batch
    for the position terms and a [b, t, k] mask broadcasts over heads. With ``rows`` (the positions
    of queries that are not the last t in order) distances are realigned by a gather and their
    gradient returned by the matching scatter; the [b, t, k] index is rebuilt in backward, not saved.
    """

    @staticmethod
    def forward(ctx, q, u, w, kv, r, pos_bias, bias, mask, offset, scale, p_drop, rows=None):
        k, v = kv.unbind(0)
        with torch.autocast(q.device.type, enabled=False):
            qu, qw = _biased_queries(q, u, w, scale, k.dtype)
            blocked, allowed = _mask_terms(mask, accumulation_dtype(k.dtype))
            score = _rel_scores(qu, qw, k, r, pos_bias, bias, blocked, offset, scale, rows)
            # a query with every key blocked attends to nothing (zero output, zero gradients)
            lse = softmax_(score, allowed=allowed)
            prob = score
            keep = None
            if p_drop > 0:
                keep = torch.empty_like(prob, dtype=torch.bool).bernoulli_(1.0 - p_drop)
                prob.mul_(keep).mul_(1.0 / (1.0 - p_drop))
            out = torch.matmul(prob.to(v.dtype), v)                              # [h, b, t, e]
        ctx.save_for_backward(q, u, w, kv, r, pos_bias, bias, mask, lse, keep, rows)
        ctx.offset, ctx.scale, ctx.p_drop = offset, scale, p_drop
        return out

    @staticmethod
    def backward(ctx, dout):
        q, u, w, kv, r, pos_bias, bias, mask, lse, keep, rows = ctx.saved_tensors
        k, v = kv.unbind(0)
        blocked, allowed = _mask_terms(mask, accumulation_dtype(k.dtype))
        dkv = torch.empty_like(kv)
        scale, p_drop = ctx.scale, ctx.p_drop
        h, b, t, e = q.shape
        qu, qw = _biased_queries(q, u, w, scale, k.dtype)
        prob = exp_floored_(_rel_scores(qu, qw, k, r, pos_bias, bias, blocked, ctx.offset, scale, rows).sub_(lse),
                            allowed)
        dout = dout.to(v.dtype)
        dprob = torch.matmul(dout, v.transpose(-1, -2)).to(lse.dtype)           # [h, b, t, k]
        if keep is not None:
            dprob.mul_(keep).mul_(1.0 / (1.0 - p_drop))
            torch.matmul((prob * keep).mul_(1.0 / (1.0 - p_drop)).to(v.dtype).transpose(-1, -2), dout, out=dkv[1])
        else:
            torch.matmul(prob.to(v.dtype).transpose(-1, -2), dout, out=dkv[1])
        # Softmax backward in place: dscore = p * (dprob - <dprob, p>); blocked entries have p = 0.
        row = torch.matmul(dprob.unsqueeze(-2), prob.unsqueeze(-1)).squeeze(-1)
        dscore = dprob.sub_(row).mul_(prob)
        del prob
        ds = dscore.to(k.dtype)
        dqu = torch.matmul(ds, k)
        torch.matmul(ds.transpose(-1, -2), qu, out=dkv[0])
        # Scatter the key-indexed gradient back to distances through the same strided view. Rows
        # overlap only in entries that read a neighbouring row, whose gradient is zero (masked).
        p = r.shape[1]
        dbd = dscore.new_zeros(h, b, t, p)
        if rows is not None:  # a row's keys have distinct distances: nothing to add up
            dbd.scatter_(3, _distance_index(rows, k.shape[2], ctx.offset).expand(h, -1, -1, -1), dscore)
        else:
            view = rel_shift(dbd, k.shape[2], ctx.offset)
            cols = min(k.shape[2], p - 1)
            view[..., :cols].copy_(dscore[..., :cols])
            if cols < k.shape[2]:
                view[..., -1, cols:].copy_(dscore[..., -1, cols:])
        dbd = dbd.view(h, b * t, p)
        ds_pos = dbd.to(r.dtype)
        dqw = torch.matmul(ds_pos, r).view(h, b, t, e)
        dr = torch.matmul(ds_pos.transpose(1, 2), qw.reshape(h, b * t, e))
        dqu, dqw = dqu.to(lse.dtype), dqw.to(lse.dtype)
        dq = (dqu + dqw).mul_(scale)
        du = dqu.sum((1, 2)).mul_(scale).to(u.dtype) if u is not None and ctx.needs_input_grad[1] else None
        dw = dqw.sum((1, 2)).mul_(scale).to(w.dtype) if w is not None and ctx.needs_input_grad[2] else None
        dpos = dbd.sum(1).mul_(scale).to(pos_bias.dtype) if pos_bias is not None and ctx.needs_input_grad[5] else None
        dbias = dscore.mul_(scale).to(bias.dtype) if bias is not None and ctx.needs_input_grad[6] else None
        return dq.to(q.dtype), du, dw, dkv, dr.to(r.dtype), dpos, dbias, None, None, None, None, None


def _biased_queries(q: Tensor, u: Tensor | None, w: Tensor | None, scale: float, dtype) -> tuple[Tensor, Tensor]:
    """(q + u) * scale and (q + w) * scale in ``dtype``; q [h, b, t, e], u and w [h, e] or None."""
    acc = accumulation_dtype(q.dtype)
    qa = q.to(acc)
    qu = qa * scale if u is None else (qa + u.to(acc)[:, None, None, :]).mul_(scale)
    qw = qa * scale if w is None else (qa + w.to(acc)[:, None, None, :]).mul_(scale)
    return qu.to(dtype), qw.to(dtype)


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


@dataclass
class ProjectionCache:
    """One layer's projections reused across segments at evaluation (no gradients).

    With memory, every segment attends over the memory positions again; their keys and values
    and the projected relative encodings are the same as in the previous segment, so recomputing
    them is most of a cached segment's work at long attention lengths. The model fills this
    object in one call and reads it in the next.

    Attributes:
        kv: [2, h, b, m, e] keys and values of the memory positions.
        mem: the memory tensor ``kv`` belongs to (checked by identity, so a different memory
            is never matched with stale projections).
        pos, r: the relative encodings [P, d] of the last call and their projection [h, P, e].
    """

    kv: Tensor | None = None
    mem: Tensor | None = None
    pos: Tensor | None = None
    r: Tensor | None = None

    def holds(self, mem: Tensor | None) -> bool:
        """Whether ``kv`` holds the keys and values of this memory tensor."""
        return mem is not None and mem.shape[1] > 0 and self.mem is mem and self.kv is not None \
            and self.kv.shape[3] == mem.shape[1]


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

    def forward(self, h: Tensor, pos: Tensor, mask: Tensor | None, r_w_bias: Tensor | None = None,
                r_r_bias: Tensor | None = None, query: Tensor | None = None,
                seg_mat: Tensor | None = None, seg_embed: Tensor | None = None,
                r_s_bias: Tensor | None = None, pos_max: int | None = None, cache: ProjectionCache | None = None,
                mem: Tensor | None = None, query_pos: Tensor | None = None) -> Tensor:
        """Attend from the last t positions of ``h`` (or from ``query``) over [memory, h].

        Args:
            h: [b, n, d] the current segment (XLNet: the content stream).
            pos: ``relative``: sinusoid encodings [P, d] of decreasing distances, by default the
                P = k distances k-1 .. 0 (clamped); ``shaw``: long tensor [P] of those distances
                clamped to max_dist - 1.
            mask: bool [t, k] or [b, t, k], True = blocked; None = attend everywhere.
            r_w_bias, r_r_bias: u and v, [h, e] (required for ``relative``).
            query: [b, t, d] a separate query stream (XLNet's query stream); default: the last t
                positions of ``h``.
            seg_mat: [b, t, k, 2] one-hot "same segment / different segment" (XLNet).
            seg_embed: [2, h, e] segment encodings s; r_s_bias: [h, e] segment bias.
            pos_max: the distance ``pos[0]`` encodes (default P - 1; XLNet's bidirectional
                encodings of k .. -t+1 pass k).
            cache: evaluation only (no gradients): reuse the memory's keys and values and the
                projected encodings of the previous call when ``mem`` is the memory they were
                computed for; on return ``cache.kv`` holds the keys and values of all k positions.
            mem: [b, m, d] the memory (stop-gradient states of the previous segments), or None.
            query_pos: [b, t] long, the positions in ``h`` (0 .. n-1) of the ``query`` rows when
                they are not the last t positions in order (XLNet's query stream at the predicted
                positions only); ``mask`` and ``seg_mat`` then have one row per query.
        Returns:
            [b, t, d] attention output (before the residual connection).

        Keys and values of the memory and of the segment are projected separately and only then
        joined, so the backward pass keeps the memory and ``h`` themselves (which the model holds
        anyway) rather than a concatenated copy of both.
        """
        b, n, _ = h.shape
        m = 0 if mem is None else mem.shape[1]
        klen = m + n
        heads, e = self.n_head, self.d_head
        w_q, w_kv = self.qkv.weight.split([heads * e, 2 * heads * e])
        if query is None:
            t = mask.shape[-2] if mask is not None else n
            query = h if t == n else h[:, n - t:]  # (a full slice would cost a zero-filled gradient)
        t = query.shape[1]
        reuse = False
        if cache is not None:
            if torch.is_grad_enabled():
                raise RuntimeError("a ProjectionCache is for evaluation: call under torch.no_grad()")
            reuse = cache.holds(mem)

        def heads_kv(x: Tensor) -> Tensor:  # [b, n', 2he] -> [2, h, b, n', e] (a strided view)
            return x.view(b, x.shape[1], 2, heads, e).permute(2, 3, 0, 1, 4)

        if query is h:
            # queries, keys and values of the segment from one product with the whole weight
            q, kv_h = F.linear(h, self.qkv.weight).split([heads * e, 2 * heads * e], -1)
        elif _is_prefix(h, query):
            # XLNet's content rows are the first n query rows: one product as well (keys and values
            # of the other rows are computed and dropped), and no flattened copy of h kept for backward
            q, kv = F.linear(query, self.qkv.weight).split([heads * e, 2 * heads * e], -1)
            kv_h = kv[:, :n]
        else:
            q, kv_h = F.linear(query, w_q), F.linear(h, w_kv)
        if reuse:
            kv = torch.cat([cache.kv, heads_kv(kv_h)], 3)
        elif m:
            kv = torch.cat([heads_kv(F.linear(mem, w_kv)), heads_kv(kv_h)], 3)
        else:
            kv = heads_kv(kv_h).contiguous()                                          # [2, h, b, k, e]
        if cache is not None:
            cache.kv = kv
        q = q.reshape(b, t, heads, e).permute(2, 0, 1, 3).contiguous()                 # [h, b, t, e]
        if self.kind == "relative":
            if cache is not None and cache.pos is not None and cache.pos.shape == pos.shape and torch.equal(cache.pos, pos):
                r = cache.r
            else:
                r = self.r_net(pos).view(-1, heads, e).transpose(0, 1).contiguous()   # [h, P, e]
                if cache is not None:
                    cache.pos, cache.r = pos, r
            u, w, pos_bias = r_w_bias, r_r_bias, None
        else:
            # under autocast the queries and keys are bf16 but an indexed parameter is not: the core
            # runs with autocast off, so the encodings take the keys' dtype here (as r_net's do)
            r = self.r_emb[pos].to(kv.dtype).transpose(0, 1).contiguous()
            u, w, pos_bias = None, None, self.r_bias[pos].t()                       # [h, P]
        bias = None
        if seg_mat is not None:
            ef = torch.einsum("hbte,she->hbts", q + r_s_bias[:, None, None, :], seg_embed)   # [h, b, t, 2]
            bias = torch.einsum("hbts,btks->hbtk", ef, seg_mat.to(ef.dtype))
        d0 = pos.shape[0] - 1 if pos_max is None else pos_max
        offset = d0 - (klen - t) if query_pos is None else d0 - m
        p_drop = self.dropatt.p if self.training else 0.0
        out = _RelativeAttentionCore.apply(q, u, w, kv, r, pos_bias, bias, mask, offset, self.scale, p_drop,
                                           query_pos)
        return self.out(out.permute(1, 2, 0, 3).reshape(b, t, heads * e))


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention without relative positions (Vaswani et al. 2017, Eq. 1), one
    fused q/k/v product, torch's scaled_dot_product_attention. The one absolute-position attention of genfeat:
    BERT's (bidirectional), GPT-1's (causal, with a key/value cache) and the absolute-encoding Transformer-XL
    ablations' (queries only for the segment's last ``last`` positions of [memory, segment]).

    Shapes: h [b, n, d]; keep bool broadcastable to [b, heads, t, m + n] (True = attend) or None; past
    (keys, values) [b, heads, m, e] or None; t = last or n -> ([b, t, d], (keys, values) [b, heads, m + n, e]).
    With ``causal`` and neither keep nor past, the causal order is the mask (SDPA's is_causal); a new token
    after a cache and no keep sees every cached one.
    """

    def __init__(self, d_model: int, n_head: int, d_head: int | None = None, dropatt: float = 0.0,
                 bias: bool = True):
        super().__init__()
        self.n_head, self.dropatt = n_head, dropatt
        self.d_head = d_model // n_head if d_head is None else d_head
        self.qkv = nn.Linear(d_model, 3 * n_head * self.d_head, bias=bias)
        self.out = nn.Linear(n_head * self.d_head, d_model, bias=bias)

    def forward(self, h: Tensor, keep: Tensor | None = None, past: tuple[Tensor, Tensor] | None = None,
                causal: bool = False, last: int | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        b, n, _ = h.shape
        if causal and keep is None and (last is not None or (past is not None and n > 1)):
            raise ValueError("causal attention over a query slice or several new tokens after a cache needs keep "
                             "(SDPA's is_causal aligns queries with the first keys)")
        q, k, v = self.qkv(h).view(b, n, 3, self.n_head, self.d_head).permute(2, 0, 3, 1, 4)  # [b, heads, n, e]
        if last is not None:
            q = q[:, :, -last:]
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal and keep is None and past is None,
                                             dropout_p=self.dropatt if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(b, q.shape[2], self.n_head * self.d_head)), (k, v)
