"""Adaptive input embeddings and adaptive softmax (Baevski & Auli 2019; Grave et al. 2017).

Transformer-XL (thesis §2.1) uses both on large vocabularies: the vocabulary is split at
``cutoffs`` into a frequent head and tail clusters of decreasing embedding size
``d_embed // div_val**i``, each projected to the model width. The softmax first predicts a token
of the head or one of the tail clusters, then the token within the cluster:
log p(w) = log p_head(cluster(w)) + log p_cluster(w | cluster).

Axes: n flattened positions, d model width, e_i embedding width of cluster i, V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .precision import accumulation_dtype, compute_dtype
from .softmax import softmax_


def _mm_into(dst: Tensor, a: Tensor, b: Tensor) -> None:
    """dst = a @ b, written in place (converted when the matmul runs in a lower precision than dst)."""
    if a.dtype == dst.dtype:
        torch.mm(a, b, out=dst)
    else:
        dst.copy_(a @ b)


def _affine(h: Tensor, weight: Tensor, bias: Tensor | None, lo: int, hi: int, dt: torch.dtype) -> Tensor:
    """h weight^T + bias[lo:hi] in dtype ``dt`` (weight already the rows lo:hi); no bias: the product alone,
    which skips addmm's copy of the broadcast bias into the [n, hi - lo] result."""
    if bias is None:
        return h @ weight.to(dt).t()
    return torch.addmm(bias[lo:hi].to(dt), h, weight.to(dt).t())


def _onehot_minus_p_(p: Tensor, rows: Tensor, col: Tensor, g: Tensor) -> Tensor:
    """g * (onehot - p), the gradient of g * (z[col] - lse) with respect to z, for the ``rows`` whose
    target column ``col`` lies in this buffer of probabilities ``p`` [n, V_i] (g [n]).

    Written over ``p`` in place: the backward pass owns the saved probabilities and needs them for
    nothing else, and a second [n, V_i] buffer would be fresh memory every step (above glibc's 32 MB
    mmap threshold, e.g. [1,016, 10,000] fp32, it is page-faulted in anew each time). Autograd's
    version check on saved tensors makes a second backward pass through the same graph fail loudly.
    """
    grad = p.mul_(-g[:, None])
    grad[rows, col] += g[rows]
    return grad


