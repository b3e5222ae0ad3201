"""Transformer-XL (Dai et al. 2019; thesis §2.1): segment-level recurrence + relative positions.

Axes: b batch, t segment (query) length, m memory length, k = m + t key length, d model width,
h heads, e head width, V vocabulary, L layers.

The ablations of Table 2.6 are config switches: ``attn_type`` relative (ours, Eq. 2.3), shaw
(Shaw et al. 2018), absolute_sinusoid (Vaswani et al. 2017, added to the input) or
absolute_learned (Al-Rfou et al. 2018, learned and added at every layer); recurrence is
``mem_len`` > 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..config import Config
from ..nn.adaptive import AdaptiveEmbedding, AdaptiveLogSoftmax, check_token_input
from ..nn.attention import (MultiHeadAttention, ProjectionCache, RelativeMultiHeadAttention, causal_mask,
                            sinusoid)
from ..nn.feedforward import PositionwiseFeedForward


@dataclass
class TransformerXLConfig(Config):
    """Architecture of a Transformer-XL language model (field names follow the original code)."""

    n_token: int = 10000
    """Vocabulary size V."""
    cutoffs: list[int] = field(default_factory=list)
    """Adaptive softmax/input cluster boundaries (empty: full softmax)."""
    div_val: int = 1
    """Embedding width divisor between clusters."""
    d_model: int = 256
    """Model width d."""
    d_embed: int | None = None
    """Head-cluster embedding width (None: d_model)."""
    n_head: int = 4
    d_head: int = 64
    d_inner: int = 1024
    """Feed-forward inner width."""
    n_layer: int = 4
    dropout: float = 0.1
    dropatt: float = 0.0
    """Dropout on attention probabilities."""
    mem_len: int = 128
    """Memory length m carried between segments (0: no recurrence)."""
    ext_len: int = 0
    """Length of the extended context of the original code (tokens re-fed without loss): the memory
    leaves out each segment's last ext_len positions. Default of ``forward(ext_len=...)``; evaluation
    and generation, which feed no token twice, pass 0."""
    clamp_len: int = -1
    """Use the same encoding for all distances >= clamp_len (-1: never clamp)."""
    same_length: bool = False
    """Every query attends over the same number of keys."""
    attn_type: Literal["relative", "shaw", "absolute_sinusoid", "absolute_learned"] = "relative"
    """Positional encoding scheme (Table 2.6)."""
    max_klen: int = 512
    """Largest key length for learned position tables (shaw, absolute_learned)."""
    untie_r: bool = False
    """Per-layer u and v biases instead of shared ones."""
    tie_weight: bool = True
    """Tie the softmax weights to the input embeddings."""
    tie_projs: list[bool] = field(default_factory=list)
    """Per cluster, tie the softmax projection to the embedding projection (default: all but the head)."""
    pre_lnorm: bool = False
    """Layer norm before each sub-layer (the paper is post-norm)."""
    recompute_ff: bool = False
    """Recompute each feed-forward block's inner activation in the backward pass instead of storing
    it (``genfeat.nn.feedforward``): 4·d_inner fewer bytes per token and layer, one more
    d_model × d_inner product per token and layer in backward."""
    checkpoint_layers: bool = False
    """Recompute each layer in the backward pass instead of storing its activations (gradient
    checkpointing): less memory, about a third more compute."""
    init_std: float = 0.02
    proj_init_std: float = 0.01
    layer_norm_epsilon: float = 1e-5

    def __post_init__(self):
        if self.d_embed is None:
            self.d_embed = self.d_model
        if self.n_token < 1 or self.d_model < 1 or self.n_layer < 1 or self.n_head < 1 or self.d_head < 1:
            raise ValueError("n_token, d_model, n_layer, n_head and d_head must be positive")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even for sinusoid encodings, got {self.d_model}")
        if list(self.cutoffs) != sorted(set(self.cutoffs)) or any(c <= 0 or c >= self.n_token for c in self.cutoffs):
            raise ValueError(f"cutoffs must be increasing and inside (0, n_token={self.n_token}), got {self.cutoffs}")
        if self.div_val < 1:
            raise ValueError(f"div_val must be >= 1, got {self.div_val}")
        if self.mem_len < 0 or self.ext_len < 0:
            raise ValueError("mem_len and ext_len must be >= 0")
        if self.max_klen < 1 or self.clamp_len < -1:
            raise ValueError(f"max_klen must be >= 1 and clamp_len >= -1 (-1: never clamp), got {self.max_klen} and "
                             f"{self.clamp_len}")
        if not self.tie_projs:
            self.tie_projs = [False] + [True] * len(self.cutoffs)
        if len(self.tie_projs) != len(self.cutoffs) + 1:
            raise ValueError(f"tie_projs needs one flag per cluster ({len(self.cutoffs) + 1}), got {self.tie_projs}")
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.dropatt < 1.0:
            raise ValueError("dropout and dropatt must be in [0, 1)")


@dataclass
class TransformerXLOutput:
    hidden: Tensor
    """[b, t, d] last-layer states of the segment."""
    mems: list[Tensor]
    """L tensors [b, m', d]: the new memory (detached), inputs of each layer over the last mem_len steps."""
    target_log_probs: Tensor | None = None
    """[b, n] log p(labels) when labels ([b, n], the last n positions) were given."""
    log_probs: Tensor | None = None
    """[b, t, V] when return_log_probs."""


class TransformerXLLayer(nn.Module):
    """Attention + position-wise feed-forward, each with residual and (post or pre) layer norm."""

    def __init__(self, cfg: TransformerXLConfig):
        super().__init__()
        self.pre_lnorm = cfg.pre_lnorm
        if cfg.attn_type in ("relative", "shaw"):
            self.attn = RelativeMultiHeadAttention(cfg.d_model, cfg.n_head, cfg.d_head, cfg.dropatt,
                                                   kind=cfg.attn_type, max_dist=cfg.max_klen)
        else:
            self.attn = MultiHeadAttention(cfg.d_model, cfg.n_head, cfg.d_head, cfg.dropatt, bias=False)
        if cfg.untie_r and cfg.attn_type == "relative":
            self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
        self.attn_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.ff = PositionwiseFeedForward(cfg.d_model, cfg.d_inner, cfg.dropout, recompute=cfg.recompute_ff)
        self.ff_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h: Tensor, mem: Tensor | None, pos, mask: Tensor, biases,
                cache: ProjectionCache | None = None) -> Tensor:
        if isinstance(self.attn, RelativeMultiHeadAttention):
            u, v = biases if biases is not None else (getattr(self, "r_w_bias", None), getattr(self, "r_r_bias", None))
            if mem is not None and mem.shape[1] == 0:
                mem = None
            x = h
            if self.pre_lnorm:
                x = self.attn_norm(h)
                # a cache that holds the memory's keys and values has them of the normalised memory
                if mem is not None and not (cache is not None and cache.holds(mem)):
                    mem = self.attn_norm(mem)
            a = self.attn(x, pos, mask, u, v, cache=cache, mem=mem)
        else:
            content = h if mem is None or mem.shape[1] == 0 else torch.cat([mem, h], dim=1)  # [b, k, d]
            keep = ~mask if mask.dim() == 2 else ~mask[:, None]     # [b, t, k] -> broadcast over heads
            a = self.attn(self.attn_norm(content) if self.pre_lnorm else content, keep, last=h.shape[1])[0]
        a = self.drop(a)
        if self.pre_lnorm:
            h = h + a
            return h + self.ff(self.ff_norm(h))
        h = self.attn_norm(h + a)
        return self.ff_norm(h + self.ff(h))


