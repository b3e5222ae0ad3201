"""GPT-1 (Radford et al. 2018, "Improving Language Understanding by Generative Pre-Training").

A Transformer decoder: the token embedding and a learned absolute position embedding are summed
(seed paper Eq. 2: h_0 = U W_e + W_p); each of L post-LN layers is causal self-attention and a
GELU (tanh approximation) feed-forward block, each followed by dropout, the residual connection
and a layer norm. The language-model head is the token embedding, transposed (tied, no bias):
P(u) = softmax(h_L W_e^T). Pretraining maximises L1 (Eq. 1), the causal LM likelihood; fine-tuning
maximises L3 = L2 + λ·L1 (Eq. 5), for which the model has an optional multiple-choice head (the
linear layer over the final state of the extract token, Eq. 3, as in ``OpenAIGPTDoubleHeadsModel``).

Special tokens of fine-tuning. The task-aware input transformations (seed paper §3.3, Fig. 1)
need start, delimiter and extract tokens the pretrained vocabulary does not have. They get ids
V, V+1, ... after the pretrained vocabulary and their own embedding table (``special_emb``, S
rows, ``config.n_special``); the pretrained table ``word_emb`` keeps its shape and values, so a
pretrained checkpoint loads unchanged and the pretrained table can be frozen while the new rows
train. ``model.add_special_tokens(3)`` appends three rows and returns their ids. Both tables
together are the model's vocabulary of V + S tokens: inputs may use any of them and the LM head
scores all of them (the auxiliary LM of fine-tuning also predicts the delimiters).

As in Hugging Face's OpenAI GPT, ``token_type_ids`` (when given) are embedded with the token table
and added, and the forward pass takes the same named inputs, so ``OpenAIGPTLMHeadModel`` /
``OpenAIGPTDoubleHeadsModel`` of transformers and these models compare directly
(genfeat.interop.hf_gpt converts weights both ways). Unlike Hugging Face's, the forward pass
returns the keys and values of every layer (``use_cache``) and takes them back (``past``), so
generation feeds one new token per step (:meth:`GPTLMHeadModel.generate`).

Axes: b batch (of sequences; with multiple choice, b·k), k choices, t new tokens, m cached tokens
(past), d model width, h heads, e head width (d / h), V pretrained vocabulary, S special tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Config
from ..generation import check_sampling, left_padding, sample_top_k
from ..nn.adaptive import check_ids, check_token_input, full_target_log_prob
from ..nn.attention import MultiHeadAttention, causal_mask
from ..nn.feedforward import PositionwiseFeedForward

KeyValues = tuple[tuple[Tensor, Tensor], ...]
"""Per layer, the cached keys and values, each [b, h, m, e]."""


@dataclass
class GPTConfig(Config):
    """Architecture of a GPT-1 decoder and its heads (Hugging Face OpenAIGPTConfig names in parentheses)."""

    n_token: int = 40478
    """Pretrained vocabulary size V (vocab_size, less n_special)."""
    n_special: int = 0
    """Special tokens S added for fine-tuning, ids V .. V+S-1, in their own table (module doc)."""
    d_model: int = 768
    """Model width d (n_embd)."""
    n_layer: int = 12
    """Number of layers L (n_layer)."""
    n_head: int = 12
    """Attention heads h (n_head); must divide d_model."""
    d_inner: int = 3072
    """Feed-forward inner width (Hugging Face fixes it to 4 d_model)."""
    dropout: float = 0.1
    """Dropout on each sub-layer's output (resid_pdrop)."""
    dropemb: float = 0.1
    """Dropout on the summed embeddings (embd_pdrop)."""
    dropatt: float = 0.1
    """Dropout on attention probabilities (attn_pdrop)."""
    max_position: int = 512
    """Longest sequence, cached tokens included: rows of the learned position table (n_positions)."""
    mc_head: bool = False
    """Add the multiple-choice head: one score per choice from the final state of its extract token."""
    mc_dropout: float = 0.1
    """Dropout on the extract token's state before the multiple-choice head (summary_first_dropout)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation (initializer_range)."""
    layer_norm_epsilon: float = 1e-5
    """Layer-norm epsilon (layer_norm_epsilon)."""

    def __post_init__(self):
        if min(self.n_token, self.d_model, self.n_layer, self.n_head, self.d_inner, self.max_position) < 1:
            raise ValueError("n_token, d_model, n_layer, n_head, d_inner and max_position must be positive")
        if self.n_special < 0:
            raise ValueError(f"n_special must be >= 0, got {self.n_special}")
        if self.d_model % self.n_head:
            raise ValueError(f"n_head ({self.n_head}) must divide d_model ({self.d_model})")
        if not all(0.0 <= p < 1.0 for p in (self.dropout, self.dropemb, self.dropatt, self.mc_dropout)):
            raise ValueError("dropout, dropemb, dropatt and mc_dropout must be in [0, 1)")