class _SharedTableTargetLogProb(torch.autograd.Function):
    """log p(target) of an adaptive softmax whose clusters are row ranges of one table (div_val 1, no projection).

    log p(w) = z_head[col(w)] - lse_head + [w in tail cluster i] (z_i[w - lo_i] - lse_i), with
    z_head = [h W_shortlist^T + b_shortlist, h W_clusters^T + b_clusters] (col(w) = w in the head,
    shortlist + i - 1 for cluster i) and z_i = h W_{lo_i:hi_i}^T + b_{lo_i:hi_i} over the positions
    whose target is in cluster i.

    The head's shortlist and cluster logits stay two buffers normalised jointly (``softmax_`` over
    both): no concatenated weight or logit copy at the forward pass's memory peak, and the shortlist's
    product is s wide rather than s + C (BLAS is far slower at 2,002 than at 2,000 columns: 37-39 ms vs
    24-26 ms for 1,024 positions, d 256, one AMD EPYC thread). Saves each buffer's probabilities and
    computes the gradient d log p / dz = onehot - p directly over them, in place, without a zero-filled
    [n, V] gradient of an indexing op or a second [n, V] buffer; backward writes every cluster's weight
    gradient straight into its rows of one [V, e] buffer (slicing a shared table under autograd would
    allocate and sum a zero-filled [V, e] gradient per cluster).

    Shapes: hidden [n, e], weight [V, e], bias [V] or None (no bias: plain products, no bias
    gradient), cluster_weight [C, e], cluster_bias [C], target [n] -> [n] in at least fp32.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, cluster_weight, cluster_bias, target, bounds):
        dt = compute_dtype(hidden)
        acc = accumulation_dtype(dt)
        s = bounds[1]
        with torch.autocast(hidden.device.type, enabled=False):
            h = hidden.to(dt)
            cols = target.clone()
            tails = []
            for i in range(1, len(bounds) - 1):
                lo, hi = bounds[i], bounds[i + 1]
                idx = ((target >= lo) & (target < hi)).nonzero(as_tuple=True)[0]
                cols[idx] = s + i - 1
                z = _affine(h[idx], weight[lo:hi], bias, lo, hi, dt).to(acc)
                picked = z.gather(1, (target[idx] - lo)[:, None])
                picked.sub_(softmax_(z))
                tails.append((idx, picked.squeeze(1), z))
            short = _affine(h, weight[:s], bias, 0, s, dt).to(acc)      # [n, s]
            if cluster_weight is None:
                clusters = None
                out = short.gather(1, cols[:, None])
                out.sub_(softmax_(short))
            else:
                clusters = torch.addmm(cluster_bias.to(dt), h, cluster_weight.to(dt).t()).to(acc)  # [n, C]
                in_short = cols < s
                out = torch.where(in_short[:, None], short.gather(1, cols.clamp(max=s - 1)[:, None]),
                                  clusters.gather(1, (cols - s).clamp(min=0)[:, None]))
                out.sub_(softmax_(short, clusters))
            out = out.squeeze(1)
            for idx, lp, _ in tails:
                out.index_add_(0, idx, lp)
        ctx.bounds, ctx.dt, ctx.in_dtype = bounds, dt, hidden.dtype
        ctx.save_for_backward(h, weight, bias, cluster_weight, target, cols, short, clusters,
                              *[t for idx, _, p in tails for t in (idx, p)])
        return out

    @staticmethod
    def backward(ctx, dout):
        h, weight, bias, cluster_weight, target, cols, short, clusters, *tail_saved = ctx.saved_tensors
        bounds, dt, s = ctx.bounds, ctx.dt, ctx.bounds[1]
        dout = dout.to(short.dtype)
        rows = torch.arange(len(cols), device=cols.device)
        with torch.autocast(h.device.type, enabled=False):
            dweight = torch.empty_like(weight)
            dbias = None if bias is None or not ctx.needs_input_grad[2] else torch.empty_like(bias)
            in_short = cols < s
            grad = _onehot_minus_p_(short, rows[in_short], cols[in_short], dout)
            gh = grad.to(dt)
            dhidden = (gh @ weight[:s].to(dt)).to(short.dtype)
            _mm_into(dweight[:s], gh.t(), h)
            if dbias is not None:
                dbias[:s] = grad.sum(0)
            dcw = dcb = None
            if clusters is not None:
                grad = _onehot_minus_p_(clusters, rows[~in_short], cols[~in_short] - s, dout)
                gh = grad.to(dt)
                dhidden.add_((gh @ cluster_weight.to(dt)).to(short.dtype))
                dcw = (gh.t() @ h).to(weight.dtype)
                dcb = grad.sum(0).to(cluster_weight.dtype)
            for i in range(1, len(bounds) - 1):
                lo, hi = bounds[i], bounds[i + 1]
                idx, p = tail_saved[2 * (i - 1)], tail_saved[2 * (i - 1) + 1]
                grad = _onehot_minus_p_(p, rows[:len(idx)], target[idx] - lo, dout[idx])
                gh = grad.to(dt)
                _mm_into(dweight[lo:hi], gh.t(), h[idx])
                if dbias is not None:
                    dbias[lo:hi] = grad.sum(0)
                dhidden.index_add_(0, idx, (gh @ weight[lo:hi].to(dt)).to(short.dtype))
        return dhidden.to(ctx.in_dtype), dweight, dbias, dcw, dcb, None, None


def full_target_log_prob(hidden: Tensor, weight: Tensor, target: Tensor, bias: Tensor | None = None) -> Tensor:
    """log softmax(hidden weight^T + bias)[target] over one full table (no clusters), fused as in
    :class:`_SharedTableTargetLogProb`: the [n, V] logits become the probabilities in place and are
    the only [n, V] buffer kept for the backward pass (no separate log-softmax copy).

    Shapes: hidden [n, e], weight [V, e], target [n], bias [V] (default none) -> [n] in at least fp32.
    """
    return _SharedTableTargetLogProb.apply(hidden, weight, bias, None, None, target, [0, weight.shape[0]])


def check_token_input(ids: Tensor, what: str, dims: str | None = None) -> None:
    """Raise TypeError for ``ids`` that are not an integer tensor, ValueError for one of another rank than ``dims``
    (``"[b, t]"``: 2; ``"[..., t]"``: 1 or more; None: any): a list, float ids or another rank otherwise fail deep
    inside the model, in torch's words (no attribute 'shape', "expected ... Long", "too many values to unpack")."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{what} must be a torch tensor of token ids{' ' + dims if dims else ''}, got "
                        f"{type(ids).__name__}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"{what} must hold integer token ids (torch.long), got {ids.dtype}")
    if dims is not None:
        named = dims.count(",") + 1 - dims.startswith("[...")   # the axes named besides any leading "..."
        if ids.dim() < named if dims.startswith("[...") else ids.dim() != named:
            raise ValueError(f"{what} must be {dims}, got shape {tuple(ids.shape)}")