class TransformerXLLMHeadModel(nn.Module):
    """Transformer-XL language model: adaptive input, L layers with memory, adaptive softmax.

    ``model(input_ids, mems=None, labels=None, *, mem_len=None, clamp_len=None, ext_len=None,
    return_log_probs=False, cache=None, key_padding=None)``

    Args:
        input_ids: [b, t] token ids of the segment.
        mems: the ``mems`` of the previous call, or None / [] to start without memory.
        labels: [b, n] next-token ids of the last n <= t positions to score (not a loss:
            log-probabilities are returned).
        mem_len, clamp_len: override the config for this call (evaluation with another
            attention length).
        ext_len: override the config for this call: the memory leaves out the segment's last
            ext_len positions, which a stream with ``ext_len`` feeds again at the start of the
            next input (training with extended context; evaluation streams feed nothing twice).
        return_log_probs: also return full [b, t, V] log-probabilities (generation).
        cache: fast cached evaluation (no gradients; relative and Shaw attention): the list from
            :meth:`new_cache`, passed with every segment of a stream together with that call's
            ``mems``; each layer then projects keys and values for the new positions only and
            reuses the relative encodings, instead of recomputing them over the whole memory.
        key_padding: [b, m + t] bool over [memory, segment], True at the padding of a left-padded
            batch (generation from prompts of different lengths): no query attends a padding position
            but its own, so every row computes what its tokens alone would (distances between real
            tokens, and from the segment's end, do not change with padding on the left).
    """

    def __init__(self, cfg: TransformerXLConfig):
        super().__init__()
        self.config = cfg
        self.word_emb = AdaptiveEmbedding(cfg.n_token, cfg.d_embed, cfg.d_model, cfg.cutoffs, cfg.div_val)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(TransformerXLLayer(cfg) for _ in range(cfg.n_layer))
        if cfg.attn_type == "relative" and not cfg.untie_r:
            self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
        if cfg.attn_type == "absolute_learned":
            self.pos_emb = nn.Parameter(torch.empty(cfg.n_layer, cfg.max_klen, cfg.d_model))
        self.crit = AdaptiveLogSoftmax(cfg.n_token, cfg.d_embed, cfg.d_model, cfg.cutoffs, cfg.div_val)
        self.reset_parameters()
        self.tie_weights()

    def reset_parameters(self) -> None:
        cfg = self.config
        for name, p in self.named_parameters():
            if "norm" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("bias") and p.dim() == 1:
                nn.init.zeros_(p)
            elif "projs" in name:
                nn.init.normal_(p, 0.0, cfg.proj_init_std)
            else:
                nn.init.normal_(p, 0.0, cfg.init_std)

    def tie_weights(self) -> None:
        cfg = self.config
        if cfg.tie_weight:
            for out_layer, emb in zip(self.crit.layers, self.word_emb.layers):
                out_layer.weight = emb.weight
        for i, tie in enumerate(cfg.tie_projs):
            if not tie:
                continue
            if cfg.div_val == 1 and cfg.d_model != cfg.d_embed:
                self.crit.projs[i] = self.word_emb.projs[0]
            elif cfg.div_val != 1:
                self.crit.projs[i] = self.word_emb.projs[i]

    def _positions(self, klen: int, clamp_len: int, device) -> Tensor:
        cfg = self.config
        dist = torch.arange(klen - 1, -1, -1, device=device)
        if clamp_len > 0:
            dist = dist.clamp(max=clamp_len)
        if cfg.attn_type == "relative":
            return self.drop(sinusoid(dist, cfg.d_model).to(self.word_emb.layers[0].weight.dtype))
        return dist.clamp(max=cfg.max_klen - 1)

    def new_cache(self) -> list[ProjectionCache] | None:
        """An empty projection cache per layer for ``forward(cache=...)``; None for absolute attention."""
        if self.config.attn_type not in ("relative", "shaw"):
            return None
        return [ProjectionCache() for _ in self.layers]

    def forward(self, input_ids: Tensor, mems: list[Tensor] | None = None, labels: Tensor | None = None, *,
                mem_len: int | None = None, clamp_len: int | None = None, ext_len: int | None = None,
                return_log_probs: bool = False, cache: list[ProjectionCache] | None = None,
                key_padding: Tensor | None = None) -> TransformerXLOutput:
        """One segment, attending to the memory of the earlier ones (arguments in the class docstring).

        Shapes: input_ids [b, t], mems L x [b, m, d], labels [b, n] (n <= t), key_padding [b, m + t] ->
        :class:`TransformerXLOutput`: hidden [b, t, d], mems L x [b, m', d] (m' <= mem_len), target_log_probs
        [b, n], log_probs [b, t, V].
        """
        cfg = self.config
        if cache is not None and len(cache) != len(self.layers):
            raise ValueError(f"cache has {len(cache)} entries for {len(self.layers)} layers: use model.new_cache()")
        mem_len = cfg.mem_len if mem_len is None else mem_len
        clamp_len = cfg.clamp_len if clamp_len is None else clamp_len
        ext_len = cfg.ext_len if ext_len is None else ext_len
        check_token_input(input_ids, "input_ids", "[b, t]")
        b, t = input_ids.shape
        if cfg.attn_type == "absolute_learned" and t > cfg.max_klen:
            raise ValueError(f"a segment of {t} tokens is longer than the {cfg.max_klen} learned positions (max_klen)")
        m = mems[0].shape[1] if mems else 0
        klen = m + t
        h = self.word_emb(input_ids)  # [b, t, d]
        if cfg.attn_type == "absolute_sinusoid":
            # Positions restart in every segment: the temporal confusion recurrence suffers from.
            h = h + sinusoid(torch.arange(t - 1, -1, -1, device=h.device), cfg.d_model).to(h.dtype)
        h = self.drop(h)
        mask = causal_mask(t, m, h.device, cfg.same_length, mem_len)
        if key_padding is not None:
            if key_padding.shape != (b, klen):
                raise ValueError(f"key_padding has shape {tuple(key_padding.shape)}, expected [b, m + t] = {[b, klen]}")
            # a padding query keeps its own key: a row with every key blocked would be undefined
            own = torch.arange(m, klen, device=h.device)[:, None] == torch.arange(klen, device=h.device)  # [t, k]
            mask = mask | (key_padding.to(h.device)[:, None, :] & ~own)     # [b, t, k]
        pos = self._positions(klen, clamp_len, h.device) if cfg.attn_type in ("relative", "shaw") else None
        shared = (self.r_w_bias, self.r_r_bias) if hasattr(self, "r_w_bias") else None
        hids = []
        for i, layer in enumerate(self.layers):
            hids.append(h)
            if cfg.attn_type == "absolute_learned":
                h = h + self.pos_emb[i, :t].flip(0)
            mem = mems[i] if mems else None
            if cfg.checkpoint_layers and self.training and torch.is_grad_enabled():
                h = checkpoint(layer, h, mem, pos, mask, shared, use_reentrant=False)
            else:
                h = layer(h, mem, pos, mask, shared, cache[i] if cache is not None else None)
        h = self.drop(h)
        new_mems = self._update_mems(hids, mems, mem_len, t, ext_len)
        if cache is not None:
            # keep the keys and values of exactly the positions the new memory holds
            begin, end = self._mem_window(m, t, mem_len, ext_len)
            for c, new_mem in zip(cache, new_mems or [None] * len(cache)):
                c.kv = c.kv[:, :, :, begin:end] if new_mem is not None and c.kv is not None else None
                c.mem = new_mem
        flat = h.reshape(b * t, -1)
        target_lp = None
        if labels is not None:
            # Labels may cover only the last positions (ext_len: the first inputs are context only).
            n = labels.shape[1]
            scored = h[:, t - n:].reshape(b * n, -1)
            target_lp = self.crit.target_log_prob(scored, labels.reshape(-1)).view(b, n)
        full = self.crit.log_prob(flat).view(b, t, -1) if return_log_probs else None
        return TransformerXLOutput(hidden=h, mems=new_mems, target_log_probs=target_lp, log_probs=full)

    @staticmethod
    def _mem_window(m: int, t: int, mem_len: int, ext_len: int) -> tuple[int, int]:
        """[begin, end) of the new memory among the m + t positions [memory, segment]."""
        end = m + max(0, t - ext_len)
        return max(0, end - mem_len), end

    def _update_mems(self, hids: list[Tensor], mems: list[Tensor] | None, mem_len: int, t: int,
                     ext_len: int) -> list[Tensor]:
        """Keep the last mem_len layer inputs, excluding the ext_len extension (stop-gradient)."""
        if mem_len <= 0:
            return []
        m = mems[0].shape[1] if mems else 0
        begin, end = self._mem_window(m, t, mem_len, ext_len)
        if begin >= m:
            # inside the segment: a view of the layer input, which the backward pass keeps anyway
            return [hid[:, begin - m:end - m].detach() for hid in hids]
        with torch.no_grad():
            return [torch.cat([mem[:, begin:], hid[:, :end - m]], 1) for mem, hid in zip(mems, hids)]