@dataclass
class GPTOutput:
    hidden: Tensor
    """[..., t, d] last-layer states (leading axes as the input's)."""
    logits: Tensor | None = None
    """[..., t, V + S] next-token logits; None when the LM head was skipped."""
    mc_logits: Tensor | None = None
    """[b, k] multiple-choice scores (input [b, k, t]) when the model has the head."""
    target_log_probs: Tensor | None = None
    """[..., t] log p(labels) when labels were given (:meth:`GPTLMHeadModel.target_log_probs`)."""
    past: KeyValues | None = None
    """Keys and values of the cached and the new tokens (``use_cache``), to pass back as ``past``."""


class GPTLayer(nn.Module):
    """Post-LN decoder layer: h = LN(h + drop(Attn(h))); h = LN(h + drop(FF_gelu(h)))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_head, dropatt=cfg.dropatt)
        self.attn_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        # GPT-1 has no dropout on the inner activation; the output dropout is self.drop
        self.ff = PositionwiseFeedForward(cfg.d_model, cfg.d_inner, 0.0, activation="gelu_tanh")
        self.ff_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h: Tensor, keep: Tensor | None, past: tuple[Tensor, Tensor] | None
                ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        a, present = self.attn(h, keep, past, causal=True)
        h = self.attn_norm(h + self.drop(a))
        return self.ff_norm(h + self.drop(self.ff(h))), present


class GPTLMHeadModel(nn.Module):
    """GPT-1 with the tied LM head (and the multiple-choice head when ``config.mc_head``).

    ``model(input_ids, attention_mask=None, token_type_ids=None, mc_token_ids=None, past=None, *,
    position_ids=None, labels=None, use_cache=False, return_logits=None) -> GPTOutput``

    Args:
        input_ids: [..., t] ids in [0, V + S); the multiple-choice head scores [b, k, t] input, one row per
            choice (other shapes get no ``mc_logits``: the LM alone, for generation and scoring). m + t <= max_position.
        attention_mask: [..., m + t], 1 for tokens to attend to, 0 for padding (default all 1). A query
            with no token to attend to (padding at the start of a left-padded row) attends to itself alone, so
            that padding gets finite states, which no token attends to.
        token_type_ids: [..., t] ids embedded with the token table and added (Hugging Face's
            convention); default none.
        mc_token_ids: [b, k] position of each choice's extract token (default the last position).
        past: the ``past`` of an earlier output for the same sequences (m cached tokens); the new
            tokens take positions m .. m + t - 1 unless ``position_ids`` say otherwise.
        position_ids: [..., t] (or [t]) rows of the position table for the new tokens (default m .. m + t - 1):
            left-padded rows count their positions from their first token (as :meth:`generate` does).
        labels: [..., t] the next token of every position: the output's ``target_log_probs`` are
            their log-probabilities, the terms of L1 (Eq. 1), as the causal LM objective
            (genfeat.objectives.causal_lm) asks of a model; not a loss, no shift.
        use_cache: return the keys and values (``past``) for the next call.
        return_logits: False skips the LM head (logits None), e.g. for features; default (None):
            True unless ``labels`` are given (their log-probabilities need no [..., t, V + S] logits).
    Returns:
        :class:`GPTOutput`.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.word_emb = nn.Embedding(cfg.n_token, cfg.d_model)
        self.special_emb = nn.Embedding(cfg.n_special, cfg.d_model) if cfg.n_special else None
        self.pos_emb = nn.Embedding(cfg.max_position, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropemb)
        self.layers = nn.ModuleList(GPTLayer(cfg) for _ in range(cfg.n_layer))
        if cfg.mc_head:
            self.mc_drop = nn.Dropout(cfg.mc_dropout)
            self.mc_proj = nn.Linear(cfg.d_model, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, init_std) weights, zero biases, unit layer norms (as GPT-1)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, self.config.init_std)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def add_special_tokens(self, n: int) -> list[int]:
        """Append ``n`` special-token embeddings (Normal(0, init_std)) after the existing ones; the
        pretrained table and earlier special rows are kept as they are. Returns the new ids.

        The new rows are a new parameter: call this before building the optimizer."""
        if n < 1:
            raise ValueError(f"add_special_tokens needs n >= 1, got {n}")
        cfg, old = self.config, self.special_emb
        ref = self.word_emb.weight
        new = nn.Embedding(cfg.n_special + n, cfg.d_model, device=ref.device, dtype=ref.dtype)
        nn.init.normal_(new.weight, 0.0, cfg.init_std)
        if old is not None:
            with torch.no_grad():
                new.weight[:cfg.n_special] = old.weight
        self.special_emb = new
        self.config = dataclasses.replace(cfg, n_special=cfg.n_special + n)
        return list(range(cfg.n_token + cfg.n_special, cfg.n_token + cfg.n_special + n))

    def token_table(self) -> Tensor:
        """[V + S, d] the embeddings of every token, pretrained and special (the LM head's weight)."""
        if self.special_emb is None:
            return self.word_emb.weight
        return torch.cat([self.word_emb.weight, self.special_emb.weight])

    def target_log_probs(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """log P(targets | hidden) under the tied LM head, the terms of the causal LM likelihood L1
        (seed paper Eq. 1), without keeping the logits and their log-softmax as two [n, V + S]
        buffers (nn.adaptive.full_target_log_prob): the training path; ``logits`` is for inspection.

        Shapes: hidden [..., d], targets [...] ids in [0, V + S) -> [...] in fp32.
        """
        check_ids(targets, self.config.n_token + self.config.n_special, "targets")
        flat = full_target_log_prob(hidden.reshape(-1, hidden.shape[-1]), self.token_table(), targets.reshape(-1))
        return flat.view(targets.shape)

    def _keep(self, t: int, m: int, attention_mask: Tensor | None, device) -> Tensor | None:
        """[b or 1, 1, t, m + t] attention mask, or None where causal order alone suffices."""
        if attention_mask is None and (m == 0 or t == 1):
            return None
        keep = ~causal_mask(t, m, device)[None, None]
        if attention_mask is not None:
            if attention_mask.shape[-1] != m + t:
                raise ValueError(f"attention_mask covers {attention_mask.shape[-1]} tokens, expected the "
                                 f"{m} cached and {t} new ones")
            keep = keep & attention_mask.reshape(-1, m + t).bool()[:, None, None, :]
            # a query with nothing to attend to is a softmax over no key: NaN in some SDPA kernels, 0 in others
            # (torch 2.13's CPU ones), passed on through the keys and values of its padding position; it
            # attends to itself instead, the same finite state on every device
            itself = torch.arange(m + t, device=device) == m + torch.arange(t, device=device)[:, None]  # [t, m + t]
            keep = keep | (itself & ~keep.any(-1, keepdim=True))
        return keep

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                mc_token_ids: Tensor | None = None, past: KeyValues | None = None, *,
                position_ids: Tensor | None = None, labels: Tensor | None = None, use_cache: bool = False,
                return_logits: bool | None = None) -> GPTOutput:
        """The decoder over the new tokens after the m cached ones, h_0 = U W_e + W_p (Eq. 2), and the tied LM
        head h_L W_e^T (arguments in the class docstring).

        Shapes: input_ids, token_type_ids, labels [..., t] ([b, k, t] for the multiple-choice head), attention_mask
        [..., m + t], mc_token_ids [b, k], position_ids [..., t] or [t] -> :class:`GPTOutput`: hidden [..., t, d],
        logits [..., t, V + S], mc_logits [b, k] (``config.mc_head``), target_log_probs [..., t], past (``use_cache``)
        L x (keys, values) [b', h, m + t, e] (b' the leading axes flattened).
        """
        cfg = self.config
        check_token_input(input_ids, "input_ids")
        if input_ids.dim() == 0:
            raise ValueError("input_ids must be [..., t] (e.g. [b, t]; [b, k, t] for multiple choice), got a scalar")
        shape, t = input_ids.shape, input_ids.shape[-1]
        m = 0 if past is None else past[0][0].shape[2]
        if m + t > cfg.max_position:
            raise ValueError(f"input of {m + t} tokens (cached ones included) is longer than the "
                             f"{cfg.max_position} positions the model has: truncate or split the text")
        n_vocab = cfg.n_token + cfg.n_special
        check_ids(input_ids, n_vocab, "input ids")
        lead = tuple(input_ids.shape[:-1])
        if attention_mask is not None and tuple(attention_mask.shape[:-1]) != lead:
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, the input ids {tuple(shape)}: "
                             f"it needs the shape {lead} + (cached + new tokens,)")
        if position_ids is not None and tuple(position_ids.shape) not in ((t,), tuple(shape)):
            raise ValueError(f"position_ids has shape {tuple(position_ids.shape)}, it needs the input ids' "
                             f"{tuple(shape)} or ({t},)")
        table = self.token_table()
        if position_ids is None:
            pos = self.pos_emb.weight[m:m + t]                                                  # [t, d]
        else:
            check_ids(position_ids, cfg.max_position, "position ids")
            pos = self.pos_emb(position_ids.reshape(-1, t))                                     # [b or 1, t, d]
        h = F.embedding(input_ids.reshape(-1, t), table) + pos                                  # [b, t, d]
        if token_type_ids is not None:
            check_ids(token_type_ids, n_vocab, "token type ids")
            h = h + F.embedding(token_type_ids.reshape(-1, t), table)
        h = self.drop(h)
        keep = self._keep(t, m, attention_mask, h.device)
        present = []
        for n, layer in enumerate(self.layers):
            h, kv = layer(h, keep, None if past is None else past[n])
            present.append(kv)
        hidden = h.view(*shape, -1)
        mc = None
        if cfg.mc_head and input_ids.dim() == 3:   # choices [b, k, t]; [b, t] is the LM's (generation, scoring)
            mc = self.mc_logits(hidden, mc_token_ids)
        if return_logits is None:
            return_logits = labels is None
        target_lp = None if labels is None else self.target_log_probs(hidden, labels)
        return GPTOutput(hidden=hidden, logits=F.linear(hidden, table) if return_logits else None, mc_logits=mc,
                         past=tuple(present) if use_cache else None, target_log_probs=target_lp)

    def mc_logits(self, hidden: Tensor, mc_token_ids: Tensor | None) -> Tensor:
        """The multiple-choice head (seed paper Eq. 3 before the softmax over choices): a linear score
        of each choice's extract-token state.

        Shapes: hidden [b, k, t, d], mc_token_ids [b, k] (default t - 1) -> [b, k].
        """
        if hidden.dim() != 4:
            raise ValueError(f"the multiple-choice head needs input ids [b, k, t], got {hidden.dim() - 1} axes")
        if mc_token_ids is None:
            state = hidden[:, :, -1]
        else:
            check_ids(mc_token_ids, hidden.shape[2], "mc_token_ids")
            index = mc_token_ids[..., None, None].expand(-1, -1, 1, hidden.shape[-1])
            state = hidden.gather(2, index).squeeze(2)  # [b, k, d]
        return self.mc_proj(self.mc_drop(state)).squeeze(-1)

    @torch.no_grad()
    def generate(self, context: Tensor, length: int, *, top_k: int = 40, temperature: float = 1.0,
                 generator: torch.Generator | None = None, use_cache: bool = True,
                 attention_mask: Tensor | None = None, special_tokens: bool = False) -> Tensor:
        """Top-k sampling continuing ``context`` (top_k 1: greedy), via genfeat.generation.sample_top_k.

        With ``use_cache`` the context is fed once and each step feeds only the newest token,
        attending over the cached keys and values (O(t) per step); without, every step recomputes
        the whole sequence (O(t^2)), which gives the same tokens.

        Prompts of different lengths go in one batch left-padded, with ``attention_mask``: each row's
        positions count from its first token and no token attends to padding, so a row continues as
        its prompt alone would (greedy: the same tokens, up to floating-point ties).

        Args:
            context: [t] or [b, t] ids (at least one token); t + length <= max_position.
            length: number of tokens to sample.
            top_k, temperature, generator: as for genfeat.generation.generate.
            attention_mask: [b, t] ([t] for a [t] context) 1 at prompt tokens, 0 at the padding before them
                (default all 1).
            special_tokens: also sample the fine-tuning special tokens (ids V .. V+S-1: start, delimiter,
                extract), which mark task inputs and spell no text; default: the pretrained vocabulary alone.
        Returns:
            [length] or [b, length] sampled ids (the context is not repeated).
        Raises:
            ValueError: a context too long for the positions; a mask of another shape, not 0/1, padding
                after a token (right padding) or a row without a token.
        """
        check_sampling(context, top_k, temperature, length)
        squeeze = context.dim() == 1
        ids = (context[None] if squeeze else context).to(self.word_emb.weight.device)
        if ids.shape[1] + length > self.config.max_position:
            raise ValueError(f"{ids.shape[1]} context and {length} new tokens exceed the model's "
                             f"{self.config.max_position} positions")
        mask = positions = step_pos = None
        if attention_mask is not None:
            mask = (~left_padding(attention_mask, context)).long().to(ids.device)
            positions = step_pos = (mask.cumsum(1) - 1).clamp(min=0)                # [b, t]
        was_training = self.training
        self.eval()
        seq, feed, past = ids, ids, None
        for _ in range(length):
            out = self(feed, attention_mask=mask, position_ids=step_pos, past=past, use_cache=use_cache)
            logits = out.logits[:, -1]
            if not special_tokens:
                logits = logits[:, :self.config.n_token]   # the special ids come last: sampling stops before them
            token = sample_top_k(logits, top_k, temperature, generator)
            seq = torch.cat([seq, token], dim=1)
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(token)], dim=1)
                positions = torch.cat([positions, positions[:, -1:] + 1], dim=1)
                step_pos = positions[:, -1:] if use_cache else positions
            feed, past = (token, out.past) if use_cache else (seq, None)
        self.train(was_training)
        result = seq[:, ids.shape[1]:]
        return result[0] if squeeze else result