def check_ids(ids: Tensor, n_token: int, what: str) -> None:
    """Raise ValueError when an id lies outside [0, n_token): the cluster lookups would silently skip
    it (an embedding of zeros, a log-probability read from unwritten memory) instead of failing."""
    if not ids.numel():
        return
    low, high = (int(v) for v in torch.aminmax(ids))  # one reduction, one device sync
    if low < 0 or high >= n_token:
        raise ValueError(f"{what} hold ids in [{low}, {high}], outside the vocabulary [0, {n_token})")


def cluster_bounds(n_token: int, cutoffs: list[int]) -> list[int]:
    """[0, c_1, ..., c_k, n_token]: cluster i holds token ids [bounds[i], bounds[i+1])."""
    return [0, *cutoffs, n_token]


class AdaptiveEmbedding(nn.Module):
    """Token embedding with per-cluster width, projected to ``d_model`` and scaled by sqrt(d_model).

    Args:
        n_token: vocabulary size V.
        d_embed: embedding width of the head cluster.
        d_model: output width.
        cutoffs: sorted cluster boundaries (empty: one cluster).
        div_val: width divisor between consecutive clusters (1: one shared table).
    Shapes:
        ids [...] -> [..., d_model]
    """

    def __init__(self, n_token: int, d_embed: int, d_model: int, cutoffs: list[int], div_val: int = 1):
        super().__init__()
        self.n_token, self.d_embed, self.d_model, self.div_val = n_token, d_embed, d_model, div_val
        self.bounds = cluster_bounds(n_token, cutoffs)
        self.scale = math.sqrt(d_model)
        self.layers = nn.ModuleList()
        self.projs = nn.ParameterList()
        if div_val == 1:
            self.layers.append(nn.Embedding(n_token, d_embed))
            if d_model != d_embed:
                self.projs.append(nn.Parameter(torch.empty(d_model, d_embed)))
        else:
            for i in range(len(self.bounds) - 1):
                width = d_embed // div_val ** i
                self.layers.append(nn.Embedding(self.bounds[i + 1] - self.bounds[i], width))
                self.projs.append(nn.Parameter(torch.empty(d_model, width)))

    def forward(self, ids: Tensor) -> Tensor:
        check_ids(ids, self.n_token, "input ids")
        if self.div_val == 1:
            out = self.layers[0](ids)
            if len(self.projs):
                out = F.linear(out, self.projs[0])
            return out * self.scale
        flat = ids.reshape(-1)
        out = flat.new_zeros((flat.numel(), self.d_model), dtype=self.projs[0].dtype)
        for i, layer in enumerate(self.layers):
            lo, hi = self.bounds[i], self.bounds[i + 1]
            idx = ((flat >= lo) & (flat < hi)).nonzero(as_tuple=True)[0]
            if idx.numel():
                out.index_copy_(0, idx, F.linear(layer(flat[idx] - lo), self.projs[i]).to(out.dtype))
        return out.view(*ids.shape, self.d_model) * self.scale


