"""BERT (Devlin et al. 2019), the masked-LM baseline of XLNet (thesis §2.2, Table 2.19).

A Transformer encoder: embeddings of the token, its absolute (learned) position and its segment
("token type") are summed and layer-normalised; each of L post-LN layers is self-attention over
the whole sequence (no causal mask) and a GELU feed-forward block, each followed by dropout, the
residual connection and a layer norm. Pretraining heads:

- masked LM: transform (dense + GELU + layer norm), then the decoder tied to the word embeddings
  plus a bias. It is computed only at the positions asked for (``masked_positions``): the loss
  needs the 15 % masked tokens, and the V-way product is the largest in the model.
- next-sentence prediction (optional, ``nsp``): pooler (dense + tanh over the first token,
  [CLS]) and a 2-way classifier.

The forward pass takes Hugging Face's named inputs (``input_ids``, ``token_type_ids``,
``attention_mask``), so ``BertForMaskedLM`` of transformers and this model can be compared
directly (genfeat.interop.hf_bert converts weights both ways).

Axes: b batch, t sequence length, n positions the MLM head is computed at, d model width,
h heads, e head width (d / h), V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..config import Config
from ..nn.adaptive import check_ids, check_token_input
from ..nn.attention import MultiHeadAttention
from ..nn.feedforward import PositionwiseFeedForward


@dataclass
class BertConfig(Config):
    """Architecture of a BERT encoder with its pretraining heads (HF names in parentheses)."""

    n_token: int = 30522
    """Vocabulary size V (vocab_size)."""
    d_model: int = 768
    """Model width d (hidden_size)."""
    n_layer: int = 12
    """Number of layers L (num_hidden_layers)."""
    n_head: int = 12
    """Attention heads h (num_attention_heads); must divide d_model."""
    d_inner: int = 3072
    """Feed-forward inner width (intermediate_size)."""
    dropout: float = 0.1
    """Dropout on embeddings and on each sub-layer's output (hidden_dropout_prob)."""
    dropatt: float = 0.1
    """Dropout on attention probabilities (attention_probs_dropout_prob)."""
    max_position: int = 512
    """Longest sequence: rows of the learned position table (max_position_embeddings)."""
    n_type: int = 2
    """Token types (segments) (type_vocab_size)."""
    pad_id: int | None = 0
    """Id of the padding token, whose embedding gets no gradient (pad_token_id); None: no such id."""
    nsp: bool = False
    """Add the next-sentence-prediction head (pooler + 2-way classifier)."""
    checkpoint_layers: bool = False
    """Recompute each layer in the backward pass instead of storing its activations (less memory,
    about one more forward pass of time; dropout masks are replayed, so gradients are unchanged)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation (initializer_range)."""
    layer_norm_epsilon: float = 1e-12
    """Layer-norm epsilon (layer_norm_eps)."""

    def __post_init__(self):
        if min(self.n_token, self.d_model, self.n_layer, self.n_head, self.d_inner, self.max_position,
               self.n_type) < 1:
            raise ValueError("n_token, d_model, n_layer, n_head, d_inner, max_position and n_type must be positive")
        if self.d_model % self.n_head:
            raise ValueError(f"n_head ({self.n_head}) must divide d_model ({self.d_model})")
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.dropatt < 1.0:
            raise ValueError("dropout and dropatt must be in [0, 1)")
        if self.pad_id is not None and not 0 <= self.pad_id < self.n_token:
            raise ValueError(f"pad_id {self.pad_id} is outside the vocabulary [0, {self.n_token})")


@dataclass
class BertOutput:
    hidden: Tensor
    """[b, t, d] last-layer states."""
    logits: Tensor | None = None
    """Masked-LM logits: [b, t, V] at every position, or [n, V] at the ``masked_positions``
    (row-major order, i.e. the rows of ``full_logits[masked_positions]``); None when no head was asked for."""
    nsp_logits: Tensor | None = None
    """[b, 2] next-sentence logits (index 0: B follows A) when the model has the NSP head."""


