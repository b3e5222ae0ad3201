"""XLNet (Yang et al. 2019; thesis §2.2): a Transformer-XL backbone with two-stream attention.

Each layer runs two streams that share every weight (Eq. 2.4):

- the content stream h_i, started from the word embedding of x_i, attends to the memory and to
  the content states of the positions the permutation lets position i see, *including itself*;
- the query stream g_i, started from one trainable vector w (``mask_emb``), attends to the same
  keys but *not* to position i itself: it knows the position z_t it predicts (through the
  relative encodings) but not the token x_{z_t}.

The query stream exists only in pretraining and only for the predicted positions: it is given by
``target_mapping`` [b, n, t] (row p one-hot at the position of the p-th prediction), its states
are [b, n, d], its attention has n query rows (not t, as in HF, which scatters the n queries to
all t positions and gathers them back), and the LM head (tied to the word embeddings, plus a bias)
is applied to those n states only. Since the streams share keys, values, encodings and weights,
they travel through the layers as one [b, t + n, d] tensor (content rows first) and each layer
runs one attention call (the rows' positions given to it) and one feed-forward call for both.
Attention itself is the relative attention of Transformer-XL
(``genfeat.nn.attention``, Eq. 2.3) with bidirectional relative positions (distances k .. -t+1)
and XLNet's relative segment encodings: (q_i + b)^T s_ij with s_ij = s+ when positions i and j
are in the same segment and s- otherwise. The memory of earlier segments (``mems``, ``mem_len``,
``reuse_len``) is visible to every query.

The forward pass takes Hugging Face's named inputs (``input_ids``, ``perm_mask``,
``target_mapping``, ``token_type_ids``, ``attention_mask``, ``mems``) with the same meaning as
``transformers.XLNetLMHeadModel``, so the two can be compared directly (genfeat.interop.hf_xlnet
converts weights both ways). Differences: ``mems`` are [b, m, d] (HF: [m, b, d]); a query row
whose every key is blocked attends to nothing (zero attention output) where HF averages all
values uniformly; ``mem_len`` 0 keeps no memory (HF's ``mem_len=None`` keeps all states); a
``target_mapping`` row must be one-hot (HF also accepts mixtures of positions) or all zeros, which
pads: its logits are computed at position 0 and are meaningless (HF returns LN(g) there).

Axes: b batch, t segment length, m memory length, k = m + t key length, n predicted positions,
d model width, h heads, e head width, V vocabulary, L layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..config import Config
from ..nn.adaptive import check_ids, check_token_input
from ..nn.attention import RelativeMultiHeadAttention, sinusoid
from ..nn.feedforward import PositionwiseFeedForward
from ..nn.layer_norm import OutputSavingLayerNorm


@dataclass
class XLNetConfig(Config):
    """Architecture of an XLNet language model (HF ``XLNetConfig`` names in parentheses)."""

    n_token: int = 32000
    """Vocabulary size V (vocab_size)."""
    d_model: int = 256
    """Model width d."""
    n_layer: int = 4
    """Number of layers L."""
    n_head: int = 4
    """Attention heads h."""
    d_head: int = 64
    """Head width e (HF requires d_model / n_head)."""
    d_inner: int = 1024
    """Feed-forward inner width."""
    ff_activation: Literal["gelu", "relu"] = "gelu"
    """Feed-forward activation (gelu: the exact, erf form)."""
    dropout: float = 0.1
    """Dropout on embeddings, relative encodings, sub-layer outputs and the final states."""
    dropatt: float = 0.1
    """Dropout on attention probabilities (HF uses ``dropout`` for both)."""
    mem_len: int = 0
    """Memory length m returned for the next segment (0: no memory)."""
    reuse_len: int | None = None
    """Only the first reuse_len positions of a segment enter the memory (None: all of them); in
    pretraining the rest of the segment is new text that the next segment does not continue."""
    clamp_len: int = -1
    """Use the same encoding for all distances beyond +-clamp_len (-1: never clamp)."""
    bi_data: bool = False
    """The bidirectional pipeline: the second half of every batch holds text in reversed order and
    attends with negated relative distances (HF ``bi_data``); batches must have an even size."""
    checkpoint_layers: bool = False
    """Recompute each layer in the backward pass instead of storing its activations."""
    recompute_ff: bool = True
    """Keep only the feed-forward block's input for the backward pass and recompute its inner GELU
    activation there (``genfeat.nn.feedforward``): 8 d_inner fewer bytes per row and layer (fp32),
    for one more [rows, d] x [d, d_inner] product per layer in backward. The same function and
    gradients either way."""
    nsp: bool = False
    """Add a next-sentence-prediction head (thesis Table 2.19 row "+ next-sent pred"): a pooler
    (dense + tanh) over the content state of the last position, ``<cls>``, and a 2-way classifier.
    Hugging Face's XLNetLMHeadModel has no such head: an export there leaves it out."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation (initializer_range)."""
    layer_norm_epsilon: float = 1e-12
    """Layer-norm epsilon (layer_norm_eps)."""

    def __post_init__(self):
        if min(self.n_token, self.d_model, self.n_layer, self.n_head, self.d_head, self.d_inner) < 1:
            raise ValueError("n_token, d_model, n_layer, n_head, d_head and d_inner must be positive")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even for sinusoid encodings, got {self.d_model}")
        if self.mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {self.mem_len}")
        if self.reuse_len is not None and self.reuse_len < 1:
            raise ValueError(f"reuse_len must be None or >= 1, got {self.reuse_len}")
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.dropatt < 1.0:
            raise ValueError("dropout and dropatt must be in [0, 1)")