class AdaptiveLogSoftmax(nn.Module):
    """Projected adaptive softmax; full softmax when ``cutoffs`` is empty.

    Gives the log-probability of given targets without materialising tail-cluster distributions
    for positions whose target lies elsewhere, and full log-probabilities on request.

    Args:
        n_token, d_embed, d_model, cutoffs, div_val: as for :class:`AdaptiveEmbedding`.
    Shapes:
        target_log_prob: hidden [n, d_model], target [n] -> [n]
        log_prob: hidden [n, d_model] -> [n, V]
    """

    def __init__(self, n_token: int, d_embed: int, d_model: int, cutoffs: list[int], div_val: int = 1):
        super().__init__()
        self.n_token, self.d_embed, self.d_model, self.div_val = n_token, d_embed, d_model, div_val
        self.bounds = cluster_bounds(n_token, cutoffs)
        self.n_clusters = len(cutoffs)
        self.shortlist = self.bounds[1]
        if self.n_clusters:
            self.cluster_weight = nn.Parameter(torch.zeros(self.n_clusters, d_embed))
            self.cluster_bias = nn.Parameter(torch.zeros(self.n_clusters))
        self.layers = nn.ModuleList()
        self.projs = nn.ParameterList()
        if div_val == 1:
            self.layers.append(nn.Linear(d_embed, n_token))
            if d_model != d_embed:  # one projection per cluster, so each can be tied or not
                self.projs.extend(nn.Parameter(torch.empty(d_model, d_embed)) for _ in range(len(self.bounds) - 1))
        else:
            for i in range(len(self.bounds) - 1):
                width = d_embed // div_val ** i
                self.layers.append(nn.Linear(width, self.bounds[i + 1] - self.bounds[i]))
                self.projs.append(nn.Parameter(torch.empty(d_model, width)))

    def _cluster_params(self, i: int) -> tuple[Tensor, Tensor, Tensor | None]:
        """Weight [V_i, e_i], bias [V_i] and projection [d_model, e_i] (or None) of cluster i."""
        if self.div_val == 1:
            lo, hi = self.bounds[i], self.bounds[i + 1]
            layer = self.layers[0]
            proj = self.projs[i] if len(self.projs) else None
            return layer.weight[lo:hi], layer.bias[lo:hi], proj
        return self.layers[i].weight, self.layers[i].bias, self.projs[i]

    @staticmethod
    def _logits(hidden: Tensor, weight: Tensor, bias: Tensor, proj: Tensor | None) -> Tensor:
        if proj is not None:
            hidden = hidden @ proj  # [n, d_model] @ [d_model, e] -> [n, e]
        return F.linear(hidden, weight, bias)

    def _head_log_prob(self, hidden: Tensor) -> Tensor:
        """[n, shortlist + n_clusters]: shortlist tokens, then one entry per tail cluster."""
        weight, bias, proj = self._cluster_params(0)
        if self.n_clusters:
            weight = torch.cat([weight, self.cluster_weight], 0)
            bias = torch.cat([bias, self.cluster_bias], 0)
        return F.log_softmax(self._logits(hidden, weight, bias, proj).to(accumulation_dtype(hidden.dtype)), dim=-1)

    def target_log_prob(self, hidden: Tensor, target: Tensor) -> Tensor:
        check_ids(target, self.n_token, "targets")
        if self.div_val == 1 and not len(self.projs):
            layer = self.layers[0]
            cw, cb = (self.cluster_weight, self.cluster_bias) if self.n_clusters else (None, None)
            return _SharedTableTargetLogProb.apply(hidden, layer.weight, layer.bias, cw, cb, target, self.bounds)
        head = self._head_log_prob(hidden)
        if not self.n_clusters:
            return head.gather(1, target[:, None]).squeeze(1)
        out = torch.empty(target.shape, dtype=head.dtype, device=head.device)
        in_head = target < self.shortlist
        idx = in_head.nonzero(as_tuple=True)[0]
        out[idx] = head[idx, target[idx]]
        for i in range(1, self.n_clusters + 1):
            lo, hi = self.bounds[i], self.bounds[i + 1]
            idx = ((target >= lo) & (target < hi)).nonzero(as_tuple=True)[0]
            if not idx.numel():
                continue
            weight, bias, proj = self._cluster_params(i)
            tail = F.log_softmax(self._logits(hidden[idx], weight, bias, proj).to(accumulation_dtype(hidden.dtype)), dim=-1)
            out[idx] = head[idx, self.shortlist + i - 1] + tail.gather(1, (target[idx] - lo)[:, None]).squeeze(1)
        return out

    def log_prob(self, hidden: Tensor) -> Tensor:
        head = self._head_log_prob(hidden)
        if not self.n_clusters:
            return head
        parts = [head[:, : self.shortlist]]
        for i in range(1, self.n_clusters + 1):
            weight, bias, proj = self._cluster_params(i)
            tail = F.log_softmax(self._logits(hidden, weight, bias, proj).to(accumulation_dtype(hidden.dtype)), dim=-1)
            parts.append(head[:, self.shortlist + i - 1, None] + tail)
        return torch.cat(parts, dim=-1)
