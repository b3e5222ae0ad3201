"""An LSTM language model the size of a GPT-1 decoder: the "LSTM instead of Transformer" row of the
GPT-1 seed paper's Table 5 (Radford et al. 2018, §5: "a single layer 2048 unit LSTM").

Tokens are embedded (the table tied to the output layer, as GPT-1's), read left to right by
``n_layer`` LSTM layers of ``d_hidden`` cells, whose last outputs a linear layer maps back to
``d_model`` (none when d_hidden == d_model), and scored against the same table:
P(u_t | u_<t) = softmax(h_t W_e^T) (seed paper Eq. 2 with the decoder replaced). Dropout on the
embeddings (``dropemb``), between layers and on the last layer's output (``dropout``).

The model has GPT-1's interface (genfeat.models.gpt.GPTLMHeadModel), so the causal LM objective,
the GPT pretraining method (``architecture: lstm_lm``), the zero-shot evaluation and a fine-tuning
adapter treat both alike: ``forward(input_ids, attention_mask=None, *, labels=None,
return_logits=None)`` returns hidden states [..., t, d], logits and ``target_log_probs``; the
special-token table for fine-tuning (``add_special_tokens``, ``token_table``, ``target_log_probs``)
is GPT-1's own code. There is no position table; ``max_position`` only bounds the input length, as
GPT-1's does, so both models are fed the same truncated inputs.

Size. A GPT-1 decoder has about 12 d^2 parameters a layer (attention 4 d^2, feed-forward 8 d^2 with
d_inner = 4d) plus its position table; a layer here has 4 H (d_in + H) + 8 H (d_in = d for the first,
H for the others) and the output map H d + d. :func:`lstm_size_for` picks H for a parameter budget.
(torch's built-in output projection, ``proj_size``, has no oneDNN kernel: a forward and backward
pass of [8, 128] inputs through one such layer of the same parameter count took 1.7 times as long
as this layer and map, on the 2-core CPU VM while it was loaded.)

Axes: b batch, t time, d model width (embedding and projection), H LSTM cells, V vocabulary, S special tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Config
from ..nn.adaptive import check_ids, check_token_input
from .gpt import GPTLMHeadModel


@dataclass
class LSTMLMConfig(Config):
    """Architecture of the LSTM language model."""

    n_token: int = 10000
    """Pretrained vocabulary size V."""
    n_special: int = 0
    """Special tokens S added for fine-tuning, ids V .. V+S-1, in their own table (as GPT-1's)."""
    d_model: int = 256
    """Embedding width d, also the width of the (mapped) output states."""
    d_hidden: int = 1024
    """LSTM cells H per layer."""
    n_layer: int = 1
    """LSTM layers."""
    dropout: float = 0.1
    """Dropout between layers and on the last layer's output."""
    dropemb: float = 0.1
    """Dropout on the embeddings."""
    max_position: int = 512
    """Longest input accepted (no position table; the same bound as GPT-1's for the same truncation)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation of the token tables (as GPT-1's)."""

    def __post_init__(self):
        if min(self.n_token, self.d_model, self.d_hidden, self.n_layer, self.max_position) < 1:
            raise ValueError("n_token, d_model, d_hidden, n_layer and max_position must be positive")
        if self.n_special < 0:
            raise ValueError(f"n_special must be >= 0, got {self.n_special}")
        if self.d_hidden < self.d_model:
            raise ValueError(f"d_hidden ({self.d_hidden}) must be >= d_model ({self.d_model}): the outputs are "
                             "mapped down to d_model")
        if not all(0.0 <= p < 1.0 for p in (self.dropout, self.dropemb)):
            raise ValueError("dropout and dropemb must be in [0, 1)")


@dataclass
class LSTMLMOutput:
    hidden: Tensor
    """[..., t, d] last-layer outputs (mapped to d_model; leading axes as the input's)."""
    logits: Tensor | None = None
    """[..., t, V + S] next-token logits; None when the head was skipped."""
    target_log_probs: Tensor | None = None
    """[..., t] log p(labels) when labels were given."""


def lstm_params(d_model: int, d_hidden: int, n_layer: int) -> int:
    """Parameters of the LSTM layers and the output map (token tables left out)."""
    first = 4 * d_hidden * (d_model + d_hidden) + 8 * d_hidden
    later = (n_layer - 1) * (8 * d_hidden * d_hidden + 8 * d_hidden)
    return first + later + (d_hidden * d_model + d_model if d_hidden != d_model else 0)


def lstm_size_for(budget: int, d_model: int, n_layer: int) -> int:
    """The cells H per layer (at least d_model) whose layers and output map hold the parameter count
    closest to ``budget`` (e.g. a GPT-1 decoder's, token tables left out)."""
    low, high = d_model, d_model
    while lstm_params(d_model, high, n_layer) < budget:
        high *= 2
    while high - low > 1:  # lstm_params grows with H
        mid = (low + high) // 2
        low, high = (mid, high) if lstm_params(d_model, mid, n_layer) < budget else (low, mid)
    return min((low, high), key=lambda h: abs(lstm_params(d_model, h, n_layer) - budget))


class LSTMLMHeadModel(nn.Module):
    """LSTM language model with a tied output layer (module doc).

    ``model(input_ids, attention_mask=None, *, labels=None, return_logits=None) -> LSTMLMOutput``

    Args:
        input_ids: [..., t] ids in [0, V + S), t <= max_position.
        attention_mask: [..., t], 1 for tokens, 0 for padding. The model reads left to right, so
            padding on the right never reaches a real token; padding on the left is refused.
        labels: [..., t] the next token of every position (the causal LM objective's protocol);
            the output's ``target_log_probs`` are their log-probabilities.
        return_logits: compute ``logits`` (default: unless ``labels`` are given).
    """

    # the token tables work as GPT-1's: the same methods (pretrained table + special rows, tied head)
    add_special_tokens = GPTLMHeadModel.add_special_tokens
    token_table = GPTLMHeadModel.token_table
    target_log_probs = GPTLMHeadModel.target_log_probs

    def __init__(self, cfg: LSTMLMConfig):
        super().__init__()
        self.config = cfg
        self.word_emb = nn.Embedding(cfg.n_token, cfg.d_model)
        self.special_emb = nn.Embedding(cfg.n_special, cfg.d_model) if cfg.n_special else None
        self.drop_emb = nn.Dropout(cfg.dropemb)
        self.lstm = nn.LSTM(cfg.d_model, cfg.d_hidden, cfg.n_layer, batch_first=True,
                            dropout=cfg.dropout if cfg.n_layer > 1 else 0.0)
        self.out = nn.Linear(cfg.d_hidden, cfg.d_model) if cfg.d_hidden != cfg.d_model else None
        self.drop = nn.Dropout(cfg.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Token tables and the output map Normal(0, init_std) as GPT-1's (zero bias); LSTM weights
        uniform(±1/sqrt(H)) (torch's default), forget-gate biases 1 so the cells start by keeping their state."""
        for table in (self.word_emb, self.special_emb):
            if table is not None:
                nn.init.normal_(table.weight, 0.0, self.config.init_std)
        if self.out is not None:
            nn.init.normal_(self.out.weight, 0.0, self.config.init_std)
            nn.init.zeros_(self.out.bias)
        bound = 1.0 / math.sqrt(self.config.d_hidden)
        h = self.config.d_hidden
        for name, p in self.lstm.named_parameters():
            nn.init.uniform_(p, -bound, bound)
            if name.startswith("bias_ih"):
                with torch.no_grad():
                    p[h:2 * h] = 1.0  # gates are ordered input, forget, cell, output

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, *, labels: Tensor | None = None,
                return_logits: bool | None = None) -> LSTMLMOutput:
        """The LSTM over the tokens and the tied head, P(u_t | u_<t) = softmax(h_t W_e^T) (module doc; arguments
        in the class docstring).

        Shapes: input_ids, attention_mask, labels [..., t] -> :class:`LSTMLMOutput`: hidden [..., t, d], logits
        [..., t, V + S], target_log_probs [..., t].
        """
        cfg = self.config
        check_token_input(input_ids, "input_ids", "[..., t]")
        shape, t = input_ids.shape, input_ids.shape[-1]
        if t > cfg.max_position:
            raise ValueError(f"input of {t} tokens is longer than the model's max_position {cfg.max_position}: "
                             "truncate or split the text")
        check_ids(input_ids, cfg.n_token + cfg.n_special, "input ids")
        if attention_mask is not None:
            mask = attention_mask.reshape(-1, t).long()
            if (mask[:, 1:] > mask[:, :-1]).any():
                raise ValueError("attention_mask has padding before a token: an LSTM reads left to right, pad on the right")
        table = self.token_table()
        h = self.drop_emb(F.embedding(input_ids.reshape(-1, t), table))  # [b, t, d]
        h, _ = self.lstm(h)  # [b, t, H]
        if self.out is not None:
            h = self.out(h)
        hidden = self.drop(h).view(*shape, -1)
        if return_logits is None:
            return_logits = labels is None
        return LSTMLMOutput(hidden=hidden, logits=F.linear(hidden, table) if return_logits else None,
                            target_log_probs=None if labels is None else self.target_log_probs(hidden, labels))