@dataclass
class XLNetOutput:
    logits: Tensor | None
    """[b, n, V] LM logits at the predicted positions (query stream); without ``target_mapping``,
    [b, t, V] at every position (content stream); None when the forward was asked for no logits."""
    hidden: Tensor
    """[b, n, d] (or [b, t, d]) the last-layer states the logits come from."""
    mems: list[Tensor]
    """L tensors [b, m', d]: the new memory (detached), each layer's input over the last mem_len
    reused positions; empty when ``mem_len`` is 0."""
    nsp_logits: Tensor | None = None
    """[b, 2] next-sentence logits at the last position (index 0: B follows A) when the model has
    the NSP head."""


def _rows(x: Tensor, rows: Tensor) -> Tensor:
    """x [b, t, ...] at the positions rows [b, n] -> [b, n, ...]."""
    return x[torch.arange(x.shape[0], device=x.device)[:, None], rows]


class XLNetLayer(nn.Module):
    """Two-stream relative attention and a feed-forward block, each with residual and post layer norm.

    Both streams use the same attention, feed-forward and layer-norm weights; each layer owns its
    biases u (``r_w_bias``), v (``r_r_bias``), the segment bias b (``r_s_bias``) and the segment
    encodings s+, s- (``seg_embed``). The layer norms keep their outputs, which the next products
    keep anyway, rather than their inputs for the backward pass (``genfeat.nn.layer_norm``).
    """

    def __init__(self, cfg: XLNetConfig):
        super().__init__()
        self.attn = RelativeMultiHeadAttention(cfg.d_model, cfg.n_head, cfg.d_head, cfg.dropatt)
        self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
        self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
        self.r_s_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
        self.seg_embed = nn.Parameter(torch.zeros(2, cfg.n_head, cfg.d_head))
        self.attn_norm = OutputSavingLayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.ff = PositionwiseFeedForward(cfg.d_model, cfg.d_inner, cfg.dropout, recompute=cfg.recompute_ff,
                                          activation=cfg.ff_activation)
        self.ff_norm = OutputSavingLayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.drop = nn.Dropout(cfg.dropout)

    def _attend(self, h: Tensor, pos: list[Tensor], mask: Tensor | None, seg_mat: Tensor | None,
                mem: Tensor | None, query: Tensor | None = None, query_pos: Tensor | None = None) -> Tensor:
        """Relative attention with segment terms; with two encodings (``bi_data``) each half of the
        batch attends with its own."""
        args = (h, mask, seg_mat, mem, query, query_pos)
        parts = zip(*(x.chunk(len(pos)) if x is not None else [None] * len(pos) for x in args))
        outs = [self.attn(hp, p, mp, self.r_w_bias, self.r_r_bias, query=qp, seg_mat=sp, seg_embed=self.seg_embed,
                          r_s_bias=self.r_s_bias, pos_max=p.shape[0] - hp.shape[1], mem=memp, query_pos=rp)
                for p, (hp, mp, sp, memp, qp, rp) in zip(pos, parts)]
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def forward(self, x: Tensor, t: int, pos: list[Tensor], mask: Tensor | None, seg_mat: Tensor | None,
                mem: Tensor | None, rows: Tensor | None) -> Tensor:
        """One layer of Eq. 2.4 on both streams at once: they share keys, values, encodings and every
        weight, so their queries go through one attention call and one feed-forward call.

        Args:
            x: [b, t + n, d], the content stream h (t rows) followed by the query stream g (n rows;
                none without a query stream).
            t: length of the content stream.
            pos: [k + t, d] encodings of the distances k .. -t+1, one per part of the batch (with
                ``bi_data`` a second one, of the negated distances, for its second half).
            mask: bool [b, t + n, k] (True = blocked), or None.
            seg_mat: [b, t + n, k, 2] one-hot same / different segment, or None.
            mem: [b, m, d] or None.
            rows: long [b, t + n], the positions of x's rows (0 .. t-1, then the predicted ones);
                None without a query stream.
        Returns:
            The new x.
        """
        a = self._attend(x[:, :t], pos, mask, seg_mat, mem, query=None if rows is None else x, query_pos=rows)
        x = self.attn_norm(x + self.drop(a))
        return self.ff_norm(x + self.ff(x))