class BertLayer(nn.Module):
    """Post-LN Transformer layer: h = LN(h + drop(Attn(h))); h = LN(h + drop(FF_gelu(h)))."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_head, dropatt=cfg.dropatt)
        self.attn_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        # BERT has no dropout on the inner activation; the output dropout is self.drop
        self.ff = PositionwiseFeedForward(cfg.d_model, cfg.d_inner, 0.0, activation="gelu")
        self.ff_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h: Tensor, keep: Tensor | None) -> Tensor:
        h = self.attn_norm(h + self.drop(self.attn(h, keep)[0]))
        return self.ff_norm(h + self.drop(self.ff(h)))


class BertModel(nn.Module):
    """The encoder: embeddings and L layers, without heads.

    ``model(input_ids, token_type_ids=None, attention_mask=None) -> [b, t, d]``

    Args:
        input_ids: [b, t] token ids, t <= max_position.
        token_type_ids: [b, t] segment ids in [0, n_type) (default all 0).
        attention_mask: [b, t], 1 (or True) for tokens to attend to, 0 for padding (default all 1).
            Every row needs at least one 1 (its [CLS]): a row of only padding gives NaN states.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.word_emb = nn.Embedding(cfg.n_token, cfg.d_model, padding_idx=cfg.pad_id)
        self.pos_emb = nn.Embedding(cfg.max_position, cfg.d_model)
        self.type_emb = nn.Embedding(cfg.n_type, cfg.d_model)
        self.emb_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.n_layer))

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """The last layer's states (arguments in the class docstring).

        Shapes: input_ids, token_type_ids, attention_mask [b, t] -> [b, t, d].
        """
        cfg = self.config
        check_token_input(input_ids, "input_ids", "[b, t]")
        b, t = input_ids.shape
        if t > cfg.max_position:
            raise ValueError(f"input of {t} tokens is longer than the {cfg.max_position} positions the model has: "
                             "truncate or split the text")
        check_ids(input_ids, cfg.n_token, "input ids")
        h = self.word_emb(input_ids) + self.pos_emb.weight[:t]
        if token_type_ids is None:
            h = h + self.type_emb.weight[0]
        else:
            check_ids(token_type_ids, cfg.n_type, "token type ids")
            h = h + self.type_emb(token_type_ids)
        h = self.drop(self.emb_norm(h))
        keep = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # [b, 1, 1, t]
        recompute = cfg.checkpoint_layers and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            h = checkpoint(layer, h, keep, use_reentrant=False) if recompute else layer(h, keep)
        return h


class BertForMaskedLM(nn.Module):
    """BERT with the masked-LM head (and the NSP head when ``config.nsp``).

    ``model(input_ids, token_type_ids=None, attention_mask=None, masked_positions=None, *, return_logits=True)``

    Args:
        input_ids, token_type_ids, attention_mask: as for :class:`BertModel`.
        masked_positions: [b, t] bool: compute the MLM head only there (logits [n, V], n = its
            number of True entries); None: at every position (logits [b, t, V], as Hugging Face).
        return_logits: False skips the MLM head (logits None), e.g. for features.
    Returns:
        :class:`BertOutput`.

    This is the backbone side of :class:`genfeat.objectives.masked_lm.MaskedLMModel`.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.bert = BertModel(cfg)
        self.mlm_dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlm_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.mlm_bias = nn.Parameter(torch.zeros(cfg.n_token))  # the decoder's weight is bert.word_emb's
        if cfg.nsp:
            self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
            self.nsp_head = nn.Linear(cfg.d_model, 2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, init_std) weights, zero biases, unit layer norms, a zero padding embedding (as BERT)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, self.config.init_std)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        if self.config.pad_id is not None:
            with torch.no_grad():
                self.bert.word_emb.weight[self.config.pad_id].zero_()
        nn.init.zeros_(self.mlm_bias)

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """The masked-LM head: decoder(LN(GELU(dense(hidden)))), decoder tied to the word embeddings.

        Shapes: hidden [..., d] -> [..., V].
        """
        x = self.mlm_norm(F.gelu(self.mlm_dense(hidden)))
        return F.linear(x, self.bert.word_emb.weight, self.mlm_bias)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                masked_positions: Tensor | None = None, *, return_logits: bool = True) -> BertOutput:
        """The encoder's states and the heads' scores (arguments in the class docstring).

        Shapes: input_ids, token_type_ids, attention_mask, masked_positions [b, t] -> :class:`BertOutput`: hidden
        [b, t, d], logits [n, V] at the n masked positions (else [b, t, V]), nsp_logits [b, 2] (``config.nsp``).
        """
        h = self.bert(input_ids, token_type_ids, attention_mask)
        logits = None
        if return_logits:
            if masked_positions is not None:
                if masked_positions.shape != input_ids.shape or masked_positions.dtype != torch.bool:
                    raise ValueError(f"masked_positions must be a bool tensor of the input's shape "
                                     f"{tuple(input_ids.shape)}, got {masked_positions.dtype} "
                                     f"{tuple(masked_positions.shape)}")
                logits = self.mlm_logits(h[masked_positions])  # [n, V]
            else:
                logits = self.mlm_logits(h)                    # [b, t, V]
        nsp = self.nsp_head(torch.tanh(self.pooler(h[:, 0]))) if self.config.nsp else None
        return BertOutput(hidden=h, logits=logits, nsp_logits=nsp)