class XLNetLMHeadModel(nn.Module):
    """XLNet with the LM head tied to the word embeddings (thesis §2.2).

    ``model(input_ids, perm_mask=None, target_mapping=None, token_type_ids=None, attention_mask=None,
    mems=None, masked_positions=None, return_logits=True)``

    Args:
        input_ids: [b, t] token ids (the sequence in its original order: only the masks encode
            the factorization order).
        perm_mask: [b, t, t], 1 / True where position i may *not* attend to position j (it comes
            at or after i in the factorization order); None: everything is visible.
        target_mapping: [b, n, t], row p one-hot at the position of the p-th prediction (a row of
            zeros pads); None: no query stream, logits at every position from the content stream.
        token_type_ids: [b, t] segment ids (memory positions count as segment 0); None: no
            segment terms.
        attention_mask: [b, t], 1 for tokens and 0 for padding, which no position attends to.
        mems: the ``mems`` of the previous segment, or None / [] to start without memory.
        masked_positions: [b, t] bool, only without ``target_mapping``: the LM head is computed
            only there, from the content stream (logits [n, V], n = its number of True entries, in
            row-major order); so the model is a :class:`~genfeat.objectives.masked_lm.MaskedLMModel`
            ("DAE + Transformer-XL", thesis Table 2.19: pass no ``perm_mask``, every position sees
            every other).
        return_logits: False skips the LM head (``logits`` is None): fine-tuning reads ``hidden``
            only, and the head is the costliest layer at a 32k vocabulary.
    Returns:
        :class:`XLNetOutput`.
    """

    def __init__(self, cfg: XLNetConfig):
        super().__init__()
        self.config = cfg
        self.word_emb = nn.Embedding(cfg.n_token, cfg.d_model)
        self.mask_emb = nn.Parameter(torch.zeros(cfg.d_model))   # w, the query stream's input
        self.layers = nn.ModuleList(XLNetLayer(cfg) for _ in range(cfg.n_layer))
        self.lm_bias = nn.Parameter(torch.zeros(cfg.n_token))
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.nsp:
            self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
            self.nsp_head = nn.Linear(cfg.d_model, 2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if "norm" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("bias") and p.dim() == 1:
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, self.config.init_std)

    def _positions(self, t: int, klen: int, device) -> list[Tensor]:
        """Encodings [k + t, d] of the bidirectional distances k, k-1, ..., -t+1; with ``bi_data``
        also those of the negated distances (for the reversed half of the batch)."""
        cfg = self.config
        dist = torch.arange(klen, -t, -1, device=device)
        if cfg.clamp_len > 0:
            dist = dist.clamp(-cfg.clamp_len, cfg.clamp_len)
        dtype = self.word_emb.weight.dtype
        return [self.drop(sinusoid(d, cfg.d_model).to(dtype)) for d in ((dist, -dist) if cfg.bi_data else (dist,))]

    @staticmethod
    def _mask(b: int, t: int, m: int, perm_mask: Tensor | None, attention_mask: Tensor | None,
              rows: Tensor | None, device) -> Tensor | None:
        """[b, t (+ n), k], True = blocked: the content stream's rows, then (with ``rows``, the
        predicted positions) the query stream's. The memory is always visible; the query stream
        follows ``perm_mask`` and padding, the content stream also sees itself."""
        if perm_mask is None and attention_mask is None:
            return None
        blocked = torch.zeros(b, t, m + t, dtype=torch.bool, device=device)
        if perm_mask is not None:
            blocked[:, :, m:] |= perm_mask.bool()
        if attention_mask is not None:
            blocked[:, :, m:] |= ~attention_mask.bool()[:, None, :]
        query = None if rows is None else _rows(blocked, rows)
        blocked[:, :, m:].diagonal(dim1=1, dim2=2).fill_(False)
        return blocked if query is None else torch.cat([blocked, query], 1)

    @staticmethod
    def _segments(token_type_ids: Tensor | None, rows: Tensor | None, m: int) -> Tensor | None:
        """One-hot [b, t (+ n), k, 2] for the rows of :meth:`_mask`: index 1 where query and key are
        in different segments."""
        if token_type_ids is None:
            return None
        queries = token_type_ids if rows is None else torch.cat([token_type_ids, _rows(token_type_ids, rows)], 1)
        keys = F.pad(token_type_ids, (m, 0))
        return F.one_hot((queries[:, :, None] != keys[:, None, :]).long(), 2)

    def forward(self, input_ids: Tensor, perm_mask: Tensor | None = None, target_mapping: Tensor | None = None,
                token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                mems: list[Tensor] | None = None, masked_positions: Tensor | None = None,
                return_logits: bool = True) -> XLNetOutput:
        """The content stream and, with ``target_mapping``, the query stream (Eq. 2.4) over one segment and its
        memory (arguments in the class docstring).

        Shapes: input_ids, token_type_ids, attention_mask, masked_positions [b, t], perm_mask [b, t, t],
        target_mapping [b, n, t], mems L x [b, m, d] -> :class:`XLNetOutput`: logits [b, n, V] (query stream),
        [n, V] at the n masked positions or [b, t, V] (content stream); hidden [b, n, d] or [b, t, d]; mems
        L x [b, m', d]; nsp_logits [b, 2] (``config.nsp``).
        """
        cfg = self.config
        check_token_input(input_ids, "input_ids", "[b, t]")
        b, t = input_ids.shape
        check_ids(input_ids, cfg.n_token, "input_ids")
        for name, x, shape in (("perm_mask", perm_mask, (b, t, t)), ("token_type_ids", token_type_ids, (b, t)),
                               ("attention_mask", attention_mask, (b, t))):
            if x is not None and tuple(x.shape) != shape:
                raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {shape} for input_ids {(b, t)}")
        if cfg.bi_data and b % 2:
            raise ValueError(f"bi_data needs an even batch (forward and reversed halves), got {b} sequences")
        if target_mapping is not None and (target_mapping.dim() != 3 or tuple(target_mapping.shape[::2]) != (b, t)):
            raise ValueError(f"target_mapping has shape {tuple(target_mapping.shape)}, expected [{b}, n, {t}]")
        if masked_positions is not None and (target_mapping is not None or masked_positions.shape != (b, t)
                                             or masked_positions.dtype != torch.bool):
            raise ValueError(f"masked_positions must be a bool tensor of shape {(b, t)} without target_mapping, got "
                             f"{masked_positions.dtype} {tuple(masked_positions.shape)}"
                             + (" with target_mapping" if target_mapping is not None else ""))
        if target_mapping is not None:
            tm = target_mapping.float()
            # the query rows are gathered at each row's one position, not mixed as a product with HF's would
            if bool(((tm != 0) & (tm != 1)).any() | (tm.sum(-1) > 1).any()):
                raise ValueError("target_mapping rows must be one-hot at the predicted position (or all zero for a "
                                 "padding row): genfeat reads each row's one position, it does not mix positions")
        if mems:
            want = (b, mems[0].shape[1], cfg.d_model)
            if len(mems) != cfg.n_layer or any(tuple(mem.shape) != want for mem in mems):
                raise ValueError(f"mems must be {cfg.n_layer} tensors [b, m, d] = {list(want)} (batch first), got "
                                 f"{len(mems)} of shapes {[list(mem.shape) for mem in mems][:2]}...: Hugging Face's "
                                 "XLNet mems are [m, b, d]; pass [mem.transpose(0, 1) for mem in mems]")
        m = mems[0].shape[1] if mems else 0
        klen = m + t
        x = self.drop(self.word_emb(input_ids))                                             # [b, t, d]
        rows = all_rows = None
        if target_mapping is not None:
            rows = target_mapping.float().argmax(-1)                                        # [b, n]
            g = self.mask_emb.expand(b, rows.shape[1], -1)
            x = torch.cat([x, self.drop(g)], 1)                                             # [b, t + n, d]
            all_rows = torch.cat([torch.arange(t, device=x.device).expand(b, t), rows], 1)
        mask = self._mask(b, t, m, perm_mask, attention_mask, rows, x.device)
        seg_mat = self._segments(token_type_ids, rows, m)
        pos = self._positions(t, klen, x.device)
        hids = []
        for i, layer in enumerate(self.layers):
            hids.append(x[:, :t])
            args = (x, t, pos, mask, seg_mat, mems[i] if m else None, all_rows)
            if cfg.checkpoint_layers and self.training and torch.is_grad_enabled():
                x = checkpoint(layer, *args, use_reentrant=False)
            else:
                x = layer(*args)
        out = self.drop(x[:, t:] if rows is not None else x)
        nsp = None
        if cfg.nsp:  # from the content state of the last position, <cls>
            nsp = self.nsp_head(torch.tanh(self.pooler(self.drop(x[:, t - 1]))))
        logits = None
        if return_logits:
            head_in = out[masked_positions] if masked_positions is not None else out            # [n, d]
            logits = F.linear(head_in, self.word_emb.weight, self.lm_bias)
        return XLNetOutput(logits=logits, hidden=out, mems=self._update_mems(hids, mems if m else None),
                           nsp_logits=nsp)

    def _update_mems(self, hids: list[Tensor], mems: list[Tensor] | None) -> list[Tensor]:
        """Each layer's input over the first reuse_len positions, appended to the old memory; the
        last mem_len positions are kept (stop-gradient).

        Each new memory is one contiguous [b, m', d] tensor: a slice of [memory, segment] (or of the
        layer input, whose rows include the query stream) would keep the whole tensor it views
        alive through the next segment, and the next segment's key and value product would copy
        it again to flatten it (and keep that copy for its backward pass)."""
        cfg = self.config
        if cfg.mem_len <= 0:
            return []
        with torch.no_grad():
            new = []
            for i, hid in enumerate(hids):
                cur = hid[:, :cfg.reuse_len] if cfg.reuse_len is not None else hid
                if mems is not None and cur.shape[1] < cfg.mem_len:
                    cur = torch.cat([mems[i][:, cur.shape[1] - cfg.mem_len:], cur], 1)
                new.append(cur[:, -cfg.mem_len:].contiguous())
            return new
